"""What an in-process run shows while it goes: a line when each step starts and ends, and its progress.

``pipeline run`` and ``%pipeline run`` silence Dagster's console log (its DEBUG engine events drown what
matters), which left a long run silent until its summary. :class:`RunProgress` listens to the run's
events in the instance instead and writes, as plain lines (no carriage returns: the same in a terminal,
a cron mail, a CI log or a cell's output):

    load: started (etl.push)
    load: push big.csv: 42% (33.4 MiB of 79.2 MiB)
    load: succeeded in 12.3s
    check: failed in 0.4s (status 400)

The progress lines are the ones the step's ops log at INFO (their ``LogReporter``, at its pace): our
own messages only, never Dagster's. Warnings are left to the summary, which prints them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import dagster as dg

from connector_ops.pipelines.dsl.checks import CHECK_NODE_SUFFIX

if TYPE_CHECKING:
    from connector_ops.pipelines.dsl import CompiledPipeline

logger = logging.getLogger(__name__)


def step_of(compiled: CompiledPipeline, step_key: str) -> str:
    """The YAML step that owns a Dagster step: its helpers are ``<id>__input``, ``<id>__batches``, …,
    and mapped copies ``<node>[key]``. A step's asset check (``<id>__check``) is reported as itself: its
    failure is the data's, not the step's, which succeeded."""
    base = step_key.split("[", 1)[0]
    ids = {step.id for step in compiled.pipeline.steps}
    if base.endswith(CHECK_NODE_SUFFIX) and base.removesuffix(CHECK_NODE_SUFFIX) in ids:
        return base
    owner = base if base in ids else base.rsplit("__", 1)[0]
    return owner if owner in ids else base


class RunProgress:
    """An instance event listener (``instance.add_event_listener``) writing a run's lines to ``write``.

    A YAML step is several Dagster steps (``<id>__input``, mapped copies ``<id>[k]``, ``<id>__gather``):
    it starts with the first of them and ends when the one holding its outputs ends, or when any fails.
    Without ``compiled`` (a Dagster job not written in YAML) each Dagster step is shown as itself."""

    def __init__(self, write: Callable[[str], None], compiled: Any = None) -> None:
        self.write, self.compiled = write, compiled
        self.started: dict[str, float] = {}  # step -> timestamp of its first Dagster step's start
        self.ended: set[str] = set()

    def __call__(self, entry: Any) -> None:
        """Never lets a display problem break the run it watches."""
        try:
            self._show(entry)
        except Exception:
            logger.debug("a progress line of the run could not be shown", exc_info=True)

    def _show(self, entry: Any) -> None:
        if entry.step_key is None:
            return
        step = self._step_of(entry.step_key)
        event = entry.dagster_event
        if event is None:
            if entry.level == logging.INFO and entry.user_message:
                self.write(f"{step}: {entry.user_message}")
            return
        kind = event.event_type
        if kind == dg.DagsterEventType.STEP_START and step not in self.started:
            action = self._action_of(step)
            self.started[step] = entry.timestamp
            self.write(f"{step}: started{f' ({action})' if action else ''}")
        elif kind == dg.DagsterEventType.STEP_FAILURE and step not in self.ended:
            self.ended.add(step)
            data = event.step_failure_data
            if data is not None and data.error_source.name == "INTERRUPT":
                self.write(f"{step}: interrupted after {self._took(step, entry)}")
                return
            from connector_ops.ops.factory import error_of_failed_step

            status = error_of_failed_step(event).status
            self.write(f"{step}: failed in {self._took(step, entry)} (status {status})")
        elif kind == dg.DagsterEventType.STEP_SUCCESS and step not in self.ended \
                and entry.step_key.split("[", 1)[0] == self._output_node(step):
            self.ended.add(step)
            self.write(f"{step}: succeeded in {self._took(step, entry)}")

    def _step_of(self, step_key: str) -> str:
        if self.compiled is None:
            return step_key
        return step_of(self.compiled, step_key)

    def _output_node(self, step: str) -> str:
        """The node whose success ends ``step``: the one the step's outputs are read from."""
        if self.compiled is None:
            return step.split("[", 1)[0]
        return self.compiled.outputs.get(step, (step,))[0]

    def _action_of(self, step: str) -> str | None:
        if self.compiled is None:
            return None
        return next((s.action.name for s in self.compiled.pipeline.steps if s.id == step), None)

    def _took(self, step: str, entry: Any) -> str:
        return f"{max(0.0, entry.timestamp - self.started.get(step, entry.timestamp)):.1f}s"
