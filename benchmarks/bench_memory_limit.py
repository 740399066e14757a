"""The smallest container each ETL step runs in: the CLI inside real memory cgroups (SQLite).

    .venv/bin/python benchmarks/bench_memory_limit.py                        # every case below
    .venv/bin/python benchmarks/bench_memory_limit.py --cases 4m --steps pull-parquet

Each step is one ``connector-ops invoke`` process, as a pod's step is. It runs first without a limit (its
maximum RSS from ``wait4`` and its wall time), then inside a fresh memory cgroup per try (swap included;
:mod:`tests.cgroups`, v1 or v2), on a ladder of limits searched by bisection for the smallest one it
completes in: exit 0 and no OOM kill counted by the cgroup. A limit counts page cache as well as the
process's own memory (the database file read, the export written), which the kernel reclaims under
pressure, so near its edge a step runs slower before it is killed: the wall times in a limit are reported
too. The files are pushed outside any cgroup, once per case, into a SQLite store in a temporary folder.

Cases: ``1m`` — benchmarks/common.py ``sample_csv`` (8 short columns), Validate with bench_etl_transforms's
rules and a Join with a tenth of it as there; ``wide`` — 70,000 rows of 1 KiB (tests/sample_rows.py), more
table pages than a connection cached before; ``4m`` — the 4M-row file, for memory that should stay flat.
Run as root on Linux (cgroups are written); needs no network.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_etl_transforms import SCHEMA
from benchmarks.common import sample_csv
from tests.cgroups import cgroup, command_in, memory_limited, oom_kills
from tests.sample_rows import write_wide_csv

CLI = str(Path(sys.executable).parent / "connector-ops")
MIB = 1 << 20
#: the limits tried, MiB: the CLI alone (Python, SQLAlchemy, pydantic, the store) needs ≈ 60
LADDER = [40, 48, 56, 64, 72, 80, 88, 96, 112, 128, 136, 144, 160, 176, 192, 224, 256, 320, 384, 512, 768, 1024]
#: a try that runs longer than this is taken for thrashing at its limit, as a failure
TIMEOUT = 600


@dataclass
class Run:
    """One process: how it ended and what it took."""

    ok: bool
    seconds: float
    max_rss_kib: int
    detail: str


def run(argv: Sequence[str], environ: dict[str, str], limit_mib: int | None = None) -> Run:
    """``argv`` to its end (inside a memory cgroup of ``limit_mib`` when given)."""
    def start(command: Sequence[str]) -> Run:
        began = time.perf_counter()
        with tempfile.TemporaryFile() as err:
            child = subprocess.Popen(command, env=environ, stdout=subprocess.DEVNULL, stderr=err)
            try:
                _, status, usage = _wait(child.pid, began + TIMEOUT)
            except TimeoutError:
                child.kill()
                child.wait()
                return Run(False, time.perf_counter() - began, 0, f"over {TIMEOUT} s")
            err.seek(0)
            tail = err.read().decode(errors="replace").strip().splitlines()[-1:]
        code = child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        return Run(code == 0, time.perf_counter() - began, usage.ru_maxrss, f"exit {code} {' '.join(tail)}"[:200])

    if limit_mib is None:
        return start(argv)
    with cgroup("memory", memory_limited(limit_mib * MIB)) as folder:
        done = start(command_in([folder], argv))
        kills = oom_kills(folder)
    if kills:
        done.ok, done.detail = False, f"{kills} OOM kill(s); {done.detail}"
    return done


def _wait(pid: int, deadline: float) -> tuple[int, int, Any]:
    """``os.wait4`` with a deadline (polled: a child's rusage is only had from the wait that reaps it)."""
    while True:
        reaped, status, usage = os.wait4(pid, os.WNOHANG)
        if reaped:
            return reaped, status, usage
        if time.perf_counter() > deadline:
            raise TimeoutError
        time.sleep(0.05)


def smallest(argv: Sequence[str], environ: dict[str, str]) -> tuple[int | None, Run | None, list[str]]:
    """The smallest limit of :data:`LADDER` ``argv`` completes in (bisection: a step that fits in a limit
    fits in any larger one), the run there, and each try as ``limit:ok``."""
    low, high = -1, len(LADDER) - 1  # LADDER[high] is tried first; low: the largest index known to fail
    found = run(argv, environ, LADDER[high])
    tries = [f"{LADDER[high]}:{'ok' if found.ok else 'no'}"]
    if not found.ok:
        return None, None, tries
    while high - low > 1:
        middle = (low + high) // 2
        attempt = run(argv, environ, LADDER[middle])
        tries.append(f"{LADDER[middle]}:{'ok' if attempt.ok else 'no'}")
        if attempt.ok:
            high, found = middle, attempt
        else:
            low = middle
    return LADDER[high], found, tries


@dataclass
class Case:
    """A file pushed into a store of its own, and the steps to run on it."""

    name: str
    rows: int
    make: Callable[[Path, int], Path]
    steps: tuple[str, ...]


def _payloads(vf: str, right: str | None) -> dict[str, tuple[str, dict[str, Any]]]:
    payloads = {
        "validate": ("etl.validate", {"content": vf, "schema": SCHEMA}),
        "pull-csv": ("etl.pull", {"virtualFileId": vf, "exportType": "csv", "exportName": "out.csv"}),
        "pull-json": ("etl.pull", {"virtualFileId": vf, "exportType": "json", "exportName": "out.json"}),
        "pull-parquet": ("etl.pull", {"virtualFileId": vf, "exportType": "parquet", "exportName": "out.parquet"}),
    }
    if right is not None:
        payloads["join"] = ("etl.join", {"join": {"left": {"virtualFileId": vf, "customId": "l", "key": "id"},
                                                  "right": {"virtualFileId": right, "customId": "r", "key": "id"}}})
    return payloads


def _pushed(environ: dict[str, str], path: Path) -> tuple[dict[str, Any], str]:
    """``(platform file, virtual file id)`` of ``path`` stored and pushed without a limit."""
    added = subprocess.run([CLI, "files", "add", str(path)], env=environ, capture_output=True, text=True, check=True)
    pf = json.loads(added.stdout)
    pushed = subprocess.run([CLI, "invoke", "--no-progress", "etl.push", json.dumps({"platformFile": pf})],
                            env=environ, capture_output=True, text=True, check=True)
    return pf, json.loads(pushed.stdout)["virtualFileId"]


def measure_case(case: Case, steps: frozenset[str], work: Path) -> None:
    """Print the report's rows for ``case``."""
    folder = work / case.name
    folder.mkdir()
    environ = {**os.environ, "CONNECTOR_OPS_HOME": str(folder / "home"),
               "CONNECTOR_OPS_DATABASE_URL": f"sqlite:///{folder / 'store.db'}"}
    pf, vf = _pushed(environ, case.make(folder, case.rows))
    right = _pushed(environ, sample_csv(case.rows // 10))[1] if "join" in case.steps else None
    payloads = {"push": ("etl.push", {"platformFile": pf}), **_payloads(vf, right)}
    for step in (s for s in case.steps if s in steps):
        action, payload = payloads[step]
        argv = [CLI, "invoke", "--no-progress", action, json.dumps(payload)]
        free = run(argv, environ)
        if not free.ok:
            raise SystemExit(f"{case.name} {step} failed without a limit: {free.detail}")
        limit, there, tries = smallest(argv, environ)
        shown = f"**{limit} MiB**" if limit else f"none up to {LADDER[-1]} MiB"
        there_time = f"{there.seconds:.1f} s" if there else ""
        print(f"| {case.name} | {step} | {free.max_rss_kib / 1024:.0f} MiB | {free.seconds:.1f} s | {shown} "
              f"| {there_time} | {' '.join(tries)} |", flush=True)


ETL_STEPS = ("push", "validate", "join", "pull-csv", "pull-json", "pull-parquet")
CASES = {
    "1m": Case("1m", 1_000_000, lambda folder, rows: sample_csv(rows), ETL_STEPS),
    "wide": Case("wide", 70_000, lambda folder, rows: write_wide_csv(folder / "wide.csv", rows, 1024),
                 ("push", "pull-csv", "pull-json", "pull-parquet")),
    "4m": Case("4m", 4_000_000, lambda folder, rows: sample_csv(rows), ("push", "pull-csv", "pull-parquet")),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES), help=f"of {', '.join(CASES)}")
    parser.add_argument("--steps", default=",".join(ETL_STEPS), help=f"of {', '.join(ETL_STEPS)}")
    args = parser.parse_args()
    steps = frozenset(args.steps.split(","))
    print("| file | step | max RSS, no limit | time, no limit | smallest limit | time there | tries (MiB:ok/no) |")
    print("|---|---|---|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory(dir="/var/tmp") as work:
        for name in args.cases.split(","):
            measure_case(CASES[name], steps, Path(work))


if __name__ == "__main__":
    main()
