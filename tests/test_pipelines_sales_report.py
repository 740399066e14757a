"""The demo job ``sales_report`` end to end: in process and under the multiprocess executor with a
persistent Dagster instance, on SQLite and on PostgreSQL; its outputs are checked where they landed."""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import dagster as dg

from connector_ops.environment import resources_for

ROOT = Path(__file__).resolve().parents[1]
# pipelines/data/sales.csv: 204 orders, 35 of them with status "test", 4 refused by the schema
SALES_ROWS, TEST_ROWS, INVALID_ROWS = 204, 35, 4
#: the multiprocess executor with forked (not spawned) step processes: same isolation, far less start-up
#: cost per step (docs/pipelines.md, "Executors"); spawn works too but costs seconds per step
FORKSERVER = {"execution": {"config": {"multiprocess": {
    "start_method": {"forkserver": {"preload_modules": ["connector_ops.pipelines.definitions"]}}}}}}


def sales_report_job() -> dg.JobDefinition:
    """Module level, so the multiprocess executor's step processes can rebuild the job (reconstructable)."""
    from connector_ops.pipelines.definitions import build_definitions

    return build_definitions().get_job_def("sales_report")


def _csv_rows(data: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(data.decode("utf-8"))))


def check_outputs(output: Any, resources: dict[str, Any]) -> None:
    """What a newcomer should find after a run: the report, its drive copy and link, the mail."""
    files = resources["platform_files"]
    report = output("report", "platform_file")
    rows = _csv_rows(files.read_bytes(report))
    assert len(rows) == SALES_ROWS - TEST_ROWS - INVALID_ROWS
    assert not any(row["status"] == "test" for row in rows)  # deleted
    assert {row["region"] for row in rows} <= {"NORTH", "SOUTH", "EAST", "WEST"}  # mapped clean-up
    assert all(row["email"] == row["email"].lower() and row["customer"] for row in rows)  # joined
    assert list(rows[0]) == ["order_id", "date", "region", "customer", "email", "segment", "product",
                             "quantity", "unit_price", "status"]
    north = output("north", "result")
    assert north and {row["region"] for row in north} == {"North"}
    rejected = _csv_rows(files.read_bytes(output("rejects", "platform_file")))
    assert [json.loads(r["content"])["order_id"] for r in rejected] == ["SO-1201", "SO-1202", "SO-1203", "S12"]
    errors = " | ".join(r["error"] for r in rejected)
    for fragment in ("quantity", "customer_id", "unit_price", "order_id"):
        assert fragment in errors

    link = output("share", "shared_link")
    assert link.startswith("file://")
    assert Path(link.removeprefix("file://")).read_bytes() == files.read_bytes(report)

    outbox = Path(resources["mail"].outbox_dir)
    (message_file,) = sorted(outbox.glob("*.json"))
    message = json.loads(message_file.read_text())["Messages"][0]
    assert message["To"] == [{"Email": "sales-team@example.com", "Name": "Sales team"}]
    assert message["Variables"]["reportLink"] == link
    assert len(message["Variables"]["northOrders"]) == len(north)
    names = [a["Filename"] for a in message["Attachments"]]
    assert names == ["sales_report.csv", "rejected_sales.csv"]
    attached = base64.b64decode(message["Attachments"][0]["Base64Content"])
    assert attached == files.read_bytes(report)


def test_sales_report_in_process(env: dict[str, str]) -> None:
    """Run twice on one instance: the drive folders are reused (ifExists: reuse), not doubled, and each
    run materialises the demo's assets."""
    from connector_ops.pipelines.definitions import build_definitions
    from connector_ops.session import invoke

    resources = resources_for(environ=env)
    job = build_definitions().get_job_def("sales_report")
    instance = dg.DagsterInstance.ephemeral()
    result = job.execute_in_process(resources=resources, instance=instance)
    assert result.success
    check_outputs(result.output_for_node, resources)
    again = job.execute_in_process(resources=resources, instance=instance)
    assert again.success
    assert again.output_for_node("inbox", "folder_id") == result.output_for_node("inbox", "folder_id")
    root = invoke("drive.list", {}, resources)["content"]
    assert sorted(i["name"] for i in root if i["type"] == "folder") == ["sales-inbox", "sales-reports"]
    for key in (["sales", "orders"], ["sales", "customers"], ["sales", "valid_orders"], ["sales", "report_csv"]):
        records = instance.fetch_materializations(dg.AssetKey(key), limit=10).records
        assert len(records) == 2
    # the check on sales/orders ran in each run: 4 orders refused (under 5%: a pass), the same as Validate's
    [check] = [e.event_specific_data for e in again.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert check.asset_key == dg.AssetKey(["sales", "orders"]) and check.passed
    assert check.metadata["rejected_count"].value == INVALID_ROWS
    sample = [json.loads(r.data["content"])["order_id"] for r in check.metadata["rejected_sample"].value.records]
    assert sample == ["SO-1201", "SO-1202", "SO-1203", "S12"]


#: the outputs check_outputs reads, as (node, output)
CHECKED = [("report", "platform_file"), ("north", "result"), ("rejects", "platform_file"), ("share", "shared_link")]


def multiprocess_main() -> None:
    """Child-process entry point: one multiprocess run on the persistent instance of ``$DAGSTER_HOME``.

    It runs in a fresh interpreter because a forkserver is started once per process and keeps the
    environment of that moment; each test's run must see its own database and home."""
    job = dg.reconstructable(sales_report_job)
    with dg.DagsterInstance.get() as instance, dg.execute_job(job, instance=instance, run_config=FORKSERVER) as result:
        events = result.all_events
        report = {
            "success": result.success,
            "run_id": result.run_id,
            "pids": sorted({e.pid for e in events if e.event_type_value == "STEP_START"}),
            "messages": [str(e.message) for e in events],
            "outputs": [[n, o, result.output_for_node(n, o)] for n, o in CHECKED] if result.success else [],
        }
    print("RESULT " + json.dumps(report))


def test_sales_report_multiprocess_with_persistent_instance(env: dict[str, str], tmp_path: Path) -> None:
    """Default (multiprocess) executor: every step in its own process; parallel steps write the same
    virtual-file database (SQLite: WAL + BEGIN IMMEDIATE + busy timeout serialise them)."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", "from tests.test_pipelines_sales_report import multiprocess_main; multiprocess_main()"],
        cwd=ROOT, env={**os.environ, "DAGSTER_HOME": str(home)}, capture_output=True, text=True, timeout=600,
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-3000:]
    report = json.loads(line.removeprefix("RESULT "))
    assert report["success"], [m for m in report["messages"] if "fail" in m.lower()]
    assert len(report["pids"]) > 1  # really in several processes
    assert not any("database is locked" in m for m in report["messages"])
    outputs = {(n, o): v for n, o, v in report["outputs"]}
    check_outputs(lambda node, out: outputs[(node, out)], resources_for(environ=env))
    with dg.DagsterInstance.from_config(str(home)) as instance:  # persisted
        run = instance.get_run_by_id(report["run_id"])
        assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS
        assert instance.all_logs(report["run_id"])  # the event log is in the instance's SQLite storage
    print(f"multiprocess sales_report: {time.monotonic() - started:.1f}s")
