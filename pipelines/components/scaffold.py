"""``dg scaffold defs connector_ops.pipelines.components.PipelineComponent NAME``: a pipeline that runs.

Writes ``defs/NAME/defs.yaml`` naming ``pipeline.yaml`` beside it, a starter pipeline (load a CSV, keep some
rows, export them) and its ``data/example.csv`` — so ``dg check defs`` passes and the job runs at once, and the
user edits a working file instead of an empty one. Files already there are kept.
"""

from __future__ import annotations

from pathlib import Path

from dagster.components import Scaffolder, ScaffoldRequest
from dagster.components.component_scaffolding import scaffold_component

from connector_ops.pipelines.dsl.names import name_like

PIPELINE_FILE = "pipeline.yaml"
STARTER = """\
# A connector-ops pipeline (docs/pipelines.md): each step runs an action; ${{step.field}} wires outputs to
# inputs when the step runs, {{{{ env.X }}}} in defs.yaml is filled in by Dagster when the project loads.
name: {name}
description: Load data/example.csv, keep the open orders and export them as CSV
steps:
  - id: load
    action: etl.push
    asset: {name}/orders
    input:
      platformFile: "${{file:data/example.csv}}"
      parameters: {{useFirstRowAsSchema: true, csvDelimiter: ","}}
  - id: drop_closed
    action: etl.delete_rows
    input:
      virtualFileId: "${{load.virtualFileId}}"
      request: {{status: closed}}
  - id: export
    action: etl.pull
    after: [drop_closed]
    input:
      virtualFileId: "${{load.virtualFileId}}"
      exportType: csv
      exportName: open_orders.csv
"""
EXAMPLE_CSV = "order_id,customer,amount,status\nA-1,ada,12.50,open\nA-2,bob,7.00,closed\nA-3,cy,30.25,open\n"


def pipeline_name(folder: Path) -> str:
    """A job name from the component's folder name, in the ASCII letters, digits and _ Dagster takes
    (``weekly-report`` -> ``weekly_report``, ``ventes-été`` -> ``ventes_ete``); ``pipeline`` when none is left."""
    return name_like(folder.name) or "pipeline"


class PipelineScaffolder(Scaffolder):
    """``defs.yaml`` with ``path: pipeline.yaml``, the starter pipeline and its sample data."""

    def scaffold(self, request: ScaffoldRequest) -> None:
        if request.scaffold_format != "yaml":
            scaffold_component(request, {})
            return
        folder = request.target_path
        folder.mkdir(parents=True, exist_ok=True)
        scaffold_component(request, {"path": PIPELINE_FILE})
        for path, text in ((folder / PIPELINE_FILE, STARTER.format(name=pipeline_name(folder))),
                           (folder / "data" / "example.csv", EXAMPLE_CSV)):
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
