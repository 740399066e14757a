"""The Celery app workers run: ``celery -A connector_ops.pipelines.celery_app worker -Q dagster``.

Deployments do not write a wrapper module of their own: this one builds ``dagster-celery``'s app (its
task names and the ``dagster`` queue) with the broker and result backend of
``CONNECTOR_OPS_CELERY_BROKER_URL`` / ``CONNECTOR_OPS_CELERY_BACKEND_URL`` — the same variables the
``celery`` executor reads in the run worker (:mod:`connector_ops.pipelines.executors`), so both sides
always talk to the same broker. A task names the job by the code location's module
(``connector_ops.pipelines``), which the worker imports by name; pipelines are found the same way as on
the code server (the shipped ones and ``CONNECTOR_OPS_PIPELINES_DIR``), so a worker needs that variable
too when the deployment uses it.

**Terminate.** dagster-celery's answer to the UI's Terminate is a revoke without ``terminate``: a step
already running went on to its end (a Join of minutes, then its outputs and ``STEP_SUCCESS`` after the run
was ``CANCELED``). A worker with ``--pool=solo`` cannot act on a revoke mid-task anyway (its one thread runs
the task). So each step task watches its run (:class:`CancellableStep`): once the run is ``CANCELING`` or
``CANCELED`` it interrupts the step as Dagster interrupts its own step processes — a ``SIGINT`` to the
thread running it, which Dagster's handler turns into ``DagsterExecutionInterruptedError`` inside the step
(the store then cancels its statement and rolls back) — and the task ends ``REVOKED``, without taking the
worker down.

**A worker that dies.** Each step task, in every pool, also writes a heartbeat into the result backend every
:data:`~connector_ops.pipelines.celery_heartbeat.HEARTBEAT_SECONDS` (its worker's hostname and pid), which the
run worker watches: a step whose heartbeat stopped fails its run
(:mod:`connector_ops.pipelines.celery_heartbeat`).

**Its pool's size.** Without ``--concurrency`` (``-c``), ``CELERY_WORKER_CONCURRENCY`` or a
``worker_concurrency`` setting, Celery sizes the pool by ``billiard.cpu_count()``: the host's cores, 64 step
processes in a pod limited to 2 CPUs on a 64-core node. Here the default is the CPUs the worker can keep busy
(:func:`~connector_ops.kernel.container.usable_cpus`: its affinity capped by its cgroup's CPU quota rounded up),
and the worker's log says why when that is fewer than the host's (:func:`_pool_sized_by_the_container`).

**A worker that was only frozen.** A step task commits nothing once its run is no longer in progress or its
run worker declared it lost (:mod:`connector_ops.pipelines.celery_fence`): every commit asks the run first,
and the watch interrupts the step as for a Terminate once the answer is no.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import celery
from celery import signals
from celery.exceptions import Ignore
from celery.utils.log import get_logger, get_task_logger
from dagster import DagsterInstance
from dagster._core.errors import DagsterExecutionInterruptedError
from dagster._grpc.types import ExecuteStepArgs
from dagster._serdes import unpack_value
from dagster_celery.executor import CeleryExecutor
from dagster_celery.make_app import make_app
from dagster_celery.tasks import create_execute_job_task, create_resume_job_task, create_task

from connector_ops.environment import EXECUTOR_VARIABLE, pin_paths
from connector_ops.kernel.container import cpu_share
from connector_ops.kernel.fence import fenced
from connector_ops.pipelines.celery_fence import RunGate
from connector_ops.pipelines.celery_heartbeat import HEARTBEAT_SECONDS, HEARTBEAT_STATE
from connector_ops.pipelines.executors import BACKEND_VARIABLE, BROKER_VARIABLE, celery_settings

pin_paths()  # the worker's home and path settings, resolved once for the processes that run its steps
os.environ[EXECUTOR_VARIABLE] = "celery"  # what it runs are steps of distributed runs (single-host checks)
celery_settings(os.environ)  # fails with the variable to set, before a worker starts listening nowhere
_broker = os.environ[BROKER_VARIABLE]
app = make_app(CeleryExecutor.for_cli(broker=_broker, backend=os.environ.get(BACKEND_VARIABLE) or _broker).app_args())

#: how often a running step's task reads its run's status (one query on the instance's run storage)
WATCH_SECONDS = 1.0
log = get_task_logger(__name__)
#: what the worker says of its pool's size once its log is set up (:func:`_pool_sized_by_the_container`)
_pool_notice: list[str] = []


@signals.celeryd_init.connect(dispatch_uid="connector_ops.pool_size")
def _pool_sized_by_the_container(conf: Any, options: dict[str, Any], **_: Any) -> None:
    """A worker about to size its pool: where the user set no size (the command line, its variable
    ``CELERY_WORKER_CONCURRENCY`` or the configuration: all end in ``options`` or ``conf``, and Celery takes
    a 0 as none), the CPUs this worker can keep busy rather than Celery's ``billiard.cpu_count()``. An explicit
    ``auto`` is kept (Celery's own reading of the quota, for the prefork pool only)."""
    if options.get("concurrency") or conf.worker_concurrency:
        return
    share = cpu_share()
    conf.worker_concurrency = share.count
    if share.reason is not None:
        _pool_notice.append(f"a pool of {share.count}: {share.reason} (--concurrency or CELERY_WORKER_CONCURRENCY "
                            "sets another size)")


@signals.celeryd_after_setup.connect(dispatch_uid="connector_ops.pool_size_notice")
def _say_the_pool_size(**_: Any) -> None:
    """The worker's log is set up now (it was not when the pool was sized)."""
    for notice in _pool_notice:
        get_logger(__name__).info("%s", notice)


class _RunWatch:
    """A thread that writes the step's heartbeat every :data:`HEARTBEAT_SECONDS` while its step runs and,
    when ``interrupts`` (the task runs in the main thread, where signals land), asks the step's gate and,
    once it refuses (the run is being canceled or has ended, or the step was declared lost: :class:`RunGate`),
    interrupts the main thread while Dagster's ``SIGINT`` handler is in
    place (which makes it an interrupt of the step: ``DagsterExecutionInterruptedError``, or a flag Dagster
    raises at the step's next checkpoint). A signal that lands in our own handler instead (the task before
    or after Dagster's part) is dropped and sent again once Dagster's handler is back; any other ``SIGINT``
    goes on to the handler that was there (Celery's warm shutdown)."""

    def __init__(self, args: ExecuteStepArgs, beat: Callable[[], None], gate: RunGate, interrupts: bool) -> None:
        self.args = args
        self.interrupts = interrupts
        self.gate = gate
        self._beat = beat
        self._sent = False
        self._done = threading.Event()
        main = threading.main_thread().ident
        assert main is not None  # (the main thread runs: only a thread not started yet has none)
        self._main = main
        self._guard: Callable[[int, FrameType | None], None] | None = None
        self._thread = threading.Thread(target=self._watch, name=f"run-watch-{args.run_id}", daemon=True)

    def _watch(self) -> None:
        """Beat, and ask the gate; a failure to read the run never stops the heartbeat (which would fail a
        healthy step as lost): the gate answers it as a refusal of the moment, which does not stop the step."""
        next_beat = time.monotonic() + HEARTBEAT_SECONDS  # the task wrote the first one
        while not self._done.is_set():
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + HEARTBEAT_SECONDS
                self._beat()
            if self.interrupts:
                self._interrupt_if_stopping()
            self._done.wait(WATCH_SECONDS if self.interrupts else HEARTBEAT_SECONDS)

    @property
    def stopping(self) -> bool:
        """The step is to stop: its gate refused for good."""
        return self.gate.stopping

    def _interrupt_if_stopping(self) -> None:
        if not self.stopping:
            self.gate()
        if self.stopping and not self._sent and signal.getsignal(signal.SIGINT) is not self._guard:
            self._sent = True
            signal.pthread_kill(self._main, signal.SIGINT)

    def _guarding(self, previous: Any) -> Callable[[int, FrameType | None], None]:
        def guard(signo: int, frame: FrameType | None) -> None:
            if self.stopping:
                self._sent = False
            elif callable(previous):
                previous(signo, frame)
            elif previous == signal.SIG_DFL:
                signal.default_int_handler(signo, frame)
        return guard

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Watch while the body runs, then put back the handlers of ``SIGINT`` and ``SIGTERM`` (Dagster's
        handler, as it leaves, sets SIGTERM's to the SIGINT handler it found: Celery's warm shutdown for
        SIGTERM would have become its Ctrl-C handler)."""
        before: dict[int, Any] = {}
        if self.interrupts:
            before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
            self._guard = self._guarding(before[signal.SIGINT])
            signal.signal(signal.SIGINT, self._guard)
        self._thread.start()
        try:
            yield
        finally:
            self._done.set()
            self._thread.join()  # a signal it sent has reached a handler by now (a join runs pending ones)
            for sig, handler in before.items():  # and no heartbeat comes after the task's result
                signal.signal(sig, handler)


class CancellableStep(celery.Task):
    """dagster-celery's step task (its body unchanged), sending heartbeats while it runs, and interrupted
    when its run is canceled; it then ends ``REVOKED``, which the run worker takes as the revoke it sent.

    Not ``track_started``: the first heartbeat says the task started (with more: the worker and its pid). A
    revoke reaches every worker, and an idle one marks a task still ``PENDING`` as ``REVOKED`` at once; a
    task in its heartbeat state is left to its worker (or, once lost, to the run worker's watch)."""

    def __call__(self, execute_step_args_packed: Any, executable_dict: Any) -> Any:
        args = unpack_value(execute_step_args_packed, as_type=ExecuteStepArgs)
        beat = self._heartbeat(args)
        beat()  # before the step: a task in the heartbeat state is running, not queued
        assert args.instance_ref is not None  # (dagster-celery's step tasks always carry it)
        with DagsterInstance.from_ref(args.instance_ref) as instance:
            gate = RunGate(instance, args.run_id, self.request.id, ", ".join(args.step_keys_to_execute or []))
            # signals reach only the main thread: under --pool=threads or gevent a step is not interrupted, and
            # only the fence before each commit holds it
            watch = _RunWatch(args, beat, gate, interrupts=threading.current_thread() is threading.main_thread())
            try:
                with fenced(gate), watch.watching():
                    events = super().__call__(execute_step_args_packed, executable_dict)
            except DagsterExecutionInterruptedError:
                if not watch.stopping:
                    raise
            else:
                if gate.reason is not None:  # a commit was refused: the step failed on it (Fenced)
                    self._report_stop(instance, gate)
                return events
            self._report_stop(instance, gate)
        self.backend.mark_as_revoked(self.request.id, reason=gate.reason, request=self.request)
        raise Ignore()

    def _report_stop(self, instance: DagsterInstance, gate: RunGate) -> None:
        """Say in the worker's log and in the run's why the step stopped without committing (the run may have
        ended long before: the worker was frozen)."""
        message = f"Step stopped on Celery worker {self.request.hostname} without committing: {gate.reason}"
        log.warning("%s", message)
        if gate.run is None:  # the run is gone: nowhere to say it but here
            return
        try:
            instance.report_engine_event(message, gate.run, step_key=gate.step or None)
        except Exception as exc:  # the instance unreachable: the worker's log has it
            log.warning("run %s: the step's stop not reported: %s", gate.run_id, exc)

    def _heartbeat(self, args: ExecuteStepArgs) -> Callable[[], None]:
        """What writes the task's heartbeat (from the watch's thread too: the request is captured here, as
        Celery keeps it per thread). A write that fails is logged; the next one may get through."""
        request = self.request
        step = ", ".join(args.step_keys_to_execute or [])
        base = {"hostname": request.hostname, "pid": os.getpid(), "run_id": args.run_id, "step": step}

        def beat() -> None:
            try:
                self.backend.store_result(request.id, {**base, "time": time.time()}, HEARTBEAT_STATE,
                                          request=request)
            except Exception as exc:  # a broken backend connection: the run worker sees the beats stop
                log.warning("step %s: heartbeat not written: %s", step, exc)
        return beat


execute_plan = create_task(app, base=CancellableStep)
execute_job = create_execute_job_task(app)
resume_job = create_resume_job_task(app)
