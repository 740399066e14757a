"""A fence around every commit: the code that runs an action may forbid it to commit anything.

Why: a step of a distributed run (a Celery task) may outlive its run. A worker frozen for a while (a paused
VM, a stop signal, a long stall) is declared lost by its run worker, and the run fails; a user then
re-executes it. When the frozen worker comes back, its step would finish and commit: a second output file,
a second mail. Nothing the run worker does can stop a process it cannot reach, so the step must ask, at the
last moment before each commit, whether it may still commit.

The runner sets a *gate* for the length of the step (:func:`fenced`); each place that makes an action's
effect durable or visible calls :func:`check_fence` just before it does (the virtual-file store's commit, a
step output's commit, the SQLite loader's end of data, a platform file's commit, a mail handed over, an
HTTP request that may change something). Without a gate (the CLI, notebooks, in-process runs) the check
costs one context-variable read. A gate's refusal is :class:`Fenced` (409), raised inside the transaction,
which then rolls back.

What remains: the time between the gate's answer and the commit itself (the ``COMMIT`` statement's round
trip, a request on its way). A process frozen exactly there commits when it resumes.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator

from connector_ops.kernel.errors import ConnectorOpsError
from connector_ops.kernel.scoped import scoped

#: answers ``None`` (commit) or why not
Gate = Callable[[], "str | None"]

_gate: contextvars.ContextVar[Gate | None] = contextvars.ContextVar("connector_ops_fence", default=None)


class Fenced(ConnectorOpsError):
    """The action may no longer commit: the run it belongs to ended or gave up on it (409)."""

    status = 409


@contextlib.contextmanager
def fenced(gate: Gate) -> Iterator[None]:
    """Within this block (this thread or task), every :func:`check_fence` asks ``gate`` first."""
    with scoped(_gate, gate):
        yield


def check_fence(what: str) -> None:
    """Raise :class:`Fenced` if the block's gate refuses ``what`` (e.g. "the virtual-file store's write")."""
    gate = _gate.get()
    if gate is None:
        return
    refusal = gate()
    if refusal is not None:
        raise Fenced(f"{what} was not committed: {refusal}")
