"""``set:`` — edits of the pipeline a component loads, as ``connector-ops pipeline run --set`` makes them.

One pipeline file then serves several projects or deployments: ``set: {export.exportName: "{{ env('REGION')
}}.csv"}`` fills a step's input when the project loads, without editing the file. Values are rendered like the
inline pipeline (only strings holding a Dagster template; ``${…}`` stays for run time), and a problem is
reported on the line of ``defs.yaml`` that holds the key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dagster.components import ResolutionContext

from connector_ops.pipelines.components.inline import render_templates, yaml_lines
from connector_ops.pipelines.dsl import PipelineError, Problem

CLI_FILE = "--set"  # where apply_overrides says its problems are


@dataclass(frozen=True)
class Overrides:
    """``step.field[.sub]`` -> value, and where each key is written."""

    values: Mapping[str, Any] = field(default_factory=dict)
    file: str = "<set>"
    lines: Mapping[str, int] = field(default_factory=dict)

    def items(self) -> list[str]:
        """As ``--set`` arguments (values as JSON, which ``apply_overrides`` parses back)."""
        return [f"{key}={json.dumps(value)}" for key, value in self.values.items()]

    def locate(self, exc: PipelineError) -> PipelineError:
        """``exc`` with the problems of a ``set:`` key moved to that key's line in ``defs.yaml``."""
        located = []
        keys = list(self.values)
        for problem in exc.problems:
            key = next((k for k, item in zip(self.values, self.items(), strict=True)
                        if problem.file == CLI_FILE and problem.message.startswith(repr(item))), None)
            if key is None and problem.file == CLI_FILE and 1 <= problem.line <= len(keys):
                key = keys[problem.line - 1]  # the validator's problem with the value this key set
                located.append(Problem(self.file, self.lines.get(key, 1), f"set {key!r}: {problem.message}",
                                       problem.step))
                continue
            if key is None:
                located.append(problem)
                continue
            reason = problem.message[len(repr(f"{key}={json.dumps(self.values[key])}")):].lstrip(": ")
            reason = reason.replace("write --set step.field=value", "name a step's input field: step.field[.sub]")
            located.append(Problem(self.file, self.lines.get(key, 1), f"set {key!r}: {reason}"))
        return PipelineError(located)


def resolve_overrides(context: ResolutionContext, raw: Any) -> Overrides:
    """The ``set:`` attribute: templates rendered, each key's line kept."""
    file, lines = yaml_lines(context)
    values = render_templates(context, dict(raw or {}))
    return Overrides(values=values, file=file,
                     lines={str(path[0]): line for path, line in lines.items() if len(path) == 1})
