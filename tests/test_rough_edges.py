"""What a new user tripped on (issue 15, item 4): messages that say what is wrong and what to do.

Run through the installed ``connector-ops`` script where the user met them, and through ``invoke`` for
Delete Rows' ``dryRun`` extension (on SQLite and PostgreSQL).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from connector_ops import ConnectorError, invoke

SCRIPT = str(Path(sys.executable).parent / "connector-ops")
SALES = Path(__file__).resolve().parent.parent / "pipelines" / "data" / "sales.csv"


def cli(*args: str, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CONNECTOR_OPS_", "DAGSTER_HOME"))}
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=300,
                          env={**clean, "CONNECTOR_OPS_HOME": str(home), **env})


def test_pipeline_run_lists_every_failed_and_skipped_step(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text("""name: two_fail
steps:
  - {id: a, action: etl.iterate, input: {content: nope1, maxBatchSize: 3}}
  - {id: b, action: etl.iterate, input: {content: nope2, maxBatchSize: 3}}
  - {id: c, action: etl.query, input: {virtualFileId: "${a.content.0.x}", query: {}}}
  - {id: d, action: etl.query, input: {virtualFileId: "${b.content.0.x}", query: {}}}
  - {id: e, action: etl.push, after: [a], input: {platformFile: "${file:SALES}"}}
""".replace("SALES", str(SALES)))
    run = cli("pipeline", "run", str(path), home=tmp_path / "home")
    assert run.returncode == 1  # documented: 1 when a step failed
    assert "step a failed: etl.iterate failed (404): not found" in run.stderr
    assert "step b failed: etl.iterate failed (404): not found" in run.stderr
    # e's resolver (e__input: it reads the file, needs nothing of a) succeeds; e itself never runs
    assert "not run because of the failure: c, d, e" in run.stderr


def test_validate_says_what_is_wrong_with_a_name(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad-one\nsteps:\n  - {id: a, action: etl.clean, input: {virtualFileId: x}}\n")
    run = cli("pipeline", "validate", str(path), home=tmp_path / "home")
    assert run.returncode == 1
    assert "`name` 'bad-one' is not a valid job name: it contains '-'" in run.stdout
    assert "e.g. 'bad_one'" in run.stdout and "is required" not in run.stdout


@pytest.mark.parametrize(("url", "problem"), [
    ("data/x.db", "is not a database URL (a path needs sqlite:///)"),
    ("mysql://bob:s3cret@db.example/sales", "names the database driver 'mysql', which is not supported"),
])
def test_a_bad_database_url_names_the_variable_and_the_schemes(tmp_path: Path, url: str, problem: str) -> None:
    run = cli("invoke", "etl.query", '{"virtualFileId": "x", "query": {}}', home=tmp_path / "home",
              CONNECTOR_OPS_DATABASE_URL=url)
    assert run.returncode == 2  # a configuration error, from every command (the body keeps invoke's 500)
    message = json.loads(run.stdout)["message"]
    assert message == (f"configuration error: CONNECTOR_OPS_DATABASE_URL: {problem}; use sqlite:///PATH or "
                       "postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE")
    assert "s3cret" not in run.stdout + run.stderr


def test_a_path_where_a_platform_file_belongs_says_what_one_is(tmp_path: Path) -> None:
    run = cli("invoke", "etl.push", json.dumps({"platformFile": str(SALES)}), home=tmp_path / "home")
    assert run.returncode == 2
    message = json.loads(run.stdout)["message"]
    assert message.startswith("platformFile: must be a platform file — the descriptor {name, contentType, link,")
    assert "`connector-ops files add PATH`" in message and "PushFile" not in message
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(f"name: p\nsteps:\n  - {{id: a, action: etl.push, input: {{platformFile: {SALES}}}}}\n")
    run = cli("pipeline", "validate", str(pipeline), home=tmp_path / "home")
    assert "connector-ops files add PATH" in run.stdout and "PushFile" not in run.stdout


def test_clean_of_an_unknown_id_keeps_the_null_body_and_says_not_found(tmp_path: Path) -> None:
    run = cli("invoke", "etl.clean", '{"virtualFileId": "no-such-file"}', home=tmp_path / "home")
    assert run.returncode == 1 and run.stdout.strip() == "null"  # the spec's body
    assert run.stderr.strip() == "connector-ops: etl.clean failed (500): virtual file 'no-such-file' not found"


def test_delete_rows_dry_run_counts_and_deletes_nothing(env: dict[str, str], files: Any) -> None:
    vf = invoke("etl.push", {"platformFile": files.add_file(SALES).to_json()})["virtualFileId"]
    request = {"virtualFileId": vf, "request": {"status": "test"}}
    assert invoke("etl.delete_rows", {**request, "dryRun": True}) == {"deletedCount": 35}
    assert invoke("etl.delete_rows", {**request, "dryRun": True}) == {"deletedCount": 35}  # nothing deleted
    assert invoke("etl.delete_rows", request) == {"deletedCount": 35}
    assert invoke("etl.delete_rows", {**request, "dryRun": True}) == {"deletedCount": 0}


def test_a_link_that_cannot_be_reached_names_its_host(tmp_path: Path) -> None:
    from tests.servers import free_port

    port = free_port()  # nothing listens there; loopback opened on purpose, as a user's internal host would be
    link = f"http://127.0.0.1:{port}/exports/sales.csv?sig=abc"
    payload = {"platformFile": {"id": "x", "name": "sales.csv", "contentType": "text/csv", "link": link}}
    run = cli("invoke", "etl.push", json.dumps(payload), home=tmp_path / "home",
              CONNECTOR_OPS_ALLOWED_PRIVATE_HOSTS="127.0.0.1")
    message = json.loads(run.stdout)["message"]
    assert f"cannot reach 127.0.0.1:{port} (ConnectError" in message, message


def test_validate_checks_literal_filters_and_rules_before_the_run(tmp_path: Path) -> None:
    """`pipeline validate` runs the actions' own parsers on literal filters and Validate schemas (docs promise
    "wrong literal values"); parts holding references wait for the run."""
    path = tmp_path / "lit.yaml"
    path.write_text("""name: lit
steps:
  - {id: load, action: etl.push, input: {platformFile: {id: x, name: a.csv, contentType: text/csv, link: "http://127.0.0.1:1/a"}}}
  - {id: q, action: etl.query, input: {virtualFileId: "${load.virtualFileId}", query: {name: {$regex: "a(b"}}}}
  - {id: d, action: etl.delete_rows, input: {virtualFileId: "${load.virtualFileId}", request: {$where: "1"}}}
  - {id: v, action: etl.validate, input: {content: "${load.virtualFileId}", schema: {age: {type: number}}}}
  - {id: later, action: etl.query, input: {virtualFileId: "${load.virtualFileId}", query: "${env.FILTER}"}}
""")
    run = cli("pipeline", "validate", str(path), home=tmp_path / "home", FILTER="{}")
    assert run.returncode == 1
    out = run.stdout
    assert "step q: query.name.$regex: invalid regular expression: missing ), unterminated subpattern" in out, out
    assert "step d: request.$where: operator $where is not supported at the top level" in out, out
    assert 'step v: schema.age.type: unknown type "number" (types: string, integer, float, boolean)' in out, out
    assert "step later" not in out and "step load" not in out


def test_a_drivers_own_error_is_worded_as_a_database_error() -> None:
    """The column-wise loads meet the drivers without SQLAlchemy around them: a full disk during a Push
    read ``OperationalError: database or disk is full``, and during Append Rows ``database error: …``."""
    import sqlite3

    import psycopg

    from connector_ops.registry import describe_unexpected

    assert describe_unexpected(sqlite3.OperationalError("database or disk is full")) == \
        "database error: database or disk is full"
    assert describe_unexpected(psycopg.errors.DiskFull("could not extend file\nHINT: free space")) == \
        "database error: could not extend file"
    assert describe_unexpected(ValueError("x")) == "ValueError: x"


def test_a_payload_wrong_in_every_item_names_ten_problems_and_counts_the_rest() -> None:
    """An Append of 100 rows given in the wrong shape (columns where ``content`` belongs) was one message of
    400 problems; a 100,000-row one was megabytes of error text in a notebook cell or a Dagster event."""
    rows = [{"a": str(i)} for i in range(100)]
    with pytest.raises(ConnectorError) as caught:
        invoke("etl.append_rows", {"rows": rows}, resources={})
    message = caught.value.body["message"]
    assert message.startswith("rows[0].virtualFileId: is required; rows[0].content: is required; "
                              "rows[0].a: is not a known field; rows[1].virtualFileId: is required;")
    assert message.count(";") == 10 and message.endswith("; and 290 more problems")
    with pytest.raises(ConnectorError) as caught:  # one problem too many reads in the singular
        invoke("etl.append_rows", {"rows": [{"virtualFileId": "f", "content": {}, "x": 1}] * 11}, resources={})
    assert caught.value.body["message"].endswith("rows[9].x: is not a known field; and 1 more problem")
