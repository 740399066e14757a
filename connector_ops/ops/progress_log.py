"""A step's progress as lines of its Dagster log (``context.log.info``), one every few seconds.

The ops and assets install it around their action; ``pipeline run`` and ``%pipeline run`` show these
lines as the run goes (:mod:`connector_ops.pipelines.run_progress`), the UI in the step's log.
"""

from __future__ import annotations

from collections.abc import Callable

from connector_ops.kernel.progress import ReporterFactory, log_lines
from connector_ops.kernel.settings import progress_interval

#: seconds between two lines of one piece of work (``CONNECTOR_OPS_PROGRESS_INTERVAL`` overrides it)
STEP_INTERVAL = 5


def step_progress(log: Callable[[str], None]) -> ReporterFactory:
    """A reporter factory writing to ``log`` (a step's ``context.log.info``) at the step interval."""
    return log_lines(log, progress_interval(STEP_INTERVAL))
