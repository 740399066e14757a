"""The Definitions object: jobs, schedules, sensors and resources from the environment.

Jobs: ``first_etl`` (a hand-written graph of generated ops) and one job per pipeline file
(``pipelines/*.yaml`` and ``$CONNECTOR_OPS_PIPELINES_DIR``, see :mod:`connector_ops.pipelines.catalog`), among them
the demo ``sales_report``. A pipeline's ``schedule:`` becomes a schedule and its ``on_new_file:`` a
drive-folder sensor (both stopped until turned on in the UI or with ``dagster schedule/sensor start``).
"""

from __future__ import annotations

import dagster as dg

from connector_ops.ops import etl_pull, etl_push, etl_query
from connector_ops.ops.resources import dagster_resources
from connector_ops.pipelines.catalog import load_catalog
from connector_ops.pipelines.executors import job_executor
from connector_ops.pipelines.samples import sample_file


@dg.job(
    description="Push the bundled sales CSV, query one region and pull the result as CSV (embedded defaults).",
    config={
        "ops": {
            "sample_file": {"config": {"name": "sales.csv"}},
            "etl_query": {"config": {"query": {"region": "North"}}},
            "etl_pull": {"config": {"exportType": "csv", "exportName": "north_sales.csv"}},
        }
    },
    tags={"kind": "demo"},
)
def first_etl():
    vf = etl_push(platform_file=sample_file())
    etl_pull(virtual_file_id=vf, after=[etl_query(virtual_file_id=vf)])


def build_definitions() -> dg.Definitions:
    """Compile the pipeline files now (each load re-reads them, so ``dagster dev`` reloads pick up edits)."""
    pipelines = load_catalog()
    return dg.Definitions(
        jobs=[first_etl, *(p.job for p in pipelines)],
        assets=[spec for p in pipelines for spec in p.assets],
        schedules=[p.schedule for p in pipelines if p.schedule is not None],
        sensors=[p.sensor for p in pipelines if p.sensor is not None],
        resources=dagster_resources(),
        executor=job_executor(),  # CONNECTOR_OPS_EXECUTOR: in_process (default), multiprocess, celery
    )


defs = build_definitions()
