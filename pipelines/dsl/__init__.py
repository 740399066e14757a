"""The YAML pipeline DSL: a pipeline file compiles into a Dagster job of the generated action ops.

``load_pipeline(path)`` parses and validates a file (every problem with file, line and step);
``compile_pipeline(pipeline)`` turns it into a job (plus its schedule and drive-folder sensor).
The syntax is documented in docs/pipelines.md.
"""

from connector_ops.pipelines.dsl.compiler import CompiledPipeline, compile_pipeline
from connector_ops.pipelines.dsl.model import Pipeline, PipelineError, Problem, Step
from connector_ops.pipelines.dsl.validate import load_pipeline, parse_pipeline

__all__ = [
    "CompiledPipeline",
    "Pipeline",
    "PipelineError",
    "Problem",
    "Step",
    "compile_pipeline",
    "load_pipeline",
    "parse_pipeline",
]
