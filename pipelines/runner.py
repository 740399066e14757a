"""Run a pipeline in process and read back what each step produced: :class:`PipelineRun`.

One result for ``connector-ops pipeline run``, ``%pipeline run`` and the tests. Runs go to the persistent instance when
``DAGSTER_HOME`` is set (they then show in the UI), else to an ephemeral one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import dagster as dg

from connector_ops.display import StatusTable
from connector_ops.kernel.errors import ConnectorError
from connector_ops.ops.factory import error_of_failed_step
from connector_ops.ops.io_manager import capped_in_memory_io_manager
from connector_ops.pipelines.dsl import CompiledPipeline
from connector_ops.pipelines.instance import home_instance, storage_faults
from connector_ops.pipelines.run_progress import RunProgress, step_of

logger = logging.getLogger(__name__)

QUIET_LOGGERS = {"console": {"config": {"log_level": "CRITICAL"}}}  # we report failures ourselves


def step_outputs(compiled: CompiledPipeline, result: dg.ExecuteInProcessResult) -> dict[str, Any]:
    """The outputs of every step that succeeded, by spec field names."""
    outputs: dict[str, Any] = {}
    for step_id, (node, names) in compiled.outputs.items():
        try:
            values = {field: result.output_for_node(node, out) for field, out in names.items()}
        except Exception:  # the step did not run (an upstream step failed)
            continue
        outputs[step_id] = values.get("", values)
    return outputs


@contextlib.contextmanager
def unawaited_loop_cleanup_ignored() -> Iterator[None]:
    """Silence one warning Dagster causes in Jupyter, and only that one.

    ``execute_in_process`` makes a fresh asyncio loop and, at the end, runs its ``shutdown_asyncgens()``
    with ``run_until_complete``. In a Jupyter kernel a loop already runs in this thread, so that call
    raises (Dagster catches it) and the coroutine object is dropped unawaited: Python then prints
    ``RuntimeWarning: coroutine 'BaseEventLoop.shutdown_asyncgens' was never awaited`` after every run.
    Nothing is lost — the loop is new, our ops are synchronous, it holds no async generator — so the
    warning is noise; every other warning still shows."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"coroutine 'BaseEventLoop\.shutdown_asyncgens' was never awaited",
                                category=RuntimeWarning)
        yield


def run_job(job: dg.JobDefinition, resources: Mapping[str, Any], *, verbose: bool = False,
            instance: dg.DagsterInstance | None = None,
            listener: Callable[[Any], None] | None = None) -> dg.ExecuteInProcessResult:
    """Run any job in this process, keeping its default config, without Dagster's console log unless
    ``verbose``. A failed step does not raise (see ``result.success``); a definition problem does.
    ``listener`` gets each event of the run as it is stored (:class:`~.run_progress.RunProgress`)."""
    if instance is None:
        instance = home_instance()
    options: dict[str, Any] = {"resources": dict(resources), "raise_on_error": False, "instance": instance}
    listened: dg.DagsterInstance | None = None  # the instance that holds the listener
    if listener is not None:  # the run's id chosen here, so that its events reach the listener from the first
        from dagster._core.utils import make_new_run_id

        options["instance"] = listened = instance or dg.DagsterInstance.ephemeral()
        options["run_id"] = make_new_run_id()
        listened.add_event_listener(options["run_id"], listener)
    try:
        with unawaited_loop_cleanup_ignored(), storage_faults():
            if verbose:
                return job.execute_in_process(**options)
            try:
                return job.execute_in_process(run_config={**(job.run_config or {}), "loggers": QUIET_LOGGERS},
                                              **options)
            except dg.DagsterInvalidConfigError:  # a job whose config mapping has no place for loggers
                return job.execute_in_process(**options)
    finally:
        if listened is not None:
            _forget_listener(listened, options["run_id"])


def _forget_listener(instance: dg.DagsterInstance, run_id: str) -> None:
    """Drop the run's listeners once it has ended. Dagster has no call to remove one, and keeps them (and what
    they hold: the compiled pipeline) in the instance for good, which a notebook keeps for the process: 240
    ``%pipeline run`` cells would keep 240 pipelines."""
    subscribers = getattr(instance, "_subscribers", None)
    if isinstance(subscribers, dict):
        subscribers.pop(run_id, None)


def run_compiled(compiled: CompiledPipeline, resources: Mapping[str, Any], *, verbose: bool = False,
                 instance: dg.DagsterInstance | None = None,
                 progress: Callable[[str], None] | None = None) -> PipelineRun:
    """Execute the job in this process with ``resources``; never raises for a failed step.

    The pipeline's ``notify:`` mails go out once the run has ended (a mail that cannot be sent is logged:
    the run's own outcome stands). Step outputs stay in memory unless ``resources`` has an ``io_manager``,
    but capped at ``CONNECTOR_OPS_MAX_STEP_OUTPUT`` as a deployment's are (:class:`CappedInMemoryIOManager`):
    an output too large fails here as it would there. ``progress`` gets the lines of
    :class:`~.run_progress.RunProgress` while the run goes (not with ``verbose``: Dagster's log says it all).
    """
    resources = {"io_manager": capped_in_memory_io_manager, **resources}
    if instance is None:  # the mails and the step warnings are read from the run's log afterwards
        instance = home_instance() or dg.DagsterInstance.ephemeral()
    listener = RunProgress(progress, compiled) if progress is not None and not verbose else None
    result = run_job(compiled.job, resources, verbose=verbose, instance=instance, listener=listener)
    with storage_faults():  # the mails and the warnings read the run's log
        if compiled.pipeline.notify:
            from connector_ops.pipelines.notifications import notify_run

            try:
                notify_run(compiled.pipeline, instance, result.dagster_run, resources)
            except ConnectorError as exc:
                logger.error("pipeline %s: notification not sent: %s", compiled.pipeline.name, exc)
        run = PipelineRun(compiled.pipeline.name, result, compiled)
        run.read_warnings(instance)
    return run


def _interrupted(event: dg.DagsterEvent) -> bool:
    """Whether a ``STEP_FAILURE`` is Dagster's report of an interrupt (``ErrorSource.INTERRUPT``, not
    exported by Dagster: compared by name): the step was stopped, and what it was writing rolled back."""
    data = event.step_failure_data
    return data is not None and data.error_source.name == "INTERRUPT"


SHOWN_CHARS = 160


def _short(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 1] + "…"


class PipelineRun:
    """The result of ``%pipeline run``: success, each step's status and outputs, the Dagster result."""

    def __init__(self, name: str, result: dg.ExecuteInProcessResult, compiled: Any = None) -> None:
        self.name, self.result, self.compiled = name, result, compiled
        self.success: bool = result.success
        self.run_id: str = result.run_id
        self.status: dict[str, str] = {}
        self.steps: dict[str, Any] = {}
        self.errors: dict[str, ConnectorError] = {}
        #: steps stopped by an interrupt (Ctrl-C, Jupyter's Stop, Dagster's Terminate), not by a failure
        self.interrupted: list[str] = []
        #: ``(step, message)`` for each warning a step logged (a filter naming no column of the file …)
        self.warnings: list[tuple[str, str]] = []
        if compiled is not None:
            self.status = {step.id: "not run" for step in compiled.pipeline.steps}
            self.steps = step_outputs(compiled, result)
        for event in result.all_events:
            if event.step_key is None:
                continue
            step = self._step_of(event.step_key)
            if event.event_type == dg.DagsterEventType.STEP_FAILURE and _interrupted(event):
                self.status[step] = "interrupted"
                self.interrupted.append(step)
            elif event.event_type == dg.DagsterEventType.STEP_FAILURE:
                self.status[step] = "failed"
                self.errors.setdefault(step, error_of_failed_step(event))
            elif event.event_type == dg.DagsterEventType.STEP_SUCCESS and self.status.get(step) != "failed" \
                    and self._own_op(event.step_key, step):
                self.status[step] = "success"
            elif event.event_type == dg.DagsterEventType.STEP_SKIPPED and step not in self.errors:
                self.status[step] = "skipped"
            elif event.is_successful_output and compiled is None:
                handle = event.step_output_data.step_output_handle
                self.steps.setdefault(step, {})[handle.output_name] = self._output(event, handle)

    def read_warnings(self, instance: dg.DagsterInstance) -> None:
        """:attr:`warnings` from the run's log in ``instance`` (the instance it ran in)."""
        self.warnings = [(self._step_of(entry.step_key), entry.user_message)
                         for entry in instance.all_logs(self.result.run_id)
                         if entry.level == logging.WARNING and entry.step_key and not entry.is_dagster_event]

    def _step_of(self, step_key: str) -> str:
        """A YAML step owns its helper steps (``<id>__input``, ``<id>__batches``, ``<id>[batch_3]``)."""
        return step_key if self.compiled is None else step_of(self.compiled, step_key)

    def _own_op(self, step_key: str, step: str) -> bool:
        """Whether ``step_key`` is the step's own op (``<id>``, a mapped copy, its ``__gather``), not a helper:
        a helper such as ``<id>__input`` can succeed while the step itself never runs (its ``after`` failed)."""
        node = step_key.split("[", 1)[0]
        return self.compiled is None or node == step or node == self.compiled.outputs.get(step, (step,))[0]

    def _output(self, event: dg.DagsterEvent, handle: Any) -> Any:
        node = str(event.node_handle) if event.node_handle else handle.step_key.split("[", 1)[0]
        try:
            value = self.result.output_for_node(node, handle.output_name)
        except Exception:  # an output that cannot be loaded back is shown as missing, not fatal
            return None
        if isinstance(value, Mapping):
            key = handle.mapping_key or (handle.step_key.split("[", 1)[1].rstrip("]") if "[" in handle.step_key
                                         else None)
            if key is not None:
                return value.get(key)
        return value

    def __getitem__(self, step: str) -> Any:
        """The outputs of one step (YAML: by spec field, ``run["load"]["virtualFileId"]``)."""
        return self.steps[step]

    def table(self) -> StatusTable:
        actions = {s.id: s.action.name for s in self.compiled.pipeline.steps} if self.compiled else {}
        rows = []
        for step in dict.fromkeys([*self.status, *self.steps]):
            shown = self.errors[step].summary() if step in self.errors else _short(self.steps[step]) \
                if step in self.steps else ""
            row = {"step": step, "action": actions.get(step), "status": self.status.get(step, "?"), "output": shown}
            if not actions:
                row.pop("action")
            rows.append(row)
        verdict = "succeeded" if self.success else "INTERRUPTED" if self.interrupted else "FAILED"
        return StatusTable(f"pipeline {self.name} {verdict} (run {self.run_id[:8]})", rows)

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        self.table()._repr_pretty_(printer, cycle)

    def failure(self) -> ConnectorError | None:
        """The first failed step's error as one line, or ``None`` after a successful run."""
        if self.success:
            return None
        for step, error in self.errors.items():
            return ConnectorError(error.status, {"message": f"step {step}: {error.summary()}"},
                                  action=f"pipeline {self.name}")
        if self.interrupted:
            stopped = ", ".join(self.interrupted)
            return ConnectorError(500, {"message": f"interrupted: {stopped} stopped before the end"},
                                  action=f"pipeline {self.name}")
        return ConnectorError(500, {"message": "the run failed before any step ran"}, action=f"pipeline {self.name}")
