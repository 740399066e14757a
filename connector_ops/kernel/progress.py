"""Progress reporting for long work, decoupled from where it is shown.

Actions call :func:`track` without knowing their caller; the entry point decides how progress looks by
installing a reporter factory with :func:`reporting_to`: a bar (:func:`tqdm_reporter`), throttled
log lines in Dagster ops, nothing by default (library use, tests).
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Literal, Protocol, TypeVar

from connector_ops.kernel.errors import UpstreamError
from connector_ops.kernel.scoped import scoped


class Reporter(Protocol):
    def update(self, n: int) -> object: ...  # object: what it returns is not read (tqdm's: whether it drew)
    def close(self) -> None: ...


ReporterFactory = Callable[[str, int | None, str], Reporter]

#: how the work a reporter followed ended: finished, raised an error, or interrupted (Ctrl-C, Jupyter's Stop,
#: Dagster's Terminate: a ``BaseException`` that is not an ``Exception``); or, for a pass that another follows
#: when it fails (``track(…, then_again=True)``: a Push's fast reader), gave up for that other to read again
Outcome = Literal["done", "failed", "stopped", "gave up"]


class _Silent:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


_factory: contextvars.ContextVar[ReporterFactory | None] = contextvars.ContextVar("progress", default=None)
#: the reporter of the innermost :func:`track` block open in this context, which :func:`tick` keeps alive
_open: contextvars.ContextVar[Reporter | None] = contextvars.ContextVar("progress_open", default=None)


def showing() -> bool:
    """Whether progress is shown here (a reporter factory installed): what only a bar needs, such as a row
    count for its end, is worth its cost only then (a count is a scan of the file on PostgreSQL)."""
    return _factory.get() is not None


@contextlib.contextmanager
def reporting_to(factory: ReporterFactory | None) -> Iterator[None]:
    """Within this block, :func:`track` reports through ``factory(description, total, unit)``."""
    with scoped(_factory, factory):
        yield


@contextlib.contextmanager
def track(description: str, total: int | None = None, unit: str = "B", *,
          then_again: bool = False) -> Iterator[Reporter]:
    """A progress reporter for one piece of work; ``update(n)`` adds ``n`` units done.

    The reporter is told how the work ended: a reporter whose class sets ``takes_outcome = True`` gets
    ``close(outcome)`` (:data:`Outcome`), so that a log line of a failed step does not read as a finished
    one; any other reporter (a ``tqdm`` bar, an older one) gets ``close()``. ``then_again``: a pass that
    another reads again when it fails, so its error ends it as ``"gave up"``, not ``"failed"``: a Push that
    succeeds row by row after its fast reader gave up logged "push x.csv failed at …" (an upstream failure,
    which ends the Push, still fails it)."""
    factory = _factory.get()
    reporter: Reporter = factory(description, total, unit) if factory else _Silent()
    outcome: Outcome = "done"
    token = _open.set(reporter if factory else None)
    try:
        yield reporter
    except Exception as exc:
        outcome = "gave up" if then_again and not isinstance(exc, UpstreamError) else "failed"
        raise
    except BaseException:
        outcome = "stopped"
        raise
    finally:
        _open.reset(token)
        if getattr(reporter, "takes_outcome", False):
            reporter.close(outcome)  # type: ignore[call-arg]  # one that says it takes it (takes_outcome)
        else:
            reporter.close()


def tick() -> None:
    """Tell the innermost open :func:`track` that its work goes on, nothing counted (``update(0)``): a bar
    redraws its elapsed time, a log line comes when due. SQLite's progress handler calls it while one
    statement (a Join, a Validate, an index build) runs for seconds; a reporter's error is not the work's."""
    reporter = _open.get()
    if reporter is not None:
        with contextlib.suppress(Exception):
            reporter.update(0)


#: the unit of a phase: one step (an SQL statement) that counts nothing, shown by its time alone
PHASE = ""


def tqdm_reporter(description: str, total: int | None, unit: str) -> Reporter:
    """A bar that disappears when done: tqdm's text bar in a terminal; in a Jupyter kernel an output of the
    cell that is emptied when it closes (:mod:`.progress_notebook`: ``tqdm.notebook``'s widget stayed in
    notebooks run by nbconvert). A :data:`PHASE` shows its description and elapsed time only (no "0 it/s")."""
    from connector_ops.kernel.progress_notebook import NotebookBar, in_kernel

    if in_kernel():
        return NotebookBar(description, total, unit)
    from tqdm import tqdm

    phase = "{desc} [{elapsed}]" if unit == PHASE and total is None else None  # None: tqdm's own bar
    return tqdm(
        total=total, desc=description, unit=unit or "it", unit_scale=True, leave=False, mininterval=0.3, delay=0.5,
        bar_format=phase,
    )


def amount(n: int, unit: str) -> str:
    """``n`` units as a person reads them in a log line: bytes in binary units (``64.2 MiB``), anything else
    with a metric suffix (``390k rows``, ``1.2M rows``); exact below a thousand (1024 bytes). A value is
    rounded before its unit is chosen, so 999,950 rows are ``1M rows``, not ``1000k rows``."""
    binary = unit == "B"
    steps = ("B", " KiB", " MiB", " GiB", " TiB") if binary else (f" {unit}", f"k {unit}", f"M {unit}", f"G {unit}")
    base = 1024 if binary else 1000

    def shown(value: float) -> str:
        return f"{value:.1f}" if binary else f"{value:.0f}" if value >= 100 else f"{value:.3g}"

    if n < base:
        return f"{n} {unit}"
    value, step = float(n), 0
    while step + 1 < len(steps) and float(shown(value)) >= base:
        value, step = value / base, step + 1
    return shown(value) + steps[step]


#: seconds between two lines a :class:`LogReporter` writes of a work kept alive by ticks only
TICK_LINE_S = 1.0


class LogReporter:
    """Writes ``description: 42% (12.0 MiB of 28.6 MiB)`` at most every ``interval`` seconds, and how the work
    ended when it took that long: ``… in 3.8s`` when it finished, ``description failed at 45% after 3.8s``
    or ``… stopped at …`` when it did not."""

    takes_outcome = True

    def __init__(self, log: Callable[[str], None], description: str, total: int | None, unit: str,
                 interval: float = 5.0) -> None:
        self.log, self.description, self.total, self.unit = log, description, total, unit
        self.interval, self.done = interval, 0
        self.started = self.last = time.monotonic()

    def update(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        # a tick (nothing counted: :func:`tick`, every ~2 ms of a long statement) writes at most a line a
        # second, whatever the interval: at 0 ("every update") a 6 s Join wrote thousands of events
        if now - self.last >= (self.interval if n else max(self.interval, TICK_LINE_S)):
            self.last = now
            self.log(self._line())

    def _line(self) -> str:
        if self.total:
            return (f"{self.description}: {100 * self.done // self.total}% "
                    f"({amount(self.done, self.unit)} of {amount(self.total, self.unit)})")
        if not self.done:  # a phase (one SQL statement) that counts nothing: it is still going
            return f"{self.description}: working for {time.monotonic() - self.started:.0f}s"
        return f"{self.description}: {amount(self.done, self.unit)}"

    def _where(self) -> str:
        if self.total:
            return f"{100 * self.done // self.total}%"
        return amount(self.done, self.unit)

    def close(self, outcome: Outcome = "done") -> None:
        elapsed = time.monotonic() - self.started
        if elapsed < self.interval:
            return
        if outcome == "done" and not self.total and not self.done:
            self.log(f"{self.description}: done in {elapsed:.1f}s")
        elif outcome == "done":
            self.log(self._line() + f" in {elapsed:.1f}s")
        elif outcome == "gave up":
            self.log(f"{self.description}: gave up at {self._where()} after {elapsed:.1f}s, to read it again")
        else:
            self.log(f"{self.description} {outcome} at {self._where()} after {elapsed:.1f}s")


def log_lines(log: Callable[[str], None], interval: float) -> ReporterFactory:
    """A reporter factory whose reporters write lines to ``log`` every ``interval`` seconds (:class:`LogReporter`):
    a step's Dagster log, the command line's stderr when it is no terminal."""

    def reporter(description: str, total: int | None, unit: str) -> Reporter:
        return LogReporter(log, description, total, unit, interval=interval)

    return reporter


class _CountingRaw(io.RawIOBase):
    def __init__(self, stream: IO[bytes], reporter: Reporter) -> None:
        self._stream, self._reporter = stream, reporter

    def readable(self) -> bool:
        return True

    # override: callers pass a bytearray or memoryview, which it slices (typeshed: any buffer)
    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        n = self._stream.readinto(buffer)  # type: ignore[attr-defined]  # a file's; typeshed's IO has no readinto
        self._reporter.update(n or 0)
        return n or 0


T = TypeVar("T")


def reported(items: Iterable[T], reporter: Reporter, size: Callable[[T], int]) -> Iterator[T]:
    """``items`` as they are, each one's ``size`` (rows of a page or batch) reported once the next is asked for
    (its work is then done): a frame's push and pull, Pull's pages and a store copy show progress by rows, as
    Push and Pull of a file do by bytes."""
    for item in items:
        yield item
        reporter.update(size(item))


def reading_with_progress(stream: IO[bytes], reporter: Reporter, buffer_size: int = 1 << 20) -> io.BufferedReader:
    """A buffered view of ``stream`` that reports each byte read to ``reporter``. A raw stream decoded from
    the file as stored (its ``stored`` stream: a decompressed file) reports the stored bytes instead, whose
    total is the file's size."""
    stored = getattr(stream, "stored", None)
    if stored is not None:
        # a Decompressed: a raw stream with a settable ``stored``, neither of which typeshed's IO[bytes] says
        stream.stored = io.BufferedReader(_CountingRaw(stored, reporter), buffer_size)  # type: ignore[attr-defined]
        return io.BufferedReader(stream, buffer_size)  # type: ignore[arg-type]  # (as just said)
    return io.BufferedReader(_CountingRaw(stream, reporter), buffer_size)
