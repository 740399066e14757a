"""Find the pipeline files that become jobs: ``pipelines/*.yaml`` and ``$CONNECTOR_OPS_PIPELINES_DIR``.

Every file is validated when the Definitions load. A broken file is reported, never silently missing, and
never takes the other jobs down with it: :func:`read_catalog` returns the pipelines that compiled and the
problems (file, line, step) of the others; :func:`load_catalog` is the strict form.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

from connector_ops.kernel.notices import silenced
from connector_ops.pipelines.dsl import (
    CompiledPipeline,
    Pipeline,
    PipelineError,
    Problem,
    compile_pipeline,
    load_pipeline,
)
from connector_ops.pipelines.first_etl import first_etl

logger = logging.getLogger(__name__)

PACKAGE_DIR = Path(__file__).resolve().parent
PIPELINES_DIR_VARIABLE = "CONNECTOR_OPS_PIPELINES_DIR"
BROKEN_PIPELINES_JOB = "broken_pipelines"
#: the jobs :mod:`connector_ops.pipelines.definitions` defines in code: a pipeline file cannot take their names
CODE_JOBS = {first_etl.name: "the hand-written job first_etl (connector_ops.pipelines.first_etl)",
             BROKEN_PIPELINES_JOB: "the job listing the files that did not load"}
#: the op of ``broken_pipelines`` (made anew at each load, from the problems: no pipeline's definition is it)
REPORT_PROBLEMS_OP = "report_pipeline_problems"
#: the ops and graphs of those jobs (name -> definition, owner): Dagster wants each op or graph name defined
#: once in a code location
CODE_NODES: dict[str, tuple[object, str]] = {
    **{node.name: (node, CODE_JOBS[first_etl.name]) for node in first_etl.all_node_defs},
    REPORT_PROBLEMS_OP: (None, CODE_JOBS[BROKEN_PIPELINES_JOB])}


def pipeline_files(environ: dict[str, str] | None = None) -> list[Path]:
    """The shipped pipelines, then those of ``CONNECTOR_OPS_PIPELINES_DIR`` (sorted by name in each)."""
    env = os.environ if environ is None else environ
    dirs = [PACKAGE_DIR]
    extra = env.get(PIPELINES_DIR_VARIABLE)
    if extra:
        dirs.append(Path(extra).expanduser().resolve())
    files: list[Path] = []
    for folder in dirs:
        if folder.is_dir():
            files += sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    return files


def pipelines_dir_problem(environ: Mapping[str, str] | None = None) -> Problem | None:
    """``CONNECTOR_OPS_PIPELINES_DIR`` set to something that is not a folder (a typo): reported, else the
    deployment would run without the team's pipelines and say nothing."""
    extra = (os.environ if environ is None else environ).get(PIPELINES_DIR_VARIABLE)
    if not extra:
        return None
    folder = Path(extra).expanduser().resolve()
    if folder.is_dir():
        return None
    what = "a file, not a folder" if folder.exists() else "no such folder"
    return Problem(str(folder), 0, f"{PIPELINES_DIR_VARIABLE}={extra!r}: {what}, so none of its pipeline files "
                                   "are loaded")


@dataclass
class Catalog:
    """The pipelines that compiled, and the problems of the files that did not (file:line, step)."""

    pipelines: list[CompiledPipeline] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def read_catalog(environ: dict[str, str] | None = None) -> Catalog:
    """Every pipeline file that compiles, and the problems of the others.

    A broken file costs its own job only: the code location (and every other job, schedule and sensor) still
    loads, and the problems are reported (the Definitions' log and ``broken_pipelines`` job, ``pipeline list``).
    A ``CONNECTOR_OPS_PIPELINES_DIR`` that is not a folder is a problem too (:func:`pipelines_dir_problem`).
    A second file using a job name already taken (by a file before it or a job defined in code) is a problem
    of that second file. So is any other exception while loading or compiling it (a bug of ours or of a
    library the file reaches): logged with its traceback, reported as an internal error to report.
    """
    catalog = Catalog()
    misplaced = pipelines_dir_problem(environ)
    if misplaced is not None:
        catalog.problems.append(misplaced)
    taken = TakenNames()
    for path in pipeline_files(environ):
        try:
            catalog.pipelines.append(taken.admit(path))
        except PipelineError as exc:
            catalog.problems += exc.problems
    return catalog


@dataclass
class TakenNames:
    """What the files admitted so far (and the jobs defined in code) have taken in one code location: job names,
    asset keys (one maker each) and Dagster op/graph names. The catalog admits the files of a deployment one by
    one, ``pipeline validate`` the files it is given: the same checks, so a file validate passes is one the
    catalog loads beside the others given with it."""

    names: dict[str, str] = field(default_factory=lambda: dict(CODE_JOBS))
    assets: dict[str, str] = field(default_factory=dict)  # asset key -> the step that makes it
    nodes: dict[str, tuple[object, str]] = field(default_factory=lambda: dict(CODE_NODES))

    def admit(self, path: Path) -> CompiledPipeline:
        """Load and compile ``path``, check it takes nothing already taken, and take what it uses; raises
        :class:`PipelineError` (any other exception, a bug of ours or of a library the file reaches, is logged
        and raised as that file's internal error: it costs that file only)."""
        try:
            pipeline = load_pipeline(path)
            if pipeline.name in self.names:
                used = f"job name {pipeline.name!r} is already used by {self.names[pipeline.name]}"
                raise PipelineError([Problem(str(path), 1, used)])
            mine = asset_makers(pipeline, path, self.assets)
            compiled = compile_pipeline(pipeline)
            my_nodes = node_names(compiled, path, self.nodes)
        except PipelineError:
            raise
        except Exception as exc:  # one file's failure, whatever it is, is that file's problem
            raise PipelineError([_internal_error(path, exc)]) from exc
        self.names[pipeline.name] = str(path)
        self.assets.update(mine)
        self.nodes.update(my_nodes)
        return compiled


def _internal_error(path: Path, exc: Exception) -> Problem:
    """The problem of a file whose loading raised what no check of ours foresaw. Its traceback goes to the
    log (frames and source lines, no local values, so nothing of the environment), the problem names the
    exception so the report can be matched with the log."""
    logger.error("internal error loading pipeline file %s", path, exc_info=exc)
    return Problem(str(path), 1, f"internal error while loading the file: {type(exc).__name__}: {exc} — a bug "
                                 "of connector-ops, please report it with the traceback from the log")


def asset_makers(pipeline: Pipeline, path: Path, assets: dict[str, str]) -> dict[str, str]:
    """Asset key -> ``file (step id)`` for the assets this file makes; one maker per asset across files, so
    a key already made (earlier in this file or by another file) is this file's problem."""
    mine: dict[str, str] = {}
    taken: list[Problem] = []
    for step in pipeline.steps:
        if step.asset is None:
            continue
        key = "/".join(step.asset.key)
        if key in assets or key in mine:
            taken.append(Problem(str(path), step.line, f"asset {key!r} is already made by "
                                 f"{assets.get(key) or mine[key]}", step.id))
        mine[key] = f"{path} (step {step.id})"
    if taken:
        raise PipelineError(taken)
    return mine


def node_names(compiled: CompiledPipeline, path: Path, nodes: dict[str, tuple[object, str]]
                ) -> dict[str, tuple[object, str]]:
    """Op/graph name -> (its definition, who defines it) for the nodes this file adds to the code location:
    its job's graph and ops, and its asset checks' ops (``<key as identifier>_<check name>``, in Dagster's
    asset job). Dagster refuses the whole code location when one name has two definitions (``sales-eu/orders``
    and ``sales_eu/orders`` both name their check op ``sales_eu__orders_validate``), so a name already
    defined (by an earlier file, a job in code, or this file's job) is this file's problem, at its step."""
    pipeline = compiled.pipeline
    job_prefix = f"{pipeline.name}__"
    # name, definition, what it is, line, step, what to rename: the part of the file the name is made of
    named: list[tuple[str, object, str, int, str | None, str]] = [
        (compiled.job.graph.name, compiled.job.graph, f"job {pipeline.name}", 1, None, "the job (`name:`)")]
    for node in compiled.job.all_node_defs:
        step_id = node.name.removeprefix(job_prefix).split("__", 1)[0]
        step = next((s for s in pipeline.steps if s.id == step_id), None)
        named.append((node.name, node, f"op {node.name} of job {pipeline.name}", step.line if step else 1,
                      step.id if step else None, "the step (`id:`) or the job (`name:`)"))
    for check in compiled.checks:
        [key] = {k.asset_key for k in check.check_keys}
        step = next(s for s in pipeline.steps if s.asset is not None and dg.AssetKey(list(s.asset.key)) == key)
        assert step.check is not None
        named.append((check.node_def.name, check.node_def, f"the op of check {step.check.name} of asset "
                      f"{key.to_user_string()}", step.line, step.id, "the asset key or the check (`check: name:`)"))
    mine: dict[str, tuple[object, str]] = {}
    taken: list[Problem] = []
    for name, definition, what, line, at_step, rename in named:
        known = nodes.get(name) or mine.get(name)
        if known is not None and known[0] is not definition:
            taken.append(Problem(str(path), line, f"{what} gets the Dagster name {name!r}, which {known[1]} "
                                 "already has (Dagster wants each op or graph name once in a code location): "
                                 f"rename {rename}", at_step))
        mine.setdefault(name, (definition, f"{path} ({what})"))
    if taken:
        raise PipelineError(taken)
    return mine


def load_catalog(environ: dict[str, str] | None = None) -> list[CompiledPipeline]:
    """Every pipeline file compiled; raises :class:`PipelineError` with the problems of all files."""
    catalog = read_catalog(environ)
    if catalog.problems:
        raise PipelineError(catalog.problems)
    return catalog.pipelines


def load_checked(path: Path, **options: Any) -> Pipeline:
    """:func:`load_pipeline`, with what no check of ours foresaw raised as the file's problem
    (:func:`_internal_error`) rather than as a traceback: the commands report both the same way."""
    try:
        return load_pipeline(path, **options)
    except PipelineError:
        raise
    except Exception as exc:
        raise PipelineError([_internal_error(path, exc)]) from exc


def find_pipeline(name: str, environ: dict[str, str] | None = None) -> Path | None:
    """The file defining the pipeline (job) ``name``, if any. The other files are only looked through: one
    that does not load is passed over (an unexpected exception logged as :func:`read_catalog` logs it), so a
    broken file never stops a run of another pipeline. But a file named ``name`` that does not load is the
    one meant: it is returned, for its problems to be reported when it is loaded, not "no pipeline named"."""
    named = None
    for path in pipeline_files(environ):
        try:
            with silenced():  # only looked through: the file found says its notices when it is loaded to run
                if load_checked(path).name == name:
                    return path
        except PipelineError:
            if path.stem == name:
                named = path
    return named
