"""The Definitions object: jobs, schedules, sensors and resources from the environment."""

from __future__ import annotations

import dagster as dg

from connector_ops.environment import resources_from_env
from connector_ops.ops import etl_pull, etl_push, etl_query
from pipelines.samples import sample_file


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


defs = dg.Definitions(jobs=[first_etl], resources=resources_from_env(deferred=True))
