"""The job that stands for pipelines that did not load: the catalog's ``broken_pipelines``, and one per
broken pipeline component of a ``dg`` project.

A broken pipeline costs its own job only: the code location, every other job, schedule and sensor still
load, and this job keeps the problem visible where the user looks — the UI's job list, its description (every
problem, file:line and step), and a launch, which fails with them (so a schedule or a script that expected
the job learns why; in the shipped-pipelines location a broken file's schedule or drive-folder sensor also
keeps its name and skips each tick saying why, :mod:`.stand_ins`).
"""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from connector_ops.pipelines.catalog import BROKEN_PIPELINES_JOB, REPORT_PROBLEMS_OP
from connector_ops.pipelines.dsl import Problem


def broken_pipelines_job(problems: Sequence[Problem], name: str = BROKEN_PIPELINES_JOB,
                         op_name: str = REPORT_PROBLEMS_OP) -> dg.JobDefinition:
    """A job ``name`` whose description lists ``problems`` and whose one op (``op_name``: Dagster wants each
    op name once in a code location) fails with them."""
    text = "\n".join(str(problem) for problem in problems)

    @dg.op(name=op_name)
    def report_pipeline_problems() -> None:
        raise dg.Failure(description=f"{len(problems)} problem(s) in pipeline files:\n{text}")

    @dg.job(name=name, tags={"kind": "problems"},
            description=f"Pipeline files that did not load (fix them, then reload the code location):\n{text}")
    def broken_pipelines() -> None:
        report_pipeline_problems()

    return broken_pipelines
