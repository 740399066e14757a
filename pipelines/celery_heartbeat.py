"""Step heartbeats on Celery: a step whose worker died fails its run instead of leaving it ``STARTED``.

dagster-celery acknowledges a step's task as it starts, and its run worker waits for the task's result with no
time-out: a worker killed mid-step (SIGKILL, the OOM killer, a host lost) left the run waiting for ever. Handing
the task to another worker (``acks_late`` + ``reject_on_worker_lost``) is not an answer: the step would run
twice from its start (a mail sent twice).

So the task of a running step (:class:`connector_ops.pipelines.celery_app.CancellableStep`) writes a heartbeat
every :data:`HEARTBEAT_SECONDS` into the Celery result backend, as the task's state (:data:`HEARTBEAT_STATE`,
with the worker's hostname and pid), and the run worker (:class:`WatchedResult`) fails a step whose heartbeat
has not changed for ``CONNECTOR_OPS_CELERY_LOST_AFTER`` seconds.

Why the result backend and not a table of the Dagster instance: the run worker already reads the task's
record there at each tick of its loop (``ready()``), so watching the heartbeat costs no read at all; the
task's result replaces the heartbeat when the task ends, so nothing is left to clean up; and both sides
already share it. The age of a heartbeat is measured on the run worker's own monotonic clock (since it saw the
value change), so clocks that differ between hosts cannot fake a loss.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import dagster as dg
from celery import states
from celery.exceptions import TaskRevokedError
from celery.result import AsyncResult
from dagster._core.execution.retries import RetryMode
from dagster_celery.core_execution_loop import core_celery_execution_loop
from dagster_celery.executor import CELERY_CONFIG, CeleryExecutor, _submit_task

from connector_ops.environment import LOST_AFTER_VARIABLE
from connector_ops.pipelines.celery_fence import lost_tag
from connector_ops.pipelines.run_workers import RecordingExecutor

#: the task state a running step's heartbeat writes (a state of its own: not ready, and left alone by a revoke)
HEARTBEAT_STATE = "HEARTBEAT"
#: how often a running step writes its heartbeat. Small against the smallest limit (:data:`MIN_LOST_AFTER`):
#: a loss is declared only after five periods in a row without a beat, which a worker that is alive but
#: starved (two cores shared by several busy processes: the heartbeat thread waits for the GIL for at most
#: a few switch intervals of 5 ms, and for a CPU time slice of tens of ms) does not come near. One small write
#: to the result backend every 2 s per running step costs nothing worth counting.
HEARTBEAT_SECONDS = 2.0
MIN_LOST_AFTER = 5 * HEARTBEAT_SECONDS
#: the limit once the run is being terminated (its tasks revoked): two beats missed in a row. A live worker
#: interrupts its step within a second and answers ``REVOKED``; one that is merely slow does no harm if taken
#: for lost, since its step's fence (:mod:`.celery_fence`) refuses every commit of a run no longer in progress.
TERMINATING_LOST_AFTER = 2 * HEARTBEAT_SECONDS


class StepLostError(RuntimeError):
    """A step's Celery worker stopped sending heartbeats: it probably died with the step."""


class WatchedResult(AsyncResult):
    """A step task's result that is also ``ready()`` once the step is lost; ``get()`` then raises
    :class:`StepLostError` (or ``TaskRevokedError`` when the run was being terminated anyway) and revokes
    the task.

    A task with no heartbeat yet waits in the queue, which may legitimately take long: no time-out then.
    Once revoked (the run is being terminated) the limit is :data:`TERMINATING_LOST_AFTER`: a worker killed
    before the Terminate does not hold the run ``CANCELING`` for the whole limit.

    ``fence(task_id)`` is called before a step is declared lost and must record it where the step's fence
    reads (the run's :func:`~.celery_fence.lost_tag`); if it raises, the step is not declared lost yet
    (asked again at the next look): a step declared lost must be unable to commit should its worker resume."""

    def __init__(self, task_id: str, app: Any, step_key: str, lost_after: float,
                 fence: Callable[[str], None] | None = None) -> None:
        super().__init__(task_id, app=app)
        self.step_key = step_key
        self.lost_after = lost_after
        self.fence = fence
        self._beat: Any = None  # the last heartbeat seen
        self._changed = 0.0  # when (monotonic) it was first seen
        self._lost: str | None = None  # why the step is lost
        self._revoked = False  # the run worker revoked the task (the run is being terminated)

    def ready(self) -> bool:
        if self._lost is not None:
            return True
        meta = self._get_task_meta()  # the one read ``ready()`` always made
        if meta["status"] in states.READY_STATES:
            return True
        if meta["status"] == HEARTBEAT_STATE:
            self._watch(meta["result"])
        return self._lost is not None

    def _watch(self, beat: dict[str, Any]) -> None:
        now = time.monotonic()
        if beat != self._beat:
            self._beat, self._changed = beat, now
            return
        age = now - self._changed
        limit = min(self.lost_after, TERMINATING_LOST_AFTER) if self._revoked else self.lost_after
        if age <= limit:
            return
        if self.fence is not None:
            self.fence(self.id)  # may raise: then not lost yet
        worker = f'its Celery worker {beat.get("hostname")} (pid {beat.get("pid")}) sent no heartbeat for {age:.0f} s'
        if self._revoked:
            self._lost = f'Step "{self.step_key}" was lost while the run was being terminated: {worker}.'
            return
        self._lost = (
            f'Step "{self.step_key}" was lost: {worker} ({LOST_AFTER_VARIABLE} is {self.lost_after:g} s). The '
            "worker probably died (killed, out of memory, its host lost); the step's statement in the "
            "virtual-file store stopped and its transaction rolled back (anything it did outside the store, "
            "such as a mail sent, may have happened). Should the worker only have been frozen, its step "
            "commits nothing when it resumes. Re-execute the run from failure.")

    def revoke(self, *args: Any, **kwargs: Any) -> None:
        self._revoked = True
        super().revoke(*args, **kwargs)

    def get(self, *args: Any, **kwargs: Any) -> Any:
        if self._lost is None:
            return super().get(*args, **kwargs)
        if self._revoked:  # terminated while lost: the revoke it was waiting for
            raise TaskRevokedError(self._lost)
        self.revoke()  # should the worker come back, it does not run the task again
        raise StepLostError(self._lost)


class WatchedCeleryExecutor(CeleryExecutor):
    """dagster-celery's executor whose run worker watches the heartbeat of each step it submitted."""

    def __init__(self, lost_after: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lost_after = lost_after

    def execute(self, plan_context: Any, execution_plan: Any) -> Any:
        return core_celery_execution_loop(plan_context, execution_plan, step_execution_fn=self._submit)

    def _submit(self, app: Any, plan_context: Any, step: Any, queue: str, priority: int,
                known_state: Any) -> WatchedResult:
        sent = _submit_task(app, plan_context, step, queue, priority, known_state)
        instance, run_id = plan_context.instance, plan_context.run_id

        def fence(task_id: str) -> None:
            instance.add_run_tags(run_id, {lost_tag(task_id): step.key})

        return WatchedResult(sent.id, app=app, step_key=step.key, lost_after=self.lost_after, fence=fence)


def watched_celery_executor(lost_after: float) -> dg.ExecutorDefinition:
    """dagster-celery's ``celery`` executor (same config) with :class:`WatchedCeleryExecutor`."""

    @dg.executor(name="celery", config_schema=CELERY_CONFIG, requirements=dg.multiple_process_executor_requirements())
    def celery(init_context: dg.InitExecutorContext) -> RecordingExecutor:
        config: Mapping[str, Any] = init_context.executor_config  # Any: each value is of its CELERY_CONFIG field
        return RecordingExecutor(WatchedCeleryExecutor(
            lost_after, retries=RetryMode.from_config(config["retries"]), broker=config.get("broker"),
            backend=config.get("backend"), config_source=config.get("config_source"), include=config.get("include")))

    return celery
