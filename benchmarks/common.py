"""Shared benchmark plumbing: data generation, timing with peak-memory deltas, a PostgreSQL server, reports.

Peak memory is the growth of this process's peak RSS during one step (Linux ``VmHWM``, reset before
each step through ``/proc/self/clear_refs``), so imported libraries do not count against a step.
"""

from __future__ import annotations

import contextlib
import csv
import os
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).parent / ".data"
CITIES = [f"City-{i:04d}" for i in range(1000)]
CATEGORIES = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
COLUMNS = ["id", "name", "city", "email", "amount", "date", "category", "note"]


def sample_csv(rows: int) -> Path:
    """A deterministic CSV of ``rows`` rows × 8 short string columns (cached under benchmarks/.data)."""
    DATA_DIR.mkdir(exist_ok=True)
    path = DATA_DIR / f"rows_{rows}.csv"
    if path.exists():
        return path
    rnd = random.Random(rows)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        for i in range(rows):
            writer.writerow([
                i, f"name-{rnd.randrange(10**6)}", rnd.choice(CITIES), f"user{i}@example.com",
                f"{rnd.uniform(0, 1000):.2f}", f"2026-{rnd.randint(1, 12):02d}-{rnd.randint(1, 28):02d}",
                rnd.choice(CATEGORIES), "quoted, note" if i % 10 == 0 else "plain",
            ])
    tmp.replace(path)
    return path


def _status(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    return 0


def reset_peak() -> None:
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


@dataclass
class Measurement:
    name: str
    seconds: float
    peak_mib: float
    value: Any = None


def measure(name: str, fn: Callable[[], Any]) -> Measurement:
    import gc

    gc.collect()
    reset_peak()
    before = _status("VmRSS:")
    start = time.perf_counter()
    value = fn()
    seconds = time.perf_counter() - start
    peak = max(_status("VmHWM:") - before, 0) / 2**20
    print(f"  {name:55s} {seconds:8.2f} s  peak +{peak:7.1f} MiB", flush=True)
    return Measurement(name, seconds, peak, value)


@contextlib.contextmanager
def postgres_url() -> Iterator[str]:
    """``CONNECTOR_OPS_BENCH_DATABASE_URL`` or a throwaway pgserver for the run."""
    url = os.environ.get("CONNECTOR_OPS_BENCH_DATABASE_URL")
    if url:
        yield url
        return
    import pgserver

    server = pgserver.get_server(tempfile.mkdtemp(prefix="bench-pg-"), cleanup_mode="delete")
    try:
        yield server.get_uri().replace("postgresql://", "postgresql+psycopg://", 1)
    finally:
        server.cleanup()


def ratio_row(label: str, ours: Measurement, baseline: Measurement, target: float) -> str:
    ratio = ours.seconds / baseline.seconds if baseline.seconds else float("inf")
    verdict = "meets" if ratio <= target else "misses"
    return (f"| {label} | {ours.seconds:.2f} s | {baseline.seconds:.2f} s ({baseline.name}) | **{ratio:.2f}×** | "
            f"≤ {target}× ({verdict}) | {ours.peak_mib:.0f} MiB | {baseline.peak_mib:.0f} MiB |")


TABLE_HEADER = ("| step | connector-ops | raw baseline | ratio | target | our peak Δ | baseline peak Δ |\n"
                "|---|---|---|---|---|---|---|")
