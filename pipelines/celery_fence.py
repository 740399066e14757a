"""The fence of a Celery step: a step task whose run is no longer in progress commits nothing.

A worker frozen for longer than ``CONNECTOR_OPS_CELERY_LOST_AFTER`` (a paused VM, ``SIGSTOP``, a long stall)
has its step declared lost by the run worker (:mod:`.celery_heartbeat`), and the run fails. When the worker
resumes, its step would run on and commit — after the run failed, and perhaps after a user re-executed it
from failure, who would then get the step's effects twice (a second output file, a second mail).

So the two sides agree through the Dagster instance, which both already use:

- the run worker, before it declares a step lost, tags the run with :func:`lost_tag` of the step's task (the
  run itself may stay ``STARTED`` until its other running steps end, so its status alone would say too late);
- the step task asks its :class:`RunGate` before every commit (:mod:`connector_ops.kernel.fence`: the
  virtual-file store's, a step output's, a platform file's, a mail, an HTTP request that changes something)
  and from its watch thread every second, which then interrupts the step (:mod:`.celery_app`). The gate
  refuses once the run is not in progress (``CANCELING`` or finished) or the task is tagged lost; a status it
  cannot read refuses too (a fence must fail closed), without sticking.
"""

from __future__ import annotations

from dagster import DagsterInstance, DagsterRun, DagsterRunStatus

#: a run's tag naming a step task the run worker declared lost (``<prefix><task id>``: the step's key)
LOST_TAG_PREFIX = "connector_ops/lost_task/"
_IN_PROGRESS = frozenset({DagsterRunStatus.NOT_STARTED, DagsterRunStatus.QUEUED, DagsterRunStatus.STARTING,
                          DagsterRunStatus.STARTED})


def lost_tag(task_id: str) -> str:
    """The run's tag that fences the step task ``task_id`` (written by the run worker, read by the task)."""
    return f"{LOST_TAG_PREFIX}{task_id}"


class RunGate:
    """Whether the step task ``task_id`` of run ``run_id`` may still commit: one read of the run each time it
    is asked (from the step's thread before a commit, and from its watch thread), until it refuses for good.
    """

    def __init__(self, instance: DagsterInstance, run_id: str, task_id: str, step: str) -> None:
        self.instance = instance
        self.run_id = run_id
        self.task_id = task_id
        self.step = step
        self.reason: str | None = None  # why the step may no longer commit (set once, for good)
        self.run: DagsterRun | None = None  # the run as last read

    def __call__(self) -> str | None:
        """``None`` (commit) or why not; the gate of :func:`connector_ops.kernel.fence.fenced`."""
        if self.reason is not None:
            return self.reason
        try:
            run = self.instance.get_run_by_id(self.run_id)  # from two threads: the storage's engine is shared
        except Exception as exc:  # the instance's database unreachable: cannot tell, so no commit now
            return f"the status of run {self.run_id} could not be read ({type(exc).__name__}: {exc})"
        self.run = run
        reason = self._refusal(run)
        if reason is not None:
            self.reason = reason
        return reason

    def _refusal(self, run: DagsterRun | None) -> str | None:
        prefix = f'step "{self.step}" of run {self.run_id} may no longer commit:'
        if run is None:
            return f"{prefix} the run is gone from the instance"
        if run.tags.get(lost_tag(self.task_id)) is not None:
            return (f"{prefix} its run worker declared it lost (no heartbeat from this worker for longer than its "
                    "limit: the worker was frozen or cut off) and failed it. Re-execute the run from failure "
                    "if that was not done yet")
        if run.status not in _IN_PROGRESS:
            return f"{prefix} the run is {run.status.value}, no longer in progress"
        return None

    @property
    def stopping(self) -> bool:
        """The gate refused for good: the step is to be stopped."""
        return self.reason is not None
