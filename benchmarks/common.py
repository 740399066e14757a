"""Shared benchmark plumbing: data generation, timing with peak-memory deltas, a PostgreSQL server, reports.

Peak memory is the growth of this process's peak RSS during one step (Linux ``VmHWM``, reset before
each step through ``/proc/self/clear_refs``), so imported libraries do not count against a step.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.sample_rows import COLUMNS, write_sample_csv


def _code_under_test() -> None:
    """Refuse to time another checkout's code. An editable install maps ``connector_ops.resources`` and
    ``connector_ops.pipelines`` (top-level folders of the repository) to the tree it was installed from, so a
    benchmark run from a second worktree (the "before" side of an A/B) would time that tree's actions over
    the installed tree's store, and compare the new code with itself. Symbolic links in the worktree's
    ``connector_ops`` folder make it find its own."""
    import importlib.util

    root = Path(__file__).resolve().parents[1]
    for name in ("connector_ops", "connector_ops.resources", "connector_ops.pipelines"):
        spec = importlib.util.find_spec(name)
        origin = Path(spec.origin).resolve() if spec and spec.origin else None
        if origin is None or root not in origin.parents:
            raise SystemExit(f"{name} comes from {origin}, not from {root}: run this checkout's own code with\n"
                             f"  ln -s ../resources {root}/connector_ops/resources\n"
                             f"  ln -s ../pipelines {root}/connector_ops/pipelines")


_code_under_test()
DATA_DIR = Path(__file__).parent / ".data"


def sample_csv(rows: int) -> Path:
    """A deterministic CSV of ``rows`` rows × 8 short string columns (cached under benchmarks/.data)."""
    DATA_DIR.mkdir(exist_ok=True)
    path = DATA_DIR / f"rows_{rows}.csv"
    if not path.exists():
        write_sample_csv(path.with_suffix(".tmp"), rows).replace(path)
    return path


def _status(field: str, pid: int | str = "self") -> int:
    """A memory figure of ``/proc/<pid>/status`` in bytes (0 when the process is gone)."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as handle:
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
    runs: tuple[float, ...] = ()  # every run's seconds when ``seconds`` is their median


#: one step measured both ways: (our label, our call), (the baseline's label, its call)
Pair = tuple[tuple[str, Callable[[], Any]], tuple[str, Callable[[], Any]]]


def measure_alternating(pairs: dict[str, Pair], repeat: int) -> tuple[dict[str, Measurement], dict[str, Measurement]]:
    """Each step ours then its baseline, back to back, ``repeat`` rounds (:func:`alternating`); per side and
    step the median time, every run's time and the largest peak."""
    out: tuple[dict[str, Measurement], dict[str, Measurement]] = ({}, {})
    for step, ((name, fn), (base_name, base_fn)) in pairs.items():
        out[0][step], out[1][step] = alternating(
            repeat, lambda _round, n=name, f=fn: measure(n, f), lambda _round, n=base_name, f=base_fn: measure(n, f))
    return out


def alternating(repeat: int, ours: Callable[[int], Measurement],
                theirs: Callable[[int], Measurement]) -> tuple[Measurement, Measurement]:
    """``repeat`` rounds of ours then the baseline (each given the round's number, to set up unmeasured what
    it needs); the median of each side.

    A short step measured once, minutes away from its baseline, moves with the host's speed: the two sides
    alternate so a slow spell lands on both, and the median drops a single slow run."""
    runs: tuple[list[Measurement], list[Measurement]] = ([], [])
    for round_ in range(repeat):
        runs[0].append(ours(round_))
        runs[1].append(theirs(round_))
    return median_of(runs[0]), median_of(runs[1])


def medians(rounds: list[dict[str, Measurement]]) -> dict[str, Measurement]:
    """Rounds that each measure several things (ours and the baselines, in turn): the median of each."""
    return {key: median_of([measured[key] for measured in rounds]) for key in rounds[0]}


def median_of(runs: list[Measurement]) -> Measurement:
    """One step's runs as one measurement: the median time, every run's time, the largest peak."""
    import statistics

    times = tuple(m.seconds for m in runs)
    return Measurement(runs[0].name, statistics.median(times), max(m.peak_mib for m in runs), runs[-1].value, times)


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


@dataclass
class Settling:
    """What a SQLite step left to background work once it returned (at its commit): the time its
    write-ahead-log checkpoints still took (the loader process's and this process's checkpoint thread),
    and the loader process's peak RSS (and growth, when it was already running before the step)."""

    settle_seconds: float
    loader_peak_mib: float | None = None
    loader_delta_mib: float | None = None

    def text(self) -> str:
        out = f"checkpoints after return {self.settle_seconds:.2f} s"
        if self.loader_peak_mib is not None:
            grew = "started in this step" if self.loader_delta_mib is None else f"Δ {self.loader_delta_mib:.0f} MiB"
            out += f"; loader peak RSS {self.loader_peak_mib:.0f} MiB ({grew})"
        return out


def measure_settled(name: str, fn: Callable[[], Any], store: Any) -> tuple[Measurement, Settling | None]:
    """``measure``, then wait for the step's background checkpoints so the next step runs alone; on SQLite
    also what that took and the loader process's memory (``None`` on PostgreSQL)."""
    from connector_ops.resources.virtual_files import checkpoints

    path = store.sqlite_file
    if path is None:
        return measure(name, fn), None
    from connector_ops.resources.virtual_files.sqlite_loader import loader_for

    loader = loader_for(path)
    before_pid = loader.pid
    before = 0
    if before_pid is not None:
        with contextlib.suppress(OSError), open(f"/proc/{before_pid}/clear_refs", "w") as handle:
            handle.write("5")
        before = _status("VmRSS:", before_pid)
    m = measure(name, fn)
    pid = loader.pid
    start = time.perf_counter()
    loader.sync()
    checkpoints.wait()
    settling = Settling(time.perf_counter() - start)
    if pid is not None:
        peak = _status("VmHWM:", pid)
        settling.loader_peak_mib = peak / 2**20
        settling.loader_delta_mib = (peak - before) / 2**20 if pid == before_pid else None
    print(f"  {'':55s} {settling.text()}", flush=True)
    return m, settling


def settled(m: Measurement, settling: Settling) -> Measurement:
    """``m`` with the background checkpoints it left counted in."""
    return Measurement(f"{m.name} + its checkpoints", m.seconds + settling.settle_seconds, m.peak_mib, m.value)


def warm_up(resources: dict[str, Any], csv_path: Path, work: Path) -> None:
    """Pay the process's one-time costs before any step is measured, and show them: a Push of the file's
    first 8 MiB imports the action's modules, and an Arrow parse of the same bytes starts Arrow's thread
    pool and its allocator's per-thread arenas in this process (≈ +60–90 MiB on the first parse, kept for
    reuse; Push itself no longer parses with Arrow here on either database, NDJSON on PostgreSQL and the
    DataFrame steps do). A Push of its first 1,000 rows as Parquet (types inferred) loads pyarrow's Parquet and
    compute libraries, and pandas, which pyarrow imports at its first conversion (≈ +35–45 MiB together).
    Otherwise they would land on whichever step comes first; a step's peak Δ is then what the step itself
    holds, the figure that must stay flat from 1M to 4M rows."""
    import io

    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from connector_ops import invoke
    from connector_ops.resources.virtual_files.csv_columns import csv_batches

    slice_path = work / "warm-up.csv"
    with csv_path.open("rb") as source:
        head = source.read(8 << 20)
    head = head[: head.rfind(b"\n") + 1]
    slice_path.write_bytes(head)
    pf = resources["platform_files"].add_file(slice_path).to_json()
    parquet_path = work / "warm-up.parquet"
    pq.write_table(pacsv.read_csv(slice_path).slice(0, 1000), parquet_path)  # its imports, not a working set
    parquet = resources["platform_files"].add_file(parquet_path).to_json()

    def push_and_parse() -> int:
        invoke("etl.push", {"platformFile": pf}, resources)
        invoke("etl.push", {"platformFile": parquet}, resources)
        data = io.BytesIO(head[head.index(b"\n") + 1:])
        return sum(batch.num_rows for batch in csv_batches(data, len(COLUMNS), ","))

    measure("warm-up: Push (CSV, Parquet) and Arrow parse of the first 8 MiB (not a step)", push_and_parse)


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


def ratio_row(label: str, ours: Measurement, baseline: Measurement, target: float | None) -> str:
    ratio = ours.seconds / baseline.seconds if baseline.seconds else float("inf")
    goal = "—" if target is None else f"≤ {target}× ({'meets' if ratio <= target else 'misses'})"
    shown = f"**{ratio:.2f}×**"
    if len(ours.runs) > 1 and len(ours.runs) == len(baseline.runs):  # alternating runs: each round's own ratio
        each = sorted(a / b for a, b in zip(ours.runs, baseline.runs, strict=True))
        shown += f" (median of {len(each)}; rounds {each[0]:.2f}–{each[-1]:.2f})"
    return (f"| {label} | {ours.seconds:.2f} s | {baseline.seconds:.2f} s ({baseline.name}) | {shown} | "
            f"{goal} | {ours.peak_mib:.0f} MiB | {baseline.peak_mib:.0f} MiB |")


TABLE_HEADER = ("| step | connector-ops | raw baseline | ratio | target | our peak Δ | baseline peak Δ |\n"
                "|---|---|---|---|---|---|---|")
