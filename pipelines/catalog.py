"""Find the pipeline files that become jobs: ``pipelines/*.yaml`` and ``$CONNECTOR_OPS_PIPELINES_DIR``.

Every file is validated when the Definitions load; if any has problems, loading fails with all of
them (file, line, step), so a broken pipeline is never silently missing from the UI.
"""

from __future__ import annotations

import os
from pathlib import Path

from connector_ops.pipelines.dsl import CompiledPipeline, PipelineError, Problem, compile_pipeline, load_pipeline

PACKAGE_DIR = Path(__file__).resolve().parent
PIPELINES_DIR_VARIABLE = "CONNECTOR_OPS_PIPELINES_DIR"


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


def load_catalog(environ: dict[str, str] | None = None) -> list[CompiledPipeline]:
    """Every pipeline file compiled; raises :class:`PipelineError` with the problems of all files."""
    problems: list[Problem] = []
    compiled: list[CompiledPipeline] = []
    names: dict[str, str] = {}
    assets: dict[str, str] = {}  # asset key -> the step that makes it: one maker per asset
    for path in pipeline_files(environ):
        try:
            pipeline = load_pipeline(path)
        except PipelineError as exc:
            problems += exc.problems
            continue
        if pipeline.name in names:
            used = f"job name {pipeline.name!r} is already used by {names[pipeline.name]}"
            problems.append(Problem(str(path), 1, used))
            continue
        names[pipeline.name] = str(path)
        for step in pipeline.steps:
            if step.asset is None:
                continue
            key = "/".join(step.asset.key)
            if key in assets:
                problems.append(Problem(str(path), step.line, f"asset {key!r} is already made by {assets[key]}",
                                        step.id))
            assets[key] = f"{path} (step {step.id})"
        compiled.append(compile_pipeline(pipeline))
    if problems:
        raise PipelineError(problems)
    return compiled


def find_pipeline(name: str, environ: dict[str, str] | None = None) -> Path | None:
    """The file defining the pipeline (job) ``name``, if any."""
    for path in pipeline_files(environ):
        try:
            if load_pipeline(path).name == name:
                return path
        except PipelineError:
            continue
    return None
