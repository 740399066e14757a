"""The ETL actions as Dagster ops: wiring, outputs, metadata, failures, Iterate fan-out, the first job."""

from __future__ import annotations

import logging

import dagster as dg
import pytest

from connector_ops import ConnectorError, invoke
from connector_ops.environment import resources_for
from connector_ops.ops import (
    etl_append_rows,
    etl_batch_rows,
    etl_clean,
    etl_iterate,
    etl_iterate_batches,
    etl_pull,
    etl_push,
    etl_query,
)
from tests.servers import free_port


@dg.op
def count_rows(rows: list) -> int:
    return len(rows)


@dg.op
def total(counts: list) -> int:
    return sum(counts)


@dg.job
def wired():
    vf = etl_push()
    queried = etl_query(virtual_file_id=vf)
    appended = etl_append_rows(after=[queried])
    etl_iterate(virtual_file_id=vf, after=[appended])
    exported = etl_pull(virtual_file_id=vf, after=[appended])
    counted = total(etl_iterate_batches(virtual_file_id=vf, after=[appended]).map(
        lambda batch: count_rows(etl_batch_rows(batch))).collect())
    etl_clean(virtual_file_id=vf, after=[exported, counted])


def test_op_shapes():
    assert etl_push.name == "etl_push" and set(etl_push.outs) == {"virtual_file_id"}
    assert set(etl_push.ins) == {"platform_file", "fields", "after"}
    assert set(etl_iterate.outs) == {"content", "has_next"}
    assert set(etl_iterate.ins) == {"virtual_file_id", "content", "fields", "after"}
    assert set(etl_append_rows.outs) == {"result"} and set(etl_clean.outs) == {"result"}
    assert set(etl_pull.outs) == {"platform_file"}
    assert set(etl_query.config_schema.config_type.fields) == {"virtualFileId", "query", "extractOnlyOneResult"}


def test_wired_job_runs_on_both_databases(resources, files):
    pf = files.add_bytes(b"city,n\nParis,1\nRome,2\nParis,3\n", "cities.csv").to_json()
    result = wired.execute_in_process(resources=resources, run_config={"ops": {
        "etl_push": {"config": {"platformFile": pf}},
        "etl_query": {"config": {"query": {"city": "Paris"}}},
        "etl_append_rows": {"config": {"rows": []}},
        "etl_iterate": {"config": {"maxBatchSize": 2}},
        "etl_pull": {"config": {"exportType": "json", "exportName": "cities.json"}},
        "etl_iterate_batches": {"config": {"maxBatchSize": 2}},
    }})
    assert result.success
    assert result.output_for_node("etl_query", "result") == [{"city": "Paris", "n": "1"}, {"city": "Paris", "n": "3"}]
    assert result.output_for_node("etl_iterate", "has_next") is True
    assert result.output_for_node("etl_iterate", "content") == [{"city": "Paris", "n": "1"}, {"city": "Rome", "n": "2"}]
    assert result.output_for_node("total") == 3
    assert result.output_for_node("count_rows") == {"b00000": 2, "b00001": 1}
    pulled = result.output_for_node("etl_pull", "platform_file")
    assert files.read_bytes(pulled).startswith(b'[\n{"city":"Paris","n":"1"}')
    assert result.output_for_node("etl_clean", "result") is None

    push_meta = _output_metadata(result, "etl_push")
    assert push_meta["dagster/row_count"].value == 3
    assert [c.name for c in push_meta["dagster/column_schema"].schema.columns] == ["city", "n"]
    preview = push_meta["preview"].value
    assert [r.data for r in preview.records] == [{"city": "Paris", "n": "1"}, {"city": "Rome", "n": "2"},
                                                 {"city": "Paris", "n": "3"}]
    assert push_meta["bytes_in"].value == 30 and push_meta["duration_s"].value >= 0
    query_meta = _output_metadata(result, "etl_query")
    assert query_meta["count"].value == 2
    pull_meta = _output_metadata(result, "etl_pull")
    # the bytes are on this machine: a path; no file server runs in this test, so no link that leads nowhere
    assert pull_meta["path"].value == str(files.data_path(files.local_id(pulled)))
    assert pull_meta["size_bytes"].value == pulled["size"] and "link" not in pull_meta


def test_wired_input_overrides_config(resources, files):
    pf = files.add_bytes(b"a\n1\n", "a.csv").to_json()

    @dg.job
    def override():
        etl_query(virtual_file_id=etl_push())

    result = override.execute_in_process(resources=resources, run_config={"ops": {
        "etl_push": {"config": {"platformFile": pf}},
        "etl_query": {"config": {"virtualFileId": "ignored-because-wired", "query": {"a": "1"}}},
    }})
    assert result.output_for_node("etl_query", "result") == [{"a": "1"}]


def test_failure_carries_status_and_body(resources):
    @dg.job
    def failing():
        etl_iterate()

    result = failing.execute_in_process(resources=resources, raise_on_error=False,
                                        run_config={"ops": {"etl_iterate": {"config": {"content": "nope",
                                                                                       "maxBatchSize": 5}}}})
    assert not result.success
    (event,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    failure = event.step_failure_data.user_failure_data
    assert failure.description == "etl.iterate failed (404): not found"
    assert failure.metadata["status"].value == 404
    assert failure.metadata["body"].value == {"message": "not found"}


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_first_etl_job_runs_on_embedded_defaults(env):
    from connector_ops.pipelines.definitions import build_definitions

    # built here, not `connector_ops.pipelines.defs`: Definitions read the environment when built, and another test
    # may have built the module's `defs` for its own temporary home already
    result = build_definitions().resolve_job_def("first_etl").execute_in_process()
    assert result.success
    pulled = result.output_for_node("etl_pull", "platform_file")
    from connector_ops.environment import resources_for

    text = resources_for()["platform_files"].read_bytes(pulled).decode()
    lines = text.splitlines()
    assert lines[0].startswith("order_id,date,customer_id,region")
    assert len(lines) == 205  # the sample's 204 rows and the header
    north = result.output_for_node("etl_query", "result")
    assert north and all(row["region"] == "North" for row in north)
    assert len(north) == sum(",North," in line for line in lines)


def _output_metadata(result: dg.ExecuteInProcessResult, node: str) -> dict:
    events = [e for e in result.events_for_node(node) if e.event_type_value == "STEP_OUTPUT"]
    return events[0].step_output_data.metadata


def test_a_push_404_keeps_its_cause_beside_the_specs_body(env, monkeypatch):
    """Push's 404 body is the spec's fixed "not found"; why (which file, not stored on this host, the file
    server not answering) was dropped from the error too. It is the error's detail, the failure's ``detail``
    metadata and a line of the op's log."""
    url = f"http://127.0.0.1:{free_port()}"  # our file server, not running
    monkeypatch.setenv("CONNECTOR_OPS_FILE_SERVER_URL", url)
    missing = "0123456789abcdef" * 2
    pf = {"id": missing, "name": "gone.csv", "contentType": "text/csv", "link": f"{url}/files/{missing}"}
    cause = (f"platform file {missing!r} not found (not stored on this host, and the file server at {url} did "
             "not answer)")
    with pytest.raises(ConnectorError) as info:
        invoke("etl.push", {"platformFile": pf})
    assert (info.value.status, info.value.body, info.value.detail) == (404, {"message": "not found"}, cause)
    assert str(info.value) == "etl.push failed (404): not found"

    @dg.job
    def pushing():
        etl_push()

    instance = dg.DagsterInstance.ephemeral()
    result = pushing.execute_in_process(resources=resources_for(), raise_on_error=False, instance=instance,
                                        run_config={"ops": {"etl_push": {"config": {"platformFile": pf}}}})
    (event,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    failure = event.step_failure_data.user_failure_data
    assert failure.description == "etl.push failed (404): not found"
    assert failure.metadata["body"].value == {"message": "not found"} and failure.metadata["detail"].value == cause
    logged = [entry.user_message for entry in instance.all_logs(result.run_id) if entry.level >= logging.ERROR]
    assert f"etl.push failed (404): not found: {cause}" in logged
