"""Filters that silently select nothing (or everything) are answered with a warning (issue 15, item 4).

MongoDB's semantics stay (tested by the differential tests in test_etl_filters.py); these tests check that
the user hears about a column the file lacks and about numbers compared with stored text: through the
Python API (the ``connector_ops`` logger), the CLI (stderr), the magic (stderr) and a Dagster op (its log).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from connector_ops import invoke
from connector_ops.kernel.notices import warnings_to
from connector_ops.ops import etl_query
from connector_ops.resources.virtual_files.filters import filter_warnings

SALES = Path(__file__).resolve().parent.parent / "pipelines" / "data" / "sales.csv"
COLUMNS = ["order_id", "date", "customer_id", "region", "product", "quantity", "unit_price", "status"]
NUMBER_TAIL = ("but stored values are text, so this selects {} (MongoDB type bracketing); write the value as "
               "a string to compare text (in code-point order for $gt/$lt)")


def test_a_number_compared_with_text_is_named_with_its_path():
    assert filter_warnings({"quantity": {"$gt": 10}}, COLUMNS) == [
        "query.quantity.$gt: 10 is a number, " + NUMBER_TAIL.format("no row")]


def test_ne_and_nin_say_they_select_every_row():
    assert filter_warnings({"quantity": {"$ne": 0}}, COLUMNS, "request") == [
        "request.quantity.$ne: 0 is a number, " + NUMBER_TAIL.format("every row")]
    assert filter_warnings({"$or": [{"quantity": {"$nin": ["1", 2]}}]}, COLUMNS) == [
        "query.$or[0].quantity.$nin: 2 is a number, " + NUMBER_TAIL.format("every row")]


def test_implicit_equality_booleans_and_not_are_checked():
    assert filter_warnings({"quantity": 18, "status": {"$not": {"$eq": True}}}, COLUMNS) == [
        "query.quantity: 18 is a number, " + NUMBER_TAIL.format("no row"),
        "query.status.$not.$eq: True is a boolean, "
        + NUMBER_TAIL.format("no row, and, negated by the $not around it, every row"),
    ]


@pytest.mark.parametrize(("flt", "line"), [
    ({"count": {"$not": {"$eq": 0}}}, "query.count.$not.$eq: 0 is a number, " + NUMBER_TAIL.format(
        "no row, and, negated by the $not around it, every row")),
    ({"$nor": [{"count": 0}]}, "query.$nor[0].count: 0 is a number, " + NUMBER_TAIL.format(
        "no row, and, negated by the $nor around it, every row")),
    ({"count": {"$not": {"$in": [0]}}}, "query.count.$not.$in: 0 is a number, " + NUMBER_TAIL.format(
        "no row, and, negated by the $not around it, every row")),
    ({"count": {"$not": {"$ne": 0}}}, "query.count.$not.$ne: 0 is a number, " + NUMBER_TAIL.format(
        "every row, and, negated by the $not around it, no row")),
    ({"$nor": [{"count": {"$not": {"$eq": 0}}}]}, "query.$nor[0].count.$not.$eq: 0 is a number, "
     + NUMBER_TAIL.format("no row, and, negated twice by the $nor and $not around it, no row")),
    ({"$nor": [{"$nor": [{"count": {"$not": {"$nin": [0]}}}]}]}, "query.$nor[0].$nor[0].count.$not.$nin: 0 is a "
     "number, " + NUMBER_TAIL.format("every row, and, negated 3 times by the $nor, $nor and $not around it, no row")),
])
def test_a_negation_around_the_number_is_counted_in_what_it_selects(flt, line):
    """Under $not/$nor a clause that selects no row selects every row: "selects no row" alone, for a Delete
    Rows that deletes everything, was the dangerous reading."""
    assert filter_warnings(flt, ["count"]) == [line]


def test_an_unknown_column_under_nor_says_every_row(env, files):
    vf = invoke("etl.push", {"platformFile": files.add_file(SALES).to_json()})["virtualFileId"]
    heard: list[str] = []
    with warnings_to(heard.append):
        counted = invoke("etl.delete_rows", {"virtualFileId": vf, "request": {"$nor": [{"nope": 1}]}, "dryRun": True})
    assert counted == {"deletedCount": 204}
    assert heard[1] == "request.$nor[0].nope: 1 is a number, " + NUMBER_TAIL.format(
        "no row, and, negated by the $nor around it, every row")


def test_unknown_columns_are_listed_once_with_the_files_columns():
    assert filter_warnings({"count": "1", "$and": [{"count": {"$exists": True}}, {"Region": "North"}]},
                           COLUMNS) == [
        "query: no column 'count', 'Region' in this virtual file, so it is missing in every row (its columns: "
        "'order_id', 'date', 'customer_id', 'region', 'product', 'quantity', 'unit_price', 'status')"]


def test_a_filter_that_means_what_it_says_gets_no_warning():
    assert filter_warnings({"quantity": {"$gt": "10"}, "status": {"$in": ["paid", None]}}, COLUMNS) == []


def test_the_python_api_logs_them_and_query_and_delete_still_answer(env, files, caplog):
    vf = invoke("etl.push", {"platformFile": files.add_file(SALES).to_json()})["virtualFileId"]
    with caplog.at_level(logging.WARNING, logger="connector_ops"):
        assert invoke("etl.query", {"virtualFileId": vf, "query": {"quantity": {"$gt": 10}}}) == {"result": []}
    assert [r.getMessage() for r in caplog.records] == [
        "query.quantity.$gt: 10 is a number, " + NUMBER_TAIL.format("no row")]
    heard: list[str] = []
    with warnings_to(heard.append):
        counted = invoke("etl.delete_rows", {"virtualFileId": vf, "request": {"quantity": {"$ne": 0}},
                                             "dryRun": True})
    assert counted == {"deletedCount": 204}  # MongoDB's answer, kept: every row of the 204
    assert heard == ["request.quantity.$ne: 0 is a number, " + NUMBER_TAIL.format("every row")]


def test_the_cli_prints_them_on_stderr_and_the_output_stays_json(tmp_path: Path):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CONNECTOR_OPS_", "DAGSTER_HOME"))}
    env = {**clean, "CONNECTOR_OPS_HOME": str(tmp_path / "home")}
    script = str(Path(sys.executable).parent / "connector-ops")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([script, *args], capture_output=True, text=True, timeout=300, env=env)

    pf = json.loads(run("files", "add", str(SALES)).stdout)
    vf = json.loads(run("invoke", "etl.push", json.dumps({"platformFile": pf})).stdout)["virtualFileId"]
    done = run("invoke", "etl.query", json.dumps({"virtualFileId": vf, "query": {"count": {"$gt": 1000}}}))
    assert done.returncode == 0 and json.loads(done.stdout) == {"result": []}
    lines = done.stderr.strip().splitlines()
    assert lines == [
        "connector-ops: warning: query: no column 'count' in this virtual file, so it is missing in every row "
        "(its columns: 'order_id', 'date', 'customer_id', 'region', 'product', 'quantity', 'unit_price', "
        "'status')",
        "connector-ops: warning: query.count.$gt: 1000 is a number, " + NUMBER_TAIL.format("no row"),
    ]


def test_pipeline_run_prints_them_on_stderr_without_verbose(tmp_path: Path, env: dict[str, str],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A step's warning is what a user running a pipeline must see: one line each, no ``-v`` needed."""
    from connector_ops.cli import main

    (tmp_path / "pipe.yaml").write_text(f"""
name: warned
steps:
  - id: load
    action: etl.push
    input: {{platformFile: "${{file:{SALES}}}"}}
  - id: drop
    action: etl.delete_rows
    input: {{virtualFileId: "${{load.virtualFileId}}", request: {{count: {{$ne: "1"}}}}}}
""")
    assert main(["pipeline", "run", str(tmp_path / "pipe.yaml")]) == 0
    printed = capsys.readouterr()
    assert "\"deletedCount\": 204" in printed.out  # every row: what the warnings say
    assert [line for line in printed.err.splitlines() if "warning" in line] == [
        "connector-ops: warning: drop: request: no column 'count' in this virtual file, so it is missing in every "
        "row (its columns: 'order_id', 'date', 'customer_id', 'region', 'product', 'quantity', 'unit_price', "
        "'status')",
    ]


def test_an_op_writes_them_to_its_log(resources: dict[str, Any], files):
    vf = invoke("etl.push", {"platformFile": files.add_file(SALES).to_json()}, resources)["virtualFileId"]

    @dg.job
    def query_job():
        etl_query()

    instance = dg.DagsterInstance.ephemeral()
    result = query_job.execute_in_process(resources=resources, instance=instance, run_config={"ops": {
        "etl_query": {"config": {"virtualFileId": vf, "query": {"quantity": 18}}}}})
    assert result.success and result.output_for_node("etl_query", "result") == []
    warnings = [e.user_message for e in instance.all_logs(result.run_id) if e.level == logging.WARNING]
    assert warnings == ["query.quantity: 18 is a number, " + NUMBER_TAIL.format("no row")]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_magic_prints_them_below_the_cell(env, files, capsys):
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    ip.run_line_magic("load_ext", "connector_ops")
    vf = invoke("etl.push", {"platformFile": files.add_file(SALES).to_json()})["virtualFileId"]
    ip.run_line_magic("etl", f'query {{"virtualFileId": "{vf}", "query": {{"quantity": {{"$lt": 5}}}}}}')
    assert "warning: query.quantity.$lt: 5 is a number, " + NUMBER_TAIL.format("no row") in capsys.readouterr().err
