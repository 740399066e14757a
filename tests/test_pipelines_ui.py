"""The UI path: a real dagster-webserver on a loopback port serves ``-m connector_ops.pipelines``; through its GraphQL
API (what the UI itself calls) we list the jobs, launch ``sales_report`` and wait for it to succeed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.deployment import graphql
from tests.servers import free_port
from tests.test_pipelines_sales_report import FORKSERVER, ROOT

JOBS = """{ repositoriesOrError { ... on RepositoryConnection { nodes {
  name location { name } jobs { name } schedules { name } sensors { name } } } } }"""
LAUNCH = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  ... on RunConfigValidationInvalid { errors { message } } } }"""
STATUS = """query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"""
ASSETS = """{ assetNodes { assetKey { path } dependencyKeys { path } groupName jobNames } }"""
MATERIALIZED = """query($key: AssetKeyInput!) { assetOrError(assetKey: $key) { ... on Asset {
  assetMaterializations(limit: 1) { runId metadataEntries { label
    ... on IntMetadataEntry { intValue } ... on TextMetadataEntry { text } ... on PathMetadataEntry { path }
    ... on TableSchemaMetadataEntry { schema { columns { name } } } } } } } }"""
VALID = """query($selector: PipelineSelector!, $config: RunConfigData) {
  isPipelineConfigValid(pipeline: $selector, mode: "default", runConfigData: $config) {
    __typename ... on RunConfigValidationInvalid { errors { message } } } }"""
DONE = {"SUCCESS", "FAILURE", "CANCELED"}


@pytest.fixture
def webserver(env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    """``dagster-webserver -m connector_ops.pipelines`` with a persistent instance that launches runs directly."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(
        "run_coordinator:\n  module: dagster._core.run_coordinator\n  class: DefaultRunCoordinator\n"
        "telemetry:\n  enabled: false\n"
    )
    port = free_port()
    log = (tmp_path / "webserver.log").open("w")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "dagster-webserver"), "-m", "pipelines", "-h", "127.0.0.1", "-p", str(port)],
        cwd=ROOT, env={**os.environ, "DAGSTER_HOME": str(home)}, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the code server it starts is stopped with it
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/server_info", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, (tmp_path / "webserver.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "dagster-webserver did not start"
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover - only if the server hangs
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()
    assert proc.returncode is not None


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_launch_sales_report_through_the_webserver(webserver: str, env: dict[str, str]) -> None:
    from connector_ops.environment import resources_for

    (repo,) = graphql(webserver, JOBS)["repositoriesOrError"]["nodes"]
    jobs = {j["name"] for j in repo["jobs"]}
    assert {"sales_report", "retail_customers", "drive_inbox", "first_etl"} <= jobs
    assert "sales_report_schedule" in {s["name"] for s in repo["schedules"]}
    assert "drive_inbox_on_new_file" in {s["name"] for s in repo["sensors"]}

    selector = {"repositoryLocationName": repo["location"]["name"], "repositoryName": repo["name"],
                "jobName": "sales_report"}
    # the launchpad flags a step's required field left out, before any run (the job's defaults fill it)
    dropped = {**FORKSERVER, "ops": {"report": {"config": {"exportType": "csv"}}}}
    pipeline = {**{k: v for k, v in selector.items() if k != "jobName"}, "pipelineName": "sales_report"}
    checked = graphql(webserver, VALID, {"selector": pipeline, "config": dropped})["isPipelineConfigValid"]
    assert checked["__typename"] == "RunConfigValidationInvalid", checked
    assert any('"exportName"' in e["message"] and "report" in e["message"] for e in checked["errors"]), checked
    # and a choice field's typo (an enum: the launchpad's dropdown), before the steps ahead of it run
    typo = {**FORKSERVER, "ops": {"report": {"config": {"exportType": "xml", "exportName": "r.xml"}}}}
    checked = graphql(webserver, VALID, {"selector": pipeline, "config": typo})["isPipelineConfigValid"]
    assert checked["__typename"] == "RunConfigValidationInvalid", checked
    assert [e["message"] for e in checked["errors"]] == [
        "Value at path root:ops:report:config:exportType not in enum type json|csv|parquet got xml"], checked
    ok = graphql(webserver, VALID, {"selector": pipeline, "config": FORKSERVER})["isPipelineConfigValid"]
    assert ok["__typename"] == "PipelineConfigValidationValid", ok
    launched = graphql(webserver, LAUNCH, {"params": {"selector": selector, "runConfigData": FORKSERVER}})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]
    deadline = time.monotonic() + 300
    status = None
    while time.monotonic() < deadline:
        status = graphql(webserver, STATUS, {"id": run_id})["runOrError"]["status"]
        if status in DONE:
            break
        time.sleep(1)
    assert status == "SUCCESS"

    # the asset graph the UI draws: the demo's assets, lineage through steps that are not assets
    nodes = {"/".join(n["assetKey"]["path"]): n for n in graphql(webserver, ASSETS)["assetNodes"]}
    deps = {key: {"/".join(d["path"]) for d in n["dependencyKeys"]} for key, n in nodes.items()
            if key.startswith("sales/")}
    assert deps == {"sales/orders": set(), "sales/customers": set(), "sales/valid_orders": {"sales/orders"},
                    "sales/report_csv": {"sales/valid_orders", "sales/customers"}}
    assert {nodes[k]["groupName"] for k in deps} == {"sales_report"}
    # each materialised by the run, with Dagster's standard metadata
    found = graphql(webserver, MATERIALIZED, {"key": {"path": ["sales", "orders"]}})["assetOrError"]
    (materialization,) = found["assetMaterializations"]
    entries = {e["label"]: e for e in materialization["metadataEntries"]}
    assert materialization["runId"] == run_id and entries["dagster/row_count"]["intValue"] == 204
    assert "order_id" in {c["name"] for c in entries["dagster/column_schema"]["schema"]["columns"]}
    report = graphql(webserver, MATERIALIZED, {"key": {"path": ["sales", "report_csv"]}})["assetOrError"]
    (materialization,) = report["assetMaterializations"]
    assert Path({e["label"]: e for e in materialization["metadataEntries"]}["path"]["path"]).is_file()

    resources = resources_for(environ=env)
    outbox = Path(resources["mail"].outbox_dir)
    (message_file,) = outbox.glob("*.json")  # the run, launched through the UI's API, sent the report
    message = json.loads(message_file.read_text())["Messages"][0]
    assert [a["Filename"] for a in message["Attachments"]] == ["sales_report.csv", "rejected_sales.csv"]
