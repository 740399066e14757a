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
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import celery
from celery.exceptions import Ignore
from dagster import DagsterInstance, DagsterRunStatus
from dagster._core.errors import DagsterExecutionInterruptedError
from dagster._grpc.types import ExecuteStepArgs
from dagster._serdes import unpack_value
from dagster_celery.executor import CeleryExecutor
from dagster_celery.make_app import make_app
from dagster_celery.tasks import create_execute_job_task, create_resume_job_task, create_task

from connector_ops.environment import EXECUTOR_VARIABLE, pin_home
from connector_ops.pipelines.executors import BACKEND_VARIABLE, BROKER_VARIABLE, celery_settings

pin_home()  # the worker's home, resolved once for the processes that run its steps
os.environ[EXECUTOR_VARIABLE] = "celery"  # what it runs are steps of distributed runs (single-host checks)
celery_settings(os.environ)  # fails with the variable to set, before a worker starts listening nowhere
_broker = os.environ[BROKER_VARIABLE]
app = make_app(CeleryExecutor.for_cli(broker=_broker, backend=os.environ.get(BACKEND_VARIABLE) or _broker).app_args())

#: how often a running step's task reads its run's status (one query on the instance's run storage)
WATCH_SECONDS = 1.0
_STOPPING = frozenset({DagsterRunStatus.CANCELING, DagsterRunStatus.CANCELED})


class _RunWatch:
    """A thread that reads the run's status while its step runs and, once the run is being canceled,
    interrupts the main thread while Dagster's ``SIGINT`` handler is in place (which makes it an
    interrupt of the step: ``DagsterExecutionInterruptedError``, or a flag Dagster raises at the step's
    next checkpoint). A signal that lands in our own handler instead (the task before or after Dagster's
    part) is dropped and sent again once Dagster's handler is back; any other ``SIGINT`` goes on to the
    handler that was there (Celery's warm shutdown)."""

    def __init__(self, args: ExecuteStepArgs) -> None:
        self.args = args
        self.stopping = False  # the run is CANCELING or CANCELED
        self._sent = False
        self._done = threading.Event()
        self._main = threading.main_thread().ident
        self._guard: Callable[[int, FrameType | None], None] | None = None
        self._thread = threading.Thread(target=self._watch, name=f"run-watch-{args.run_id}", daemon=True)

    def _watch(self) -> None:
        with DagsterInstance.from_ref(self.args.instance_ref) as instance:  # type: ignore[arg-type]
            while not self._done.is_set():
                if not self.stopping:
                    run = instance.get_run_by_id(self.args.run_id)
                    self.stopping = run is not None and run.status in _STOPPING
                if self.stopping and not self._sent and signal.getsignal(signal.SIGINT) is not self._guard:
                    self._sent = True
                    signal.pthread_kill(self._main, signal.SIGINT)  # type: ignore[arg-type]
                self._done.wait(WATCH_SECONDS)

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
        before: dict[int, Any] = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        self._guard = self._guarding(before[signal.SIGINT])
        signal.signal(signal.SIGINT, self._guard)
        self._thread.start()
        try:
            yield
        finally:
            self._done.set()
            self._thread.join()  # a signal it sent has reached a handler by now (a join runs pending ones)
            for sig, handler in before.items():
                signal.signal(sig, handler)


class CancellableStep(celery.Task):
    """dagster-celery's step task (its body unchanged), interrupted when its run is canceled; it then ends
    ``REVOKED``, which the run worker takes as the revoke it sent.

    Not ``track_started``: a revoke reaches every worker, and an idle one marks a task still ``PENDING`` as
    ``REVOKED`` at once. That ends the run while the interrupted step may still be writing its failure (the
    step's ``STEP_FAILURE`` can follow ``PIPELINE_CANCELED`` by up to a second), but it is also what ends a
    run whose worker died mid-step when the run is terminated: a ``STARTED`` task is left to its worker,
    and the run worker would wait for it for ever."""

    def __call__(self, execute_step_args_packed: Any, executable_dict: Any) -> Any:
        if threading.current_thread() is not threading.main_thread():  # a threads/gevent pool: no signals
            return super().__call__(execute_step_args_packed, executable_dict)
        watch = _RunWatch(unpack_value(execute_step_args_packed, as_type=ExecuteStepArgs))
        try:
            with watch.watching():
                return super().__call__(execute_step_args_packed, executable_dict)
        except DagsterExecutionInterruptedError:
            if not watch.stopping:
                raise
        self.backend.mark_as_revoked(self.request.id, reason="the run was canceled", request=self.request)
        raise Ignore()


execute_plan = create_task(app, base=CancellableStep)
execute_job = create_execute_job_task(app)
resume_job = create_resume_job_task(app)
