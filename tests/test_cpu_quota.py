"""What we size by the CPUs, under a container's CPU quota made by the kernel (tests/cgroups.py): a 0.5-CPU
quota on this 2-core machine allows one CPU, where ``os.cpu_count()`` and everything sized by it say two.

Celery workers are started inside such a cgroup as deploy/Procfile starts them, on a Redis broker of their
own, and asked the size of their pool (``inspect stats``, as ``celery inspect stats`` asks). A process that
pushes a Parquet file there reports the size of Arrow's CPU thread pool afterwards.

The multiprocess executor's run worker is started inside the cgroup (its forked step processes with it), as
a code server's run worker is inside its pod; each step of a job of independent steps writes a marker as it
starts and as it ends, and waits for the other step to start before it ends (for at most ``wait`` seconds,
a bound, never measured), so steps that may overlap do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from connector_ops.environment import EXECUTOR_VARIABLE
from connector_ops.pipelines.executors import BROKER_VARIABLE, MAX_CONCURRENT_VARIABLE, job_executor
from tests.cgroups import cgroup, command_in
from tests.deployment import Process, redis_server, wait_for
from tests.servers import free_port
from tests.test_deployment import worker_command

ROOT = Path(__file__).resolve().parents[1]
#: the folder the steps write their markers into, and how long a step waits for the others to start
MARKERS_VARIABLE, WAIT_VARIABLE = "CONNECTOR_OPS_TEST_MARKERS", "CONNECTOR_OPS_TEST_WAIT"
STEPS = ("first", "second")
HALF_A_CPU = {"cpu.cfs_period_us": 100_000, "cpu.cfs_quota_us": 50_000}
#: a quota that allows one CPU too, at twice the speed (for the tests where the quota only has to be there)
ONE_CPU = {"cpu.cfs_period_us": 100_000, "cpu.cfs_quota_us": 100_000}
#: forked step processes from a forkserver that preloads this module only (the shipped default preloads the
#: whole Definitions: seconds more per run, for nothing this test looks at)
FORKSERVER = {"start_method": {"forkserver": {"preload_modules": ["tests.test_cpu_quota"]}}}
NOTICE = "Multiprocess executor: up to 1 step at a time: the container's CPU quota is 0.5 CPU"


def _step(name: str) -> dg.OpDefinition:
    @dg.op(name=name)
    def step() -> None:
        """Record its start, wait until every step has started (or the wait is over), record its end."""
        folder = Path(os.environ[MARKERS_VARIABLE])
        _mark(folder, f"start {name}")
        deadline = time.monotonic() + float(os.environ[WAIT_VARIABLE])
        while time.monotonic() < deadline and not all(f"start {s}" in _marks(folder) for s in STEPS):
            time.sleep(0.05)
        _mark(folder, f"end {name}")

    return step


def _mark(folder: Path, line: str) -> None:
    with open(folder / "marks", "a", encoding="utf-8") as marks:  # one short append: never interleaved
        marks.write(line + "\n")


def _marks(folder: Path) -> list[str]:
    path = folder / "marks"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def independent_job() -> dg.JobDefinition:
    """Two steps that depend on nothing, under the executor ``CONNECTOR_OPS_EXECUTOR=multiprocess`` gives
    every job; module level, so that the step processes rebuild it (reconstructable)."""
    steps = [_step(name) for name in STEPS]

    @dg.job(executor_def=job_executor({EXECUTOR_VARIABLE: "multiprocess"}))
    def independent() -> None:
        for step in steps:
            step()

    return independent


def run_main() -> None:
    """Child-process entry point: one run of :func:`independent_job` on ``$DAGSTER_HOME``'s instance, with the
    multiprocess config of ``argv[1]``; prints its success and the messages of its engine events."""
    config = {"execution": {"config": {"multiprocess": {**FORKSERVER, **json.loads(sys.argv[1])}}}}
    with dg.DagsterInstance.get() as instance, \
            dg.execute_job(dg.reconstructable(independent_job), instance=instance, run_config=config) as result:
        engine = [str(e.message) for e in result.all_events if e.is_engine_event]
        print("RESULT " + json.dumps({"success": result.success, "engine": engine}))


def most_at_once(marks: list[str]) -> int:
    """How many steps were running at the same moment, at most, by their markers' order."""
    running = most = 0
    for mark in marks:
        running += 1 if mark.startswith("start ") else -1
        most = max(most, running)
    return most


def run_in(folder: Path, tmp_path: Path, config: dict[str, Any], env: dict[str, str], wait: float) -> dict[str, Any]:
    """A run of :func:`independent_job` by a run worker started in the cpu cgroup ``folder``: its result, and
    the steps' markers."""
    home, markers = tmp_path / "dagster_home", tmp_path / "markers"
    home.mkdir()
    markers.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    child_env = {name: value for name, value in os.environ.items() if name != MAX_CONCURRENT_VARIABLE}
    child_env.update({"DAGSTER_HOME": str(home), MARKERS_VARIABLE: str(markers), WAIT_VARIABLE: str(wait), **env})
    code = "from tests.test_cpu_quota import run_main; run_main()"
    proc = subprocess.run(command_in([folder], [sys.executable, "-c", code, json.dumps(config)]), cwd=ROOT,
                          env=child_env, capture_output=True, text=True, timeout=600)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-3000:]
    report = json.loads(line.removeprefix("RESULT "))
    assert report["success"], report["engine"]
    return {**report, "marks": _marks(markers)}


def test_a_run_under_half_a_cpu_runs_one_step_at_a_time_and_says_why(tmp_path: Path) -> None:
    """Dagster's default, ``multiprocessing.cpu_count()``, ran both steps at once on this 2-core machine (64
    on a 64-core node) in a container allowed half a CPU. Each step waits for the other for 5 s at most: long
    enough for the second to start if the executor allowed it, short for a run that must wait it out once."""
    with cgroup("cpu", HALF_A_CPU) as cpu:
        run = run_in(cpu, tmp_path, {}, {}, wait=5)
    assert [m for m in run["engine"] if "at a time" in m] == [
        f"{NOTICE} (max_concurrent in the run config or {MAX_CONCURRENT_VARIABLE} sets another number)"]
    assert most_at_once(run["marks"]) == 1, run["marks"]
    assert sorted(run["marks"]) == sorted(f"{e} {s}" for s in STEPS for e in ("start", "end"))


@pytest.mark.parametrize("setting", ["run config", "variable"])
def test_an_explicit_number_of_steps_wins_over_the_quota(tmp_path: Path, setting: str) -> None:
    """``max_concurrent`` in the run config, and Dagster's variable, keep their precedence, and the run says
    nothing of the quota. (Both also held before the quota was read: what this guards is that they still win.)"""
    config, env = ({"max_concurrent": 2}, {}) if setting == "run config" else ({}, {MAX_CONCURRENT_VARIABLE: "2"})
    with cgroup("cpu", ONE_CPU) as cpu:
        run = run_in(cpu, tmp_path, config, env, wait=120)  # the second step starts long before that
    assert not [m for m in run["engine"] if "at a time" in m], run["engine"]
    assert most_at_once(run["marks"]) == 2, run["marks"]


def test_without_a_quota_the_run_says_nothing(tmp_path: Path) -> None:
    """No quota: as many steps at once as the CPUs the process may run on, and no line about it."""
    with cgroup("cpu", {}) as cpu:
        run = run_in(cpu, tmp_path, {}, {}, wait=120 if len(os.sched_getaffinity(0)) > 1 else 1)
    assert not [m for m in run["engine"] if "at a time" in m], run["engine"]
    assert most_at_once(run["marks"]) == min(len(STEPS), len(os.sched_getaffinity(0))), run["marks"]


def test_a_celery_workers_pool_is_sized_by_its_quota_unless_set(tmp_path: Path) -> None:
    """Two workers with the default pool (prefork), each in a cgroup of its own: one with no size set, under
    half a CPU — Celery's default, ``billiard.cpu_count()``, made it 2 here — and one told
    ``CELERY_WORKER_CONCURRENCY=2`` under a quota of one CPU, which keeps its 2 (as it did before)."""
    from celery import Celery

    port = free_port()
    broker = f"redis://127.0.0.1:{port}/0"
    env = {**os.environ, "CONNECTOR_OPS_HOME": str(tmp_path / "home"), BROKER_VARIABLE: broker}
    env.pop("CELERY_WORKER_CONCURRENCY", None)
    redis = redis_server(port, tmp_path, env)
    workers: list[Process] = []
    try:
        with cgroup("cpu", HALF_A_CPU) as half, cgroup("cpu", ONE_CPU) as one:
            try:
                for name, folder, extra in (("quota", half, {}), ("told", one, {"CELERY_WORKER_CONCURRENCY": "2"})):
                    command = command_in([folder], worker_command("-n", f"{name}@%h"))
                    workers.append(Process(name, command, {**env, **extra}, tmp_path))
                wait_for(lambda: all("ready." in w.log() for w in workers), "the Celery workers ready", 300, workers)
                app = Celery(broker=broker)
                try:
                    stats = app.control.inspect(timeout=10).stats() or {}
                finally:
                    app.close()
            finally:  # (before their cgroups go, which would kill what is left in them)
                for worker in workers:
                    worker.stop()
    finally:
        redis.stop()
    pools = {node.split("@")[0]: reply["pool"] for node, reply in stats.items()}
    logs = {w.name: w.log() for w in workers}
    assert {name: (pool["max-concurrency"], len(pool["processes"])) for name, pool in pools.items()} == {
        "quota": (1, 1), "told": (2, 2)}, pools
    assert "a pool of 1: the container's CPU quota is 0.5 CPU (--concurrency or CELERY_WORKER_CONCURRENCY " \
           "sets another size)" in logs["quota"]
    assert "a pool of" not in logs["told"]


#: a process that pushes a small Parquet file (SQLite, its home from the environment), then prints the size of
#: Arrow's CPU thread pool, which decoded its columns
PUSH_PARQUET = """
import io, json
import pyarrow as pa, pyarrow.parquet as pq
from connector_ops import invoke
from connector_ops.environment import resources_for
sink = io.BytesIO()
pq.write_table(pa.table({"a": ["x", "y"], "b": [1.5, 2.0]}), sink)
pf = resources_for()["platform_files"].add_bytes(sink.getvalue(), "t.parquet", "application/octet-stream")
invoke("etl.push", {"platformFile": pf.to_json()})
print(json.dumps(pa.cpu_count()))
"""


@pytest.mark.parametrize(("quota", "env", "threads"), [
    (HALF_A_CPU, {}, 1),  # pyarrow's own default: the host's cores
    (HALF_A_CPU, {"OMP_NUM_THREADS": "2"}, 2),  # chosen: kept (as before)
    ({}, {}, os.cpu_count()),  # no quota: the host's (as before)
], ids=["quota", "OMP_NUM_THREADS", "no quota"])
def test_a_parquet_push_decodes_with_as_many_arrow_threads_as_the_quota_allows(
        tmp_path: Path, quota: dict[str, int], env: dict[str, str], threads: int) -> None:
    child_env = {name: value for name, value in os.environ.items()
                 if not name.startswith(("CONNECTOR_OPS_", "OMP_"))}
    child_env.update({"CONNECTOR_OPS_HOME": str(tmp_path / "home"), **env})
    with cgroup("cpu", quota) as cpu:
        out = subprocess.run(command_in([cpu], [sys.executable, "-c", PUSH_PARQUET]), cwd=ROOT, env=child_env,
                             capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.splitlines()[-1]) == threads
