"""Failing a run whose run worker died: the run launcher of ``deploy/dagster.yaml``.

Under ``DefaultRunLauncher`` each run executes in a *run worker*, a process the code server spawns. While
that code server lives, Dagster's own gRPC server notices a run worker that died (its cleanup thread polls
the process every 0.5 s) and fails the run. What nobody noticed is a run worker that dies with or after its
code server: a container or systemd unit killed as a whole (a cgroup's OOM kill, a restart during a
deploy), a code server killed while its run workers go on, then one of them killed. The run then stayed
``STARTED`` for good, holding its slot of ``DAGSTER_MAX_CONCURRENT_RUNS``.

The watcher must outlive the code server, so it is the daemon, through Dagster's own hook for it:
run monitoring (``run_monitoring: enabled``) asks the instance's run launcher
``check_run_worker_health(run)`` for every ``STARTED`` run each ``poll_interval_seconds`` (30 s as shipped),
re-reads the run right after a bad answer (a run that ended meanwhile is left alone) and fails the run with
the answer's message. :class:`WatchedRunLauncher` is ``DefaultRunLauncher`` plus that check — rather than a
sensor of our own, which would run in the code server, the very process whose death is the case to cover.

The check needs to know where the run worker is. Dagster's event "Started process for run (pid: …)" gives
the pid but not the host, so our executor (:mod:`.executors`) tags each run as it starts executing with
its run worker's identity (:data:`TAG`): the run's id (a re-execution inherits its parent's tags, and a
record of the parent is not checked), host name, pid, the kernel's start time of the process (pid reuse),
the boot id (a host restarted since) and the pid namespace. The daemon checks only a run worker on its own
host and in its own pid namespace (the daemon, code server and run workers as units or Procfile entries of
one machine); a run worker elsewhere — another host, another container — is reported running, since a pid
there means nothing here. Linux only for the start time, boot id and namespace; elsewhere the pid alone is
checked and a reused pid hides a death.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dagster._core.executor.base import Executor
from dagster._core.launcher import CheckRunHealthResult, DefaultRunLauncher, WorkerStatus
from dagster._core.storage.dagster_run import DagsterRun

if TYPE_CHECKING:
    from dagster._core.events import DagsterEvent
    from dagster._core.execution.context.system import PlanOrchestrationContext
    from dagster._core.execution.plan.plan import ExecutionPlan
    from dagster._core.execution.retries import RetryMode

#: the run tag holding the run worker's identity (JSON of :class:`RunWorker`)
TAG = "connector_ops/run_worker"


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _stat(pid: int) -> tuple[str, str] | None:
    """The state letter and start time (clock ticks since boot) of ``pid`` from ``/proc``, if it is there."""
    text = _read(f"/proc/{pid}/stat")
    if not text:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": state is field 3, starttime 22
    return fields[0], fields[19]


def _boot_id() -> str | None:
    return _read("/proc/sys/kernel/random/boot_id")


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


@dataclass(frozen=True)
class RunWorker:
    """Where a run executes: enough to tell from the same host whether that very process still lives."""

    run_id: str  # a re-execution copies its parent's tags: a record of another run is not this run's worker
    host: str
    pid: int
    started: str | None = None  # /proc/<pid>/stat starttime: a reused pid has another
    boot: str | None = None
    pid_namespace: str | None = None

    @classmethod
    def this_process(cls, run_id: str) -> RunWorker:
        pid = os.getpid()
        stat = _stat(pid)
        return cls(run_id, socket.gethostname(), pid, stat[1] if stat else None, _boot_id(), _pid_namespace())

    @classmethod
    def of(cls, run: DagsterRun) -> RunWorker | None:
        raw = run.tags.get(TAG)
        if not raw:
            return None
        try:
            worker = cls(**json.loads(raw))
        except (TypeError, ValueError):
            return None
        return worker if worker.run_id == run.run_id else None

    def visible_here(self) -> bool:
        """Whether this process can check the run worker's pid: same host name and pid namespace."""
        return self.host == socket.gethostname() and self.pid_namespace == _pid_namespace()

    def gone(self) -> bool:
        """Whether the run worker process no longer exists (call only when :meth:`visible_here`)."""
        if self.boot and self.boot != _boot_id():
            return True  # the host restarted since
        stat = _stat(self.pid)
        if stat is None:  # no entry we may read: none, or hidden from this user (/proc's hidepid, ProtectProc)
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return True
            except PermissionError:  # there, another user's: alive (a reused pid cannot be told from here)
                return False
            return False
        state, started = stat
        return state in ("Z", "X") or (self.started is not None and started != self.started)


def record_run_worker(instance: Any, run_id: str) -> None:
    """Tag the run with this process as its run worker (called as the run worker starts executing)."""
    instance.add_run_tags(run_id, {TAG: json.dumps(asdict(RunWorker.this_process(run_id)))})


class RecordingExecutor(Executor):
    """An executor that records its run worker (:func:`record_run_worker`) before executing as ``inner``, and is
    ``inner`` in every other respect: the run's executor is read by others for more than Dagster's interface
    (dagster-celery's execution loop calls ``app_args()`` on it), so anything not defined here is ``inner``'s."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:  # only for what this class does not define
        if name == "inner":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def execute(self, plan_context: PlanOrchestrationContext,
                execution_plan: ExecutionPlan) -> Iterator[DagsterEvent]:
        record_run_worker(plan_context.instance, plan_context.run_id)
        return self.inner.execute(plan_context, execution_plan)

    @property
    def retries(self) -> RetryMode:
        return self.inner.retries

    @property
    def step_dependency_config(self) -> Any:
        return self.inner.step_dependency_config


def dead_worker_message(worker: RunWorker) -> str:
    return (f"The run worker of this run (pid {worker.pid} on host {worker.host}) is gone without ending the run: "
            "it was killed (the kernel's OOM killer when the host ran out of memory, a kill -9), crashed, or its "
            "host restarted. Steps that ran in its process stopped with it, and their unfinished statements in the "
            "virtual-file store rolled back. Re-execute the run from failure (after giving it more memory if it "
            "ran out).")


class WatchedRunLauncher(DefaultRunLauncher):
    """``DefaultRunLauncher`` whose run workers Dagster's run monitoring can check (see the module's docstring)."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        current = self._instance.get_run_by_id(run.run_id)
        if current is None or current.is_finished:
            return CheckRunHealthResult(WorkerStatus.SUCCESS, "the run has ended")
        worker = RunWorker.of(current)
        if worker is None:
            return CheckRunHealthResult(WorkerStatus.RUNNING, "no run worker recorded (not started executing yet, "
                                                              "or not a job of connector-ops): not checked")
        if not worker.visible_here():
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"run worker pid {worker.pid} on host {worker.host}, "
                                                              "another host or pid namespace: not checked")
        if worker.gone():
            return CheckRunHealthResult(WorkerStatus.FAILED, dead_worker_message(worker),
                                        run_worker_id=f"{worker.host}:{worker.pid}")
        return CheckRunHealthResult(WorkerStatus.RUNNING, f"run worker pid {worker.pid} on host {worker.host} lives")
