"""``PipelineComponent``: one YAML pipeline as a Dagster Component of a ``dg`` project.

A ``defs.yaml`` in a ``defs/`` folder names the pipeline — a file beside it (``path:``) or the pipeline
itself (``pipeline:``) — and the component builds what ``connector_ops.pipelines.defs`` builds for a file of
the catalog: the job, its assets and checks, schedule, drive sensor and notification sensors, plus our
resources, IO manager and executor (:mod:`.shared`), so the project needs nothing else and no
``CONNECTOR_OPS_PIPELINES_DIR``. Dagster renders ``{{ env.X }}`` in the attributes when the project loads;
our ``${step.field}`` / ``${env.X}`` references stay in the pipeline and are resolved when the step runs.
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import dagster as dg
from dagster.components import (
    Component,
    ComponentLoadContext,
    ComponentTypeSpec,
    Model,
    ResolutionContext,
    Resolvable,
    Resolver,
    scaffold_with,
)
from pydantic import ConfigDict, Field, model_validator

from connector_ops.environment import pin_paths
from connector_ops.pipelines.broken import broken_pipelines_job
from connector_ops.pipelines.catalog import BROKEN_PIPELINES_JOB
from connector_ops.pipelines.components.claims import claim_names
from connector_ops.pipelines.components.inline import inline_document, render_templates, yaml_lines
from connector_ops.pipelines.components.overrides import Overrides, resolve_overrides
from connector_ops.pipelines.components.scaffold import PipelineScaffolder
from connector_ops.pipelines.components.shared import shared_definitions
from connector_ops.pipelines.dsl import (
    CompiledPipeline,
    Pipeline,
    PipelineError,
    Problem,
    compile_pipeline,
    load_pipeline,
)
from connector_ops.pipelines.dsl.names import name_like
from connector_ops.pipelines.dsl.source import Document
from connector_ops.pipelines.dsl.validate import apply_overrides, parse_pipeline

logger = logging.getLogger(__name__)

#: set by ``dg check defs`` (and ``dagster definitions validate``) while it loads the project: Dagster's way
#: for code to be strict only there
VALIDATING_VARIABLE = "DAGSTER_IS_DEFS_VALIDATION_CLI"


class PathAttribute(str):
    """The ``path:`` attribute as Dagster rendered it, and where it is written in ``defs.yaml``: a file that
    is not there is reported on that line, not as line 1 of a file that does not exist."""

    file: str
    line: int


def resolve_path(context: ResolutionContext, raw: Any) -> Any:
    """``path:`` rendered as ``pipeline:`` and ``set:`` are (:func:`.inline.render_templates`), plus its line.

    Dagster's own rendering gave ``{{ env.X }}`` of an unset variable as None: alone, the component was
    refused as naming neither ``path`` nor ``pipeline``; in a longer string it looked for ``None/p.yaml``.
    It now fails the load naming the variable, on the line of ``path:``."""
    value = render_templates(context, raw)
    if not isinstance(value, str):
        return value
    located = PathAttribute(value)
    located.file, lines = yaml_lines(context)
    located.line = lines.get((), 1)
    return located


PipelinePath = Annotated[
    PathAttribute | str,
    # described by the field below; rendered by resolve_path alone (Dagster's injection first gave it None)
    Resolver(resolve_path, model_field_type=str, inject_before_resolve=False),
]

InlinePipeline = Annotated[
    Document | Mapping[str, Any],
    Resolver(inline_document, model_field_type=dict[str, Any], inject_before_resolve=False,
             description="The pipeline itself, as in a pipeline file (docs/pipelines.md). Dagster renders "
                         "`{{ … }}` when the project loads; `${step.field}` references are resolved at run time."),
]

SetOverrides = Annotated[
    Overrides | Mapping[str, Any],
    Resolver(resolve_overrides, model_field_type=dict[str, Any], inject_before_resolve=False,
             description="Edits of the pipeline's step inputs, `step.field[.sub]: value`, as `pipeline run --set` "
                         "makes them: one pipeline file, values per project (`{{ env('X') }}` renders at load)."),
]


@scaffold_with(PipelineScaffolder)
class PipelineComponent(Component, Resolvable, Model):
    """A connector-ops YAML pipeline: its job, assets, checks, schedule and sensors, with our resources."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    path: PipelinePath | None = Field(
        default=None,
        description="A pipeline file, relative to this component's folder (or absolute), e.g. `sales_report.yaml`.",
        examples=["pipeline.yaml"],
    )
    pipeline: InlinePipeline | None = None
    set: SetOverrides = Field(default_factory=Overrides)
    resources: bool = Field(
        default=True,
        description="Provide connector-ops' resources, the step-output `io_manager` and the executor "
                    "(false when the project defines them itself).",
    )

    @model_validator(mode="after")
    def _one_source(self) -> PipelineComponent:
        if (self.path is None) == (self.pipeline is None):
            raise ValueError("give exactly one of `path` (a pipeline file) and `pipeline` (the pipeline inline)")
        return self

    @classmethod
    def get_spec(cls) -> ComponentTypeSpec:
        return ComponentTypeSpec(
            description="A connector-ops YAML pipeline (Google Drive, mail and ETL steps) as a Dagster job "
                        "with its assets, checks, schedule and sensors.",
            tags=["connector-ops", "pipeline", "etl"],
            produces=["job", "asset", "asset_check", "schedule", "sensor", "resource"],
        )

    def compile(self, context: ComponentLoadContext) -> CompiledPipeline:
        """The validated, compiled pipeline; :class:`PipelineError` lists every problem with file and line."""
        overrides = self.set if isinstance(self.set, Overrides) else Overrides(
            values=dict(self.set), file=str(context.path / "defs.yaml"))
        try:
            pipeline = self._validated(context, overrides.items())
        except PipelineError as exc:
            raise overrides.locate(exc) from None
        return compile_pipeline(pipeline)

    def _validated(self, context: ComponentLoadContext, overrides: list[str]) -> Pipeline:
        if self.path is not None:
            file = Path(self.path).expanduser()
            file = file if file.is_absolute() else context.path / file
            if not file.is_file():
                raise PipelineError([Problem(getattr(self.path, "file", str(context.path / "defs.yaml")),
                                             getattr(self.path, "line", 1),
                                             f"`path` {str(self.path)!r}: no pipeline file at {file}")])
            return load_pipeline(file, overrides)
        document = self.pipeline
        if not isinstance(document, Document):  # built in Python with a plain mapping
            document = Document(data=dict(document or {}), file=str(context.path / "defs.yaml"))
        if overrides:
            elsewhere: dict[tuple[str | int, ...], tuple[str, int]] = {}
            data = apply_overrides(copy.deepcopy(document.data), overrides, elsewhere)
            document = Document(data=data, file=document.file, lines=document.lines, elsewhere=elsewhere)
        return parse_pipeline(document)

    def build_defs(self, context: ComponentLoadContext) -> dg.Definitions:
        """The pipeline's definitions. A broken pipeline fails ``dg check defs`` with its problems (so CI
        stops it) but, in a running code location, costs only its own job: it becomes the job
        ``broken_pipelines__<folder>`` listing the problems, as the catalog's ``broken_pipelines`` does, and
        every other component's jobs, schedules and sensors still load."""
        pin_paths()  # one home (and path settings) for the code location and every run and step process it starts
        try:
            compiled = self.compile(context)
            claim_names(context, compiled)  # a name another component took: our problem, naming it
        except PipelineError as exc:
            if os.environ.get(VALIDATING_VARIABLE) == "1":
                raise
            defs = self._broken(context, exc)
        else:
            defs = self._defs(compiled)
        return dg.Definitions.merge(defs, shared_definitions()) if self.resources else defs

    @staticmethod
    def _broken(context: ComponentLoadContext, exc: PipelineError) -> dg.Definitions:
        for problem in exc.problems:
            logger.error("pipeline component not loaded: %s", problem)
        try:
            folder = context.path.relative_to(context.defs_module_path).as_posix()
        except ValueError:  # a component loaded from elsewhere than the defs folder
            folder = context.path.name
        job = f"{BROKEN_PIPELINES_JOB}__{name_like(folder) or 'component'}"
        return dg.Definitions(jobs=[broken_pipelines_job(exc.problems, name=job, op_name=f"{job}__report")])

    @staticmethod
    def _defs(compiled: CompiledPipeline) -> dg.Definitions:
        return dg.Definitions(
            jobs=[compiled.job],
            assets=list(compiled.assets),
            asset_checks=list(compiled.checks),
            schedules=[compiled.schedule] if compiled.schedule is not None else [],
            sensors=[*([compiled.sensor] if compiled.sensor is not None else []), *compiled.notify_sensors],
        )

