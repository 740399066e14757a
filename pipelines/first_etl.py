"""``first_etl``: the hand-written job of the Definitions, a graph of the generated ETL ops on the bundled
sales CSV (embedded defaults). Its own module so that the catalog can know its op names (a pipeline file
must not define another op of the same name) without importing the Definitions."""

from __future__ import annotations

import dagster as dg

from connector_ops.ops import etl_pull, etl_push, etl_query
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
def first_etl() -> None:
    vf = etl_push(platform_file=sample_file())
    etl_pull(virtual_file_id=vf, after=[etl_query(virtual_file_id=vf)])
