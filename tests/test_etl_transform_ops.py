"""The transform actions as Dagster ops: Map, Validate, Join and Delete Rows wired in one job."""

from __future__ import annotations

import dagster as dg

from connector_ops.ops import etl_delete_rows, etl_join, etl_map, etl_push, etl_validate


@dg.job
def transforms():
    vf = etl_push()
    checked = etl_validate(virtual_file_id=vf)
    mapped = etl_map(virtual_file_id=vf, after=[checked.validated])
    etl_delete_rows(virtual_file_id=mapped, after=[etl_join().virtual_file_id])


def test_transform_ops_run_in_a_job(resources, files, store):
    pf = files.add_bytes(b"city,n\nParis,1\nRome,x\nParis,3\n", "cities.csv").to_json()
    right = store.create_from_rows([{"city": "PARIS", "country": "FR"}])
    result = transforms.execute_in_process(resources=resources, run_config={"ops": {
        "etl_push": {"config": {"platformFile": pf}},
        "etl_validate": {"config": {"schema": {"n": {"type": "integer"}}}},
        "etl_map": {"config": {"action": "upper(city)", "overwriteVirtualFile": True}},
        "etl_join": {"config": {"join": {"left": {"virtualFileId": right, "customId": "r", "key": "city"},
                                         "right": {"virtualFileId": right, "customId": "s", "key": "city"}}}},
        "etl_delete_rows": {"config": {"request": {"n": {"$in": ["1", "x"]}}}},
    }})
    assert result.success
    vf = result.output_for_node("etl_push", "virtual_file_id")
    validated = result.output_for_node("etl_validate", "validated")
    assert [r["n"] for r in store.rows(validated)] == ["1", "3"]
    assert result.output_for_node("etl_map", "virtual_file_id") == vf
    assert result.output_for_node("etl_delete_rows", "deleted_count") == 2
    assert store.rows(vf) == [{"city": "PARIS", "n": "3"}]
