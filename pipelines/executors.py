"""The executor every job gets, chosen by ``CONNECTOR_OPS_EXECUTOR`` when the Definitions load.

Why not Dagster's default: it runs every step in a freshly *spawned* interpreter that re-imports Dagster
and this package, seconds per step — a 22-step ``sales_report`` took 85–180 s from a UI launch on a 2-core
machine, against ~4 s of actual work. So:

- ``in_process`` (default): all steps in the run worker, one after another — one host, the fastest for our jobs;
- ``multiprocess``: a process per step, *forked* from a forkserver that preloaded the Definitions — one host,
  steps in parallel;
- ``celery``: each step a Celery task (``dagster-celery``), run by workers on any host.

The first two keep Dagster's run config shape (``execution: config: in_process: {}`` or
``multiprocess: {...}``), so the launchpad can still switch between them per run; only the default
changes. Under ``multiprocess`` a missing ``start_method`` means ``forkserver`` with
:data:`PRELOAD_MODULES` (``spawn`` where forkserver does not exist, i.e. Windows), and a missing
``max_concurrent`` (nor :data:`MAX_CONCURRENT_VARIABLE`) the CPUs the container lets the run worker use
(:func:`steps_at_once`), not Dagster's ``multiprocessing.cpu_count()``: the host's, 64 step processes in a pod
allowed 2 CPUs on a 64-core node.

Celery: the broker and result backend are read by the run worker from ``CONNECTOR_OPS_CELERY_BROKER_URL``
and ``CONNECTOR_OPS_CELERY_BACKEND_URL`` (default: the broker URL) — environment references, never URLs
(which may hold passwords) in run config. Workers run ``celery -A connector_ops.pipelines.celery_app
worker`` (:mod:`connector_ops.pipelines.celery_app`) with the same variables. A step whose worker dies fails
its run after ``CONNECTOR_OPS_CELERY_LOST_AFTER`` seconds without a heartbeat
(:mod:`connector_ops.pipelines.celery_heartbeat`).

Every executor first tags its run with the run worker's host and pid (:class:`RecordingExecutor`), so that the
daemon's run monitoring can fail the run if that process dies (:mod:`connector_ops.pipelines.run_workers`).
"""

from __future__ import annotations

import math
import multiprocessing
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import dagster as dg
from dagster._core.definitions.executor_definition import (
    IN_PROC_CONFIG,
    MULTI_PROC_CONFIG,
    _core_in_process_executor_creation,
    _core_multiprocess_executor_creation,
    multiple_process_executor_requirements,
)
from dagster._core.events import DagsterEvent, EngineEventData
from dagster._core.executor.base import Executor

from connector_ops.environment import EXECUTOR_VARIABLE, LOST_AFTER_VARIABLE
from connector_ops.kernel.container import cpu_share
from connector_ops.pipelines.run_workers import RecordingExecutor

if TYPE_CHECKING:
    from dagster._core.execution.context.system import PlanOrchestrationContext
    from dagster._core.execution.plan.plan import ExecutionPlan

BROKER_VARIABLE = "CONNECTOR_OPS_CELERY_BROKER_URL"
BACKEND_VARIABLE = "CONNECTOR_OPS_CELERY_BACKEND_URL"
#: seconds without a heartbeat after which a running step's worker is taken for dead
DEFAULT_LOST_AFTER = 60.0
EXECUTORS = ("in_process", "multiprocess", "celery")
#: what a forkserver imports once, so each forked step starts with the Definitions already built
PRELOAD_MODULES = ["connector_ops.pipelines.definitions"]
#: Dagster's variable for the multiprocess executor's number of steps at once, where the run config sets none
MAX_CONCURRENT_VARIABLE = "DAGSTER_MULTIPROCESS_EXECUTOR_MAX_CONCURRENT"


def _multiprocess_config() -> dg.Field:
    """Dagster's multiprocess config, its ``max_concurrent`` saying what ours defaults to (the launchpad shows
    the description: Dagster's says ``multiprocessing.cpu_count()``)."""
    shape = MULTI_PROC_CONFIG.config_type
    assert isinstance(shape, dg.Shape)  # (a dict of fields in Dagster's source)
    return dg.Field(dg.Shape({
        **shape.fields,
        "max_concurrent": dg.Field(dg.Noneable(int), default_value=None, description=(
            "The number of step processes that may run at once. By default the CPUs the run worker may use: "
            "the host's, fewer under a container's CPU quota (rounded up) or a CPU affinity; "
            f"{MAX_CONCURRENT_VARIABLE} sets another default.")),
    }))


class ExecutorSettingError(ValueError):
    """``CONNECTOR_OPS_EXECUTOR`` (or a setting it needs) is wrong; the message says what to set."""


def default_start_method() -> dict[str, Any]:
    if "forkserver" in multiprocessing.get_all_start_methods():
        return {"forkserver": {"preload_modules": list(PRELOAD_MODULES)}}
    return {"spawn": {}}  # pragma: no cover - Windows


def steps_at_once(config: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[dict[str, Any], str | None]:
    """The multiprocess ``config`` with ``max_concurrent`` set to the CPUs this process can keep busy where
    Dagster would take the host's count (neither the config nor :data:`MAX_CONCURRENT_VARIABLE` sets one,
    read as Dagster reads them: a 0 is none), and the line that tells the run why, when that number is not
    the host's: a run that takes its steps one by one on a 64-core node would otherwise look broken."""
    if config.get("max_concurrent") or environ.get(MAX_CONCURRENT_VARIABLE):
        return dict(config), None
    share = cpu_share()
    notice = None if share.reason is None else (
        f"Multiprocess executor: up to {share.count} step{'s' if share.count > 1 else ''} at a time: "
        f"{share.reason} (max_concurrent in the run config or {MAX_CONCURRENT_VARIABLE} sets another number)")
    return {**config, "max_concurrent": share.count}, notice


class _Announcing(RecordingExecutor):
    """A :class:`RecordingExecutor` that first writes ``notice`` into the run's event log, once per run (the
    orchestrating process alone executes the plan; step processes build the executor but never run it)."""

    def __init__(self, inner: Executor, notice: str) -> None:
        super().__init__(inner)
        self.notice = notice

    def execute(self, plan_context: PlanOrchestrationContext,
                execution_plan: ExecutionPlan) -> Iterator[DagsterEvent]:
        events = super().execute(plan_context, execution_plan)
        yield DagsterEvent.engine_event(plan_context, self.notice, EngineEventData())
        yield from events


def local_executor(default: str) -> dg.ExecutorDefinition:
    """Dagster's in-process/multiprocess selector with ``default`` selected and a forked multiprocess."""

    def requirements(config: Mapping[str, Any]) -> Sequence[Any]:
        return multiple_process_executor_requirements() if "multiprocess" in config else []

    @dg.executor(
        name="multi_or_in_process_executor",
        config_schema=dg.Field(
            dg.Selector({"multiprocess": _multiprocess_config(), "in_process": IN_PROC_CONFIG}),
            default_value={default: {}},
        ),
        requirements=requirements,
    )
    def connector_ops_executor(init_context: dg.InitExecutorContext) -> Any:
        """In process or a forked process per step (``CONNECTOR_OPS_EXECUTOR`` picks the default)."""
        chosen: Mapping[str, Any] = init_context.executor_config  # Any: the selector's choice has its own config
        (mode, config), = chosen.items()
        if mode == "in_process":
            return RecordingExecutor(_core_in_process_executor_creation(config))
        if not config.get("start_method"):
            config = {**config, "start_method": default_start_method()}
        config, notice = steps_at_once(config, os.environ)
        executor = _core_multiprocess_executor_creation(config)
        return RecordingExecutor(executor) if notice is None else _Announcing(executor, notice)

    return connector_ops_executor


def celery_settings(environ: Mapping[str, str]) -> dict[str, Any]:
    """The ``dagster-celery`` executor config: environment references the run worker resolves."""
    if not environ.get(BROKER_VARIABLE):
        raise ExecutorSettingError(
            f"{EXECUTOR_VARIABLE}=celery needs {BROKER_VARIABLE} (e.g. redis://broker-host:6379/0) in the "
            "environment of the code server, the run workers and the Celery workers")
    backend = BACKEND_VARIABLE if environ.get(BACKEND_VARIABLE) else BROKER_VARIABLE
    return {"broker": {"env": BROKER_VARIABLE}, "backend": {"env": backend}}


def celery_lost_after(environ: Mapping[str, str], minimum: float) -> float:
    """``CONNECTOR_OPS_CELERY_LOST_AFTER``: seconds (at least ``minimum``) a running step may go without a
    heartbeat before the run worker fails it as lost."""
    raw = (environ.get(LOST_AFTER_VARIABLE) or "").strip()
    if not raw:
        return DEFAULT_LOST_AFTER
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= minimum):
        raise ExecutorSettingError(
            f"{LOST_AFTER_VARIABLE}={raw!r} is not a number of seconds of at least {minimum:g} (the time a "
            f"running Celery step may go without a heartbeat; default {DEFAULT_LOST_AFTER:g})")
    return seconds


#: how often the run worker looks at its Celery tasks (dagster-celery's own loop: once a second)
CELERY_POLL_SECONDS = 0.05


def celery_executor(environ: Mapping[str, str]) -> dg.ExecutorDefinition:
    """dagster-celery's executor with our broker settings, polling its tasks every 50 ms and failing a step
    whose worker stopped sending heartbeats (:mod:`connector_ops.pipelines.celery_heartbeat`).

    dagster-celery's run-worker loop sleeps ``TICK_SECONDS`` (1 s) between looks at its tasks, so a job of
    short steps in sequence — ``sales_report`` has 23 — waits about a second per step for nothing
    (BENCHMARKS.md, Deployment). A look is one result-backend read per running task, so polling every 50 ms
    costs little; the loop reads the module constant at each tick, which is what we set.
    """
    try:
        import dagster_celery.core_execution_loop as celery_loop

        from connector_ops.pipelines.celery_heartbeat import MIN_LOST_AFTER, watched_celery_executor
    except ImportError as exc:
        raise ExecutorSettingError(
            f"{EXECUTOR_VARIABLE}=celery needs the celery extra: pip install 'connector-ops[celery]'") from exc
    settings = celery_settings(environ)
    lost_after = celery_lost_after(environ, MIN_LOST_AFTER)
    # dagster-celery's constant is typed int from its `= 1`; it goes to time.sleep(), which takes a float
    celery_loop.TICK_SECONDS = CELERY_POLL_SECONDS  # type: ignore[assignment]
    return watched_celery_executor(lost_after).configured(settings, name="celery")


def job_executor(environ: Mapping[str, str] | None = None) -> dg.ExecutorDefinition:
    """The executor named by ``CONNECTOR_OPS_EXECUTOR`` (default ``in_process``)."""
    env = os.environ if environ is None else environ
    name = (env.get(EXECUTOR_VARIABLE) or "in_process").strip().lower().replace("-", "_")
    if name == "celery":
        return celery_executor(env)
    if name in ("in_process", "multiprocess"):
        return local_executor(name)
    raise ExecutorSettingError(
        f"{EXECUTOR_VARIABLE}={env.get(EXECUTOR_VARIABLE)!r} is not an executor; use one of {', '.join(EXECUTORS)}")
