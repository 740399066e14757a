"""UI launches of ``sales_report`` per executor on a deployment like docs/deployment.md's, against Dagster's default.

Starts the processes of ``tests/deployment.py`` (PostgreSQL instance from deploy/dagster.yaml, code servers,
webserver, daemon, Redis, two Celery workers) and launches through GraphQL, as the launchpad does, timing
launch → SUCCESS as the UI shows it. The baseline, in the same run on the same servers: Dagster's default
executor (multiprocess, a *spawned* interpreter per step).

    .venv/bin/python -m benchmarks.bench_deploy [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import postgres_url
from tests.deployment import BIN, Process, create_database, deployment, redis_server, wait_for
from tests.servers import free_port

SPAWN = {"execution": {"config": {"multiprocess": {"start_method": {"spawn": {}}}}}}


def timed_runs(d, location: str, count: int, run_config: dict | None = None) -> list[float]:
    """Launch ``count`` runs at once; seconds from the first launch to each run's SUCCESS."""
    started = time.monotonic()
    run_ids = [d.launch("sales_report", location, run_config) for _ in range(count)]
    seconds = []
    for run_id in run_ids:
        result = d.wait(run_id, timeout=900)
        assert result["status"] == "SUCCESS", (run_id, result)
        seconds.append(time.monotonic() - started)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2, help="sequential runs per executor (median reported)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-deploy-"))
    with postgres_url() as server_url:
        pg_url, drop = create_database(server_url)
        redis_port = free_port()
        env = {"DAGSTER_PG_URL": pg_url, "DAGSTER_MAX_CONCURRENT_RUNS": "4",
               "CONNECTOR_OPS_HOME": str(base / "home_celery"), "CONNECTOR_OPS_DATABASE_URL": server_url,
               "CONNECTOR_OPS_EXECUTOR": "celery",
               "CONNECTOR_OPS_SHARED_STORAGE": "true",  # the workers run on this host, beside the code server
               "CONNECTOR_OPS_CELERY_BROKER_URL": f"redis://127.0.0.1:{redis_port}/0",
               "CONNECTOR_OPS_CELERY_BACKEND_URL": f"redis://127.0.0.1:{redis_port}/1"}
        locations = {"default": {"CONNECTOR_OPS_EXECUTOR": "", "CONNECTOR_OPS_HOME": str(base / "home_default")},
                     "forked": {"CONNECTOR_OPS_EXECUTOR": "multiprocess",
                                "CONNECTOR_OPS_HOME": str(base / "home_forked")},
                     "celery": {}}
        try:
            with deployment(base, env, locations, free_port) as d:
                d.add(redis_server(redis_port, d.logs, d.env))
                workers = [d.add(Process(f"worker{i}", [
                    str(BIN / "celery"), "-A", "connector_ops.pipelines.celery_app", "worker", "-Q", "dagster",
                    "-l", "INFO", "--pool=solo", "--prefetch-multiplier=1", "-n", f"worker{i}@%h"], d.env, d.logs))
                    for i in (1, 2)]
                wait_for(lambda: all("ready." in w.log() for w in workers), "workers ready", 120, workers)
                rows: list[tuple[str, list[float]]] = []

                def measured(label: str, seconds: list[float]) -> None:
                    rows.append((label, seconds))  # shown as it comes: a later failure keeps what was measured
                    print(f"{label}: {', '.join(f'{s:.1f}' for s in seconds)} s", flush=True)

                measured("Dagster default: multiprocess, spawn per step (baseline)",
                         [timed_runs(d, "forked", 1, SPAWN)[0] for _ in range(args.repeat)])
                measured("in_process (connector-ops default)",
                         [timed_runs(d, "default", 1)[0] for _ in range(args.repeat)])
                measured("multiprocess, forkserver with preloaded Definitions",
                         [timed_runs(d, "forked", 1)[0] for _ in range(args.repeat)])
                measured("celery, 2 workers, first run (cold workers)", [timed_runs(d, "celery", 1)[0]])
                measured("celery, 2 workers, warm", [timed_runs(d, "celery", 1)[0] for _ in range(args.repeat)])
                concurrent = {}
                for loc in ("default", "celery"):
                    concurrent[loc] = max(timed_runs(d, loc, 4))
                    print(f"4 concurrent runs, {loc}: {concurrent[loc]:.1f} s", flush=True)
        finally:
            drop()
    baseline = statistics.median(rows[0][1])
    print(f"load average at the end: {os.getloadavg()[0]:.1f}; median of {args.repeat} sequential runs\n")
    print("| executor | launch → SUCCESS (s) | ratio to Dagster's default |\n|---|---|---|")
    for label, seconds in rows:
        median = statistics.median(seconds)
        print(f"| {label} | {median:.1f} ({', '.join(f'{s:.1f}' for s in seconds)}) | {median / baseline:.2f}× |")
    print("\n| 4 concurrent runs | all four done (s) |\n|---|---|")
    for loc, seconds in concurrent.items():
        print(f"| {loc} | {seconds:.1f} |")


if __name__ == "__main__":
    main()
