"""The ``%etl``/``%drive``/``%mail`` magics in a real IPython shell, on SQLite and PostgreSQL.

Every magic call here runs the registered action with real resources on a temporary home; results are
compared with :func:`connector_ops.invoke`, the Python API over the same action code.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from IPython.core.interactiveshell import InteractiveShell

from connector_ops import ConnectorError, invoke
from connector_ops.display import ActionOutput
from connector_ops.magic import NotebookError
from tests.magic.conftest import SALES, html_of, make_shell


def test_extension_registers_every_magic(ip: Any) -> None:
    line = ip.magics_manager.magics["line"]
    cell = ip.magics_manager.magics["cell"]
    assert {"etl", "drive", "mail", "connectors", "pipeline"} <= set(line)
    assert {"etl", "drive", "mail"} <= set(cell)


def test_etl_line_magic_equals_invoke(ip: Any, sales: dict[str, Any]) -> None:
    out = ip.run_line_magic("etl", 'push {"platformFile": {{sales}}}')
    assert isinstance(out, ActionOutput) and set(out) == {"virtualFileId"}
    ip.user_ns["vf"] = out["virtualFileId"]
    rows = ip.run_line_magic("etl", 'query -o north {"virtualFileId": "{{vf}}", "query": {"region": "North"}}')
    expected = invoke("etl.query", {"virtualFileId": out["virtualFileId"], "query": {"region": "North"}})
    assert rows == expected and ip.user_ns["north"] == expected
    assert json.loads(json.dumps(rows)) == expected  # serialises as the plain output
    html = html_of(ip, rows)
    assert "<table" in html and "SO-1001" in html and f"{len(expected['result'])} item(s)" in html


def test_cell_magic_takes_yaml_or_json_and_var_inside_and_outside_strings(ip: Any, sales: dict[str, Any]) -> None:
    ip.run_cell("%etl push -o pushed {platformFile: {{sales}}, parameters: {csvDelimiter: ','}}")
    ip.user_ns["size"] = 2
    ip.run_cell_magic("etl", "iterate -o batch", "content: '{{pushed.virtualFileId}}'\nmaxBatchSize: {{size}}\n")
    batch = ip.user_ns["batch"]
    assert batch["hasNext"] is True and [r["order_id"] for r in batch["content"]] == ["SO-1001", "SO-1002"]
    ip.run_cell_magic("etl", "iterate -o arr", '{"content": {{batch.content}}, "maxBatchSize": 5}')
    assert ip.user_ns["arr"] == {"content": batch["content"], "hasNext": False}


def test_a_yaml_date_stays_the_text_it_was_written_as(ip: Any) -> None:
    """YAML makes ``2024-01-01`` a date, no JSON value: a 500 where an action stored it, before."""
    assert ip.run_line_magic("etl", "iterate {content: [{day: 2024-01-01}], maxBatchSize: 5}") == {
        "content": [{"day": "2024-01-01"}], "hasNext": False}


def test_a_yaml_time_of_day_stays_the_text_it_was_written_as(ip: Any) -> None:
    """YAML 1.1 reads ``17:45`` as the base-60 integer 1065 (``09:30``, with its leading zero, as text): a
    Validate of opening hours refused some rows as "not a string"."""
    cell = ("content: [{opens: 09:30, closes: 17:45, lunch: 12:00:00, cutoff: 23:59.5, took: 190:20:30}]\n"
            "schema: {closes: {type: string, required: true}, lunch: {type: string}}\n")
    row = {"opens": "09:30", "closes": "17:45", "lunch": "12:00:00", "cutoff": "23:59.5", "took": "190:20:30"}
    assert ip.run_cell_magic("etl", "validate", cell) == {"validated": [row], "rejected": []}


def test_append_query_delete_clean(ip: Any, sales: dict[str, Any]) -> None:
    vf = ip.run_line_magic("etl", 'push {"platformFile": {{sales}}}')["virtualFileId"]
    ip.user_ns.update(vf=vf, row={"order_id": "SO-9999", "region": "Mars"})
    assert ip.run_line_magic("etl", 'append_rows {"rows": [{"virtualFileId": "{{vf}}", "content": {{row}}}]}') == "ok"
    found = ip.run_line_magic("etl", 'query {virtualFileId: "{{vf}}", query: {region: Mars}, '
                                     'extractOnlyOneResult: true}')
    assert found["result"][0]["order_id"] == "SO-9999"
    assert ip.run_line_magic("etl", 'delete_rows {"virtualFileId": "{{vf}}", "request": {"region": "Mars"}}') == {
        "deletedCount": 1}
    assert ip.run_line_magic("etl", 'clean {"virtualFileId": "{{vf}}"}') is None
    with pytest.raises(NotebookError, match=r"^etl.iterate failed \(404\): not found$"):
        ip.run_line_magic("etl", 'iterate {"content": "{{vf}}", "maxBatchSize": 1}')


def test_pull_shows_the_file_with_a_preview(ip: Any, sales: dict[str, Any]) -> None:
    vf = ip.run_line_magic("etl", 'push {"platformFile": {{sales}}}')["virtualFileId"]
    ip.user_ns["vf"] = vf
    out = ip.run_line_magic("etl", 'pull {"virtualFileId": "{{vf}}", "exportType": "csv", "exportName": "s.csv"}')
    pf = out["platformFile"]
    assert pf["name"] == "s.csv" and pf["contentType"] == "text/csv" and pf["size"] == SALES.stat().st_size
    html = html_of(ip, out)
    assert f'href="{pf["link"]}"' in html and "10.8 kB" in html and "first rows of the file" in html
    assert "SO-1020" in html and "SO-1021" not in html  # the preview stops at 20 rows
    text = ip.display_formatter.format(out)[0]["text/plain"]
    assert text.startswith("platformFile: s.csv (10.8 kB, text/csv) http://")


@pytest.mark.parametrize(("parameters", "name"), [
    ({"csvDelimiter": ";"}, "r.csv"), ({"csvDelimiter": "tab"}, "r.csv"), ({}, "r.tsv"),
    ({"encoding": "utf-16", "csvDelimiter": "|"}, "r.csv"),
    ({}, "r.json"), ({}, "R.JSON"), ({}, "r.ndjson"), ({}, "r.jsonl"), ({"encoding": "utf-16"}, "r.ndjson"),
], ids=["semicolon", "tab", "tsv-name", "utf-16", "json", "json-upper", "ndjson", "jsonl", "ndjson-utf-16"])
def test_a_pull_preview_reads_the_file_with_the_pulls_parameters(ip: Any, env: dict[str, str], tmp_path: Path,
                                                                 parameters: dict[str, Any], name: str) -> None:
    """The preview read every export with pandas' defaults (``,``, UTF-8): a ``;`` export (what European
    Excel wants) was shown as one column whose name and cells held the semicolons. An NDJSON export's was
    always empty: it was read as one JSON array."""
    source = tmp_path / "eu.csv"
    source.write_text("name,city\nAnn,Paris\nBob,Lyon\n")
    ip.user_ns["pf"] = dict(ip.run_line_magic("connectors", f"add-file {source}"))
    ip.user_ns["vf"] = ip.run_line_magic("etl", 'push {"platformFile": {{pf}}}')["virtualFileId"]
    export_type = "json" if "json" in name.lower() else "csv"
    out = ip.run_line_magic("etl", f'pull {{"virtualFileId": "{{{{vf}}}}", "exportType": "{export_type}", '
                                   f'"exportName": "{name}", "parameters": {json.dumps(parameters)}}}')
    assert out.file_preview() == [{"name": "Ann", "city": "Paris"}, {"name": "Bob", "city": "Lyon"}]
    headless = ip.run_line_magic("etl", 'pull {"virtualFileId": "{{vf}}", "exportType": "csv", '
                                        '"exportName": "h.csv", "parameters": {"addFirstRowAsSchema": false}}')
    assert headless.file_preview() == [{0: "Ann", 1: "Paris"}, {0: "Bob", 1: "Lyon"}]


@pytest.mark.parametrize(("name", "content_type", "shown"), [
    ("csv_notes.txt", None, False), ("notes.txt", "text/csv-schema", False), ("notes.md", "text/x-csv-ish", False),
    ("my-csv", "application/octet-stream", False), ("rows.parquet", "text/csv", False),
    ("REPORT.CSV ", None, True), ("notes.txt", "text/csv; charset=utf-8", True), ("data.csv", "text/plain", True),
    ("report.tsv", None, True), ("data", "text/tab-separated-values", True), ("rows.json", None, True),
], ids=["csv-in-name", "csv-in-type", "x-csv-type", "csv-no-suffix", "parquet-named", "csv-upper", "csv-type",
        "csv-name", "tsv-name", "tsv-type", "json"])
def test_a_file_is_previewed_as_rows_only_when_it_says_csv_tsv_or_json(ip: Any, tmp_path: Path, name: str,
                                                                     content_type: str | None,
                                                                     shown: bool) -> None:
    """The preview took any name or content type holding the letters ``csv`` for a CSV: ``csv_notes.txt``
    or ``text/csv-schema`` was shown as a table of its lines. Now a file is one as Push tells formats: its
    type (``text/csv``, TSV's, parameters aside) or its ``.csv``/``.tsv`` name; JSON by Push's test."""
    source = tmp_path / "source"
    separator = "\t" if "tsv" in name or "tab" in (content_type or "") else ","
    source.write_text('[{"a": "1", "b": "2"}]' if name.endswith(".json") else f"a{separator}b\n1{separator}2\n")
    typed = f" --content-type '{content_type}'" if content_type else ""
    out = ip.run_line_magic("connectors", f"add-file {source} --name '{name}'{typed}")
    assert out.file_preview() == ([{"a": "1", "b": "2"}] if shown else None)


def test_dataframe_round_trip_and_no_leftover_files(ip: Any, env: dict[str, str]) -> None:
    frame = pd.DataFrame({"city": ["Paris", "Lyon", 'Saint-"Quoted"'], "note": ["a,b", "line\nbreak", None],
                          "n": [1, 2, 3]})
    ip.user_ns["frame"] = frame
    files_dir = Path(env["CONNECTOR_OPS_HOME"]) / "files"
    pushed = ip.run_line_magic("etl", "push --df frame")
    assert not files_dir.exists() or list(files_dir.iterdir()) == []  # no file in between (Arrow), none left
    ip.user_ns["vf"] = pushed["virtualFileId"]
    assert invoke("etl.query", {"virtualFileId": pushed["virtualFileId"], "query": {"city": "Lyon"}})["result"] == [
        {"city": "Lyon", "note": "line\nbreak", "n": "2"}]
    back = ip.run_line_magic("etl", 'pull --df back {"virtualFileId": "{{vf}}"}')
    assert not files_dir.exists() or list(files_dir.iterdir()) == []
    expected = frame.fillna("")  # CSV has no null: a missing value is an empty field (read back as NaN)
    pd.testing.assert_frame_equal(back.fillna(""), expected, check_dtype=False)
    assert back["n"].dtype.kind == "i"  # pandas infers the types as for any CSV
    assert ip.user_ns["back"] is back
    ip.run_cell('%etl pull --df -o as_json {"virtualFileId": "{{vf}}", "exportType": "json", "exportName": "x.json"}')
    assert ip.user_ns["as_json"].fillna("").to_dict(orient="records") == expected.to_dict(orient="records")


def test_dataframe_of_datetimes_in_several_offsets_keeps_each_offset(ip: Any) -> None:
    """An object column of datetimes parsed from an API's text (Paris in winter and summer): each was stored
    in the first one's offset."""
    api = ["2024-03-30T09:00:00+01:00", "2024-04-02T09:00:00+02:00", "2024-04-02T09:00:00-03:00"]
    ip.user_ns["frame"] = pd.DataFrame({"when": [dt.datetime.fromisoformat(t) for t in api]})
    pushed = ip.run_line_magic("etl", "push --df frame")
    batch = invoke("etl.iterate", {"content": pushed["virtualFileId"], "maxBatchSize": 5})
    assert [row["when"] for row in batch["content"]] == [
        "2024-03-30 09:00:00+01:00", "2024-04-02 09:00:00+02:00", "2024-04-02 09:00:00-03:00"]


def test_dataframe_with_named_index_keeps_it(ip: Any) -> None:
    ip.user_ns["frame"] = pd.DataFrame({"v": [1, 2]}, index=pd.Index(["a", "b"], name="key"))
    ip.run_cell("%etl push --df frame -o pushed")
    ip.run_cell('back = %etl pull --df {"virtualFileId": "{{pushed.virtualFileId}}"}')
    assert ip.user_ns["back"].to_dict(orient="records") == [{"key": "a", "v": 1}, {"key": "b", "v": 2}]


@pytest.mark.parametrize(
    ("line", "summary"),
    [
        ('push {"platformFile": {"name": "x.csv", "link": "http://127.0.0.1:8765/files/0123456789abcdef0123456789abcdef"}}',
         "etl.push failed (400): platformFile.contentType: is required"),
        ('push {"platformFile": {"name": "x.csv", "contentType": "text/csv", '
         '"link": "http://127.0.0.1:8765/files/0123456789abcdef0123456789abcdef"}}',
         "etl.push failed (404): not found"),
        ('query {"virtualFileId": "{{nope}}", "query": {}}', "etl.query failed (400): {{nope}}: 'nope' is undefined"),
        ('query {"virtualFileId": [1, }', "etl.query failed (400): input is not valid JSON or YAML"),
        ("frobnicate {}", "etl.frobnicate failed (400): unknown action 'frobnicate'; etl actions: append_rows"),
        ("query --bogus {}", "etl failed (400): unrecognized arguments: --bogus"),
        ("query --df {}", "etl.query failed (400): --df works with %etl push and %etl pull only"),
        ("push --df", "etl.push failed (400): --df needs the DataFrame's variable name"),
        ("push --df missing", "etl.push failed (400): --df: no variable named 'missing'"),
        ("push --df sales_text", "etl.push failed (400): --df: expected a DataFrame or table (a pandas or polars "
                                 "DataFrame"),
        ('iterate {"content": "x", "maxBatchSize": 0}', "etl.iterate failed (400): maxBatchSize: Input should be"),
        ('pull --df {"virtualFileId": "x", "parameters": {"schema": "a"}}',  # was a 500 with pydantic's report
         "etl.pull failed (400): parameters.schema: Input should be a valid list"),
        ('push --df sales {"parameters": "x"}', "etl.push failed (400): parameters: must be an object, got str"),
        ('push --df sales {"parameters": {"onRowError": "quarantine"}}',  # was ignored
         "etl.push failed (400): parameters.onRowError: does not apply to --df"),
        ('push --df sales {"parameters": {"bogus": 1}}', "etl.push failed (400): parameters.bogus: does not apply"),
        ('clean {"virtualFileId": "nope"}', "etl.clean failed (500): virtual file 'nope' not found"),
    ],
)
def test_errors_are_one_line(ip: Any, line: str, summary: str) -> None:
    ip.user_ns["sales_text"] = "not a frame"
    ip.user_ns["sales"] = pd.DataFrame({"a": ["1"]})
    with pytest.raises(ConnectorError) as caught:
        ip.run_line_magic("etl", line)
    assert caught.value.summary().startswith(summary)
    assert "\n" not in caught.value.summary()


def test_error_prints_one_line_and_fails_the_cell(env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    shell = make_shell(InteractiveShell)
    try:
        result = shell.run_cell('%etl iterate {"content": "missing-vf", "maxBatchSize": 1}')
    finally:
        shell.clear_instance()
    assert isinstance(result.error_in_exec, NotebookError)  # the kernel reports an error: "Run all" stops
    printed = capsys.readouterr()
    assert printed.out.strip() == "etl.iterate failed (404): not found"
    assert "Traceback" not in printed.out + printed.err


def test_a_trailing_semicolon_hides_the_output_and_keeps_it_in_the_variable(
        ip: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """IPython's ``;`` hides a cell's result; the magic receives it in its line (it was a 400 before)."""
    ip.run_cell('%etl iterate -o quiet {"content": [{"a": "1"}], "maxBatchSize": 5} ;', store_history=True)
    ip.run_cell("%%etl iterate -o quiet_cell;\ncontent: [{a: '1'}]\nmaxBatchSize: 5", store_history=True)
    ip.run_cell('%etl iterate -o shown {"content": [{"a": "1"}], "maxBatchSize": 5}', store_history=True)
    shown = capsys.readouterr().out
    assert ip.user_ns["quiet"] == ip.user_ns["quiet_cell"] == ip.user_ns["shown"] == {
        "content": [{"a": "1"}], "hasNext": False}
    assert shown.count("Out[") == 1 and "Out[3]" in shown  # only the cell without ``;`` displays
    # a ``;`` inside the input's text or a YAML comment is the input's, as it always was
    assert ip.run_line_magic("etl", "iterate {content: [{a: 'x;'}], maxBatchSize: 5} # done;") == {
        "content": [{"a": "x;"}], "hasNext": False}


def test_a_trailing_semicolon_hides_connectors_and_pipeline_results_too(ip: Any, tmp_path: Path) -> None:
    """``%connectors add-file … -o VAR;`` and ``%pipeline run … -o VAR;`` hide their result as ``%etl`` does:
    the ``;`` named the variable ``big;`` (and ``--name x.csv;`` the stored file) before."""
    path = tmp_path / "c.csv"
    path.write_text("a\n1\n")
    assert ip.run_line_magic("connectors", f"add-file {path} -o big;") is None
    assert ip.run_line_magic("connectors", f"add-file {path} -o named --name x.csv;") is None
    assert ip.user_ns["big"]["name"] == "c.csv" and ip.user_ns["named"]["name"] == "x.csv"
    assert not [name for name in ip.user_ns if name.endswith(";")]
    assert ip.run_line_magic("connectors", f"add-file {path} -o shown")["name"] == "c.csv"
    assert ip.run_line_magic("pipeline", "run first_etl -o run;") is None
    assert ip.user_ns["run"].success


@pytest.mark.parametrize("line", ["etl iterate -o my-var {content: [1], maxBatchSize: 1}",
                                  "etl pull --df my-df {virtualFileId: x}",
                                  "connectors add-file c.csv -o 'big;'", "connectors add-file c.csv -o class",
                                  "pipeline run first_etl -o 2run"])
def test_a_variable_name_that_is_no_python_identifier_is_a_400_naming_the_option(ip: Any, line: str) -> None:
    magic, _, rest = line.partition(" ")
    with pytest.raises(NotebookError) as caught:
        ip.run_line_magic(magic, rest)
    assert caught.value.status == 400
    assert "is not a Python variable name" in str(caught.value)
    assert ("argument --df" if "--df" in line else "argument -o/--out") in str(caught.value)


def test_help_shows_the_magics_help_or_the_actions(ip: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """``%etl --help`` / ``-h`` were refused as unrecognized arguments: they show what ``%etl?`` shows, and after
    an action its input fields (as ``connector-ops actions etl.query``)."""
    from connector_ops.action_docs import describe_text

    for line in ("--help", "-h"):
        assert ip.run_line_magic("etl", line) is None
        shown = capsys.readouterr().out
        assert "%etl [-h] [-o NAME]" in shown and "store the output in this variable" in shown
    assert ip.run_line_magic("etl", "query --help") is None
    shown = capsys.readouterr().out
    assert shown.startswith("usage: %etl query [-o NAME]") and describe_text("etl.query") in shown
    assert ip.run_line_magic("drive", "list -h") is None and "drive.list" in capsys.readouterr().out


def test_iterate_given_a_virtual_file_id_field_says_it_goes_in_content(ip: Any) -> None:
    """Iterate takes the id in ``content``: "virtualFileId: is not a known field" alone did not say so."""
    with pytest.raises(NotebookError) as caught:
        ip.run_line_magic("etl", 'iterate {"virtualFileId": "abc", "maxBatchSize": 1}')
    assert str(caught.value) == ("etl.iterate failed (400): content: is required; virtualFileId: is not a known "
                                 "field (etl.iterate takes the virtual file id in `content`)")


def test_stop_ends_the_cell_with_one_line(env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Stop during a push: a KeyboardInterrupt (the kernel's error, "Run all" stops) shown as one line, not a
    traceback through connector-ops; nothing stored, no -o variable."""
    import _thread
    import signal

    from connector_ops import magic
    from tests.signals import at_progress

    path = tmp_path / "big.csv"
    path.write_text("a,b\n" + "1,2\n" * 200_000)
    shell = make_shell(InteractiveShell)
    # as in a kernel, SIGINT raises KeyboardInterrupt: pytest started in the background (a CI script's `&`)
    # inherits it ignored, and interrupt_main() then does nothing
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        shell.run_line_magic("connectors", f"add-file {path} -o big")
        # the magic's progress bar replaced by one that presses Stop once the push has begun
        monkeypatch.setattr(magic, "tqdm_reporter", at_progress(1, _thread.interrupt_main))
        result = shell.run_cell('%etl push -o load {"platformFile": {{big}}}')
    finally:
        signal.signal(signal.SIGINT, previous)
        shell.clear_instance()
    assert type(result.error_in_exec) is KeyboardInterrupt
    printed = capsys.readouterr()
    assert printed.out.strip() == "etl.push stopped: what it was writing was not kept"
    assert "Traceback" not in printed.out + printed.err
    assert "load" not in shell.user_ns


def test_input_on_line_and_in_cell_is_refused(ip: Any) -> None:
    with pytest.raises(NotebookError, match="not both"):
        ip.run_cell_magic("etl", 'query {"a": 1}', '{"b": 2}')


def test_magic_without_action_lists_the_actions(ip: Any) -> None:
    table = ip.run_line_magic("etl", "")
    text = ip.display_formatter.format(table)[0]["text/plain"]
    assert "push" in text and "platformFile, parameters?" in text and "Load a CSV, JSON or Parquet" in text
    assert "create_shared_link" in ip.display_formatter.format(ip.run_line_magic("drive", ""))[0]["text/plain"]


def test_local_variables_inside_a_function(ip: Any, sales: dict[str, Any]) -> None:
    ip.run_cell('def first_rows(pf, n):\n    out = %etl push {"platformFile": {{pf}}}\n    return out\n')
    ip.run_cell("pushed = first_rows(sales, 2)")
    assert invoke("etl.iterate", {"content": ip.user_ns["pushed"]["virtualFileId"], "maxBatchSize": 1})["hasNext"]


def test_drive_magics_on_the_local_backend(ip: Any, sales: dict[str, Any]) -> None:
    folder = ip.run_line_magic("drive", "create_folder -o reports {name: reports}")
    up = ip.run_line_magic("drive", 'upload_file -o up {"folderId": "{{reports.folderId}}", "platformFile": {{sales}}}')
    listing = ip.run_line_magic("drive", 'list {"folderId": "{{reports.folderId}}"}')
    assert listing == {"content": [{"name": "sales.csv", "id": up["fileId"], "type": "file"}]}
    assert "<table" in html_of(ip, listing)
    assert ip.run_line_magic("drive", 'rename {"id": "{{up.fileId}}", "name": "renamed.csv"}') is None
    link = ip.run_line_magic("drive", 'create_shared_link {"id": "{{up.fileId}}", '
                                      '"recipients": [{"type": "anyone", "role": "reader"}]}')
    assert link["sharedLink"]
    down = ip.run_line_magic("drive", 'download_file {"fileId": "{{up.fileId}}"}')
    assert down["platformFile"]["name"] == "renamed.csv"
    assert invoke("drive.list", {"folderId": folder["folderId"]})["content"][0]["name"] == "renamed.csv"
    assert ip.run_line_magic("drive", 'delete_folder {"folderId": "{{reports.folderId}}"}') is None
    with pytest.raises(NotebookError, match=r"^drive.list failed \(404\)"):
        ip.run_line_magic("drive", 'list {"folderId": "{{reports.folderId}}"}')


def test_mail_cell_magic_writes_to_the_outbox(ip: Any, env: dict[str, str], sales: dict[str, Any]) -> None:
    ip.user_ns["who"] = "Ada"
    out = ip.run_cell_magic("mail", "send_transactional_message -o sent", """
from: reports@example.com
recipients:
  - {to: ada@example.com, name: "{{who}}"}
subject: "Sales for {{who}}"
templateId: 7
templateVariables: '{"name": "{{who}}"}'
attachments: [{platformFile: {{sales}}}]
""")
    assert out == {} and ip.user_ns["sent"] == {}
    [message] = (Path(env["CONNECTOR_OPS_HOME"]) / "outbox").glob("*.json")
    body = json.loads(message.read_text())["Messages"][0]
    assert body["To"] == [{"Email": "ada@example.com", "Name": "Ada"}]
    assert body["Subject"] == "Sales for Ada" and body["Variables"] == {"name": "Ada"}
    assert body["Attachments"][0]["Filename"] == "sales.csv"
    with pytest.raises(NotebookError, match=r"^mail.send_transactional_message failed \(400\): recipients\[0\].to"):
        ip.run_line_magic("mail", 'send_transactional_message {"from": "a@example.com", "recipients": [{"to": "nope"}],'
                                  ' "templateId": 1, "templateVariables": "{}"}')


def test_displaylimit_and_text_width_are_set_with_config(ip: Any, sales: dict[str, Any]) -> None:
    """``%config ConnectorMagics.displaylimit = N`` as in JupySQL; text tables wrap to ``displaywidth``."""
    vf = ip.run_line_magic("etl", 'push {"platformFile": {{sales}}}')["virtualFileId"]
    ip.user_ns["vf"] = vf
    query = 'query {"virtualFileId": "{{vf}}", "query": {}}'
    out = ip.run_line_magic("etl", query)
    assert html_of(ip, out).count("<tr>") == 20 and "184 more rows not shown" in html_of(ip, out)  # default 20
    ip.run_line_magic("config", "ConnectorMagics.displaylimit = 5")
    html = html_of(ip, out)
    assert html.count("<tr>") == 5 and "199 more rows not shown" in html and "displaylimit" in html
    text = ip.display_formatter.format(out)[0]["text/plain"]
    assert "… 199 more rows" in text and len(text.splitlines()) == 8  # title, header, 5 rows, note
    assert max(len(line) for line in text.splitlines()) <= 100
    ip.run_line_magic("config", "ConnectorMagics.displaywidth = 60")
    text = ip.display_formatter.format(out)[0]["text/plain"]
    assert max(len(line) for line in text.splitlines()[:-1]) <= 60  # 8 columns wrap instead of one long line
    assert len(text.splitlines()) > 8 and "status" in text
    ip.run_line_magic("config", "ConnectorMagics.displaylimit = 0")  # all rows
    assert html_of(ip, out).count("<tr>") == 204 and "more rows" not in html_of(ip, out)
    fresh = make_shell()  # a new session starts from the defaults
    try:
        assert html_of(fresh, out).count("<tr>") == 20
    finally:
        from connector_ops.magic import unload_ipython_extension

        unload_ipython_extension(fresh)


def test_tables_tell_missing_from_empty_and_keep_spaces(ip: Any) -> None:
    out = ip.run_line_magic("etl", 'validate {"content": [{"a": " lead", "b": ""}, {"a": "x"}], "schema": {}}')
    assert out["validated"] == [{"a": " lead", "b": ""}, {"a": "x"}]
    page = html_of(ip, out)
    assert '<td style="white-space: pre-wrap"> lead</td>' in page  # the leading space kept, and shown
    assert '<td style="white-space: pre-wrap"></td>' in page and '<td style="color: #999">&lt;NA&gt;</td>' in page
    text = ip.display_formatter.format(out)[0]["text/plain"]
    assert [line.split() for line in text.splitlines()[1:4]] == [["a", "b"], ["lead"], ["x", "<NA>"]]



def test_tables_show_private_use_characters_as_they_are(ip: Any) -> None:
    """The table marked missing values and fenced texts with U+E000 and U+E001, assumed to be in no value: a
    cell of U+E000 (an icon font's glyph) showed as a grey ``<NA>``, and U+E001 vanished from a text."""
    codes = ["\ue000", "a\ue001b", "\ue001", "\ue001\ue001", "\uf8ff", None, ""]
    ip.user_ns["rows"] = [{"code": c} for c in codes]
    out = ip.run_cell_magic("etl", "iterate", "content: {{rows}}\nmaxBatchSize: 9")
    assert out["content"] == ip.user_ns["rows"]
    cells = [line.strip() for line in html_of(ip, out).splitlines() if "<td" in line]
    shown = '<td style="white-space: pre-wrap">{}</td>'.format
    missing = '<td style="color: #999">&lt;NA&gt;</td>'
    assert cells == [shown("\ue000"), shown("a\ue001b"), shown("\ue001"), shown("\ue001\ue001"), shown("\uf8ff"),
                     missing, shown("")]


NUMBERS = '{"a": 1.50, "b": 1e5, "c": -0.0, "d": 1E400, "e": 12345678901234567890.5, "f": 7}'


def test_a_number_keeps_the_text_a_push_keeps_from_json_and_yaml(ip: Any, tmp_path: Path) -> None:
    """The magic read JSON and YAML numbers as floats: ``1.50`` was stored ``"1.5"`` and 20 digits as 17, where
    a Push of the same NDJSON keeps the text (``1E400`` was even a 400, as an infinity)."""
    (tmp_path / "n.ndjson").write_text(NUMBERS + "\n")
    ip.run_line_magic("connectors", f"add-file {tmp_path / 'n.ndjson'} -o numbers")
    ip.user_ns["vf"] = ip.run_line_magic("etl", 'push {"platformFile": {{numbers}}}')["virtualFileId"]
    row = '[{"virtualFileId": "{{vf}}", "content": ' + NUMBERS + "}]"
    assert ip.run_line_magic("etl", 'append_rows {"rows": ' + row + "}") == "ok"
    assert ip.run_cell_magic("etl", "append_rows", "rows:\n  - virtualFileId: '{{vf}}'\n"
                             "    content: {a: 1.50, c: -0.0, e: 12345678901234567890.5, f: 7}\n") == "ok"
    pushed, from_json, from_yaml = ip.run_line_magic("etl", 'iterate {"content": "{{vf}}", "maxBatchSize": 5}')[
        "content"]
    assert pushed == {"a": "1.50", "b": "1E+5", "c": "-0.0", "d": "1E+400", "e": "12345678901234567890.5", "f": "7"}
    assert from_json == pushed
    assert from_yaml == {k: pushed[k] for k in "acef"}
    found = ip.run_line_magic("etl", 'query {"virtualFileId": "{{vf}}", "query": {"a": {"$in": [1.50, "1.50"]}}}')
    assert found["result"] == [pushed, from_json, from_yaml]  # the number selects no row (type bracketing): no 400


def test_a_placeholder_of_a_decimal_keeps_its_digits_in_and_out_of_strings(ip: Any, tmp_path: Path) -> None:
    """``{{x}}`` of ``Decimal("1.50")`` (a number as the magic reads one) was written as the float ``1.5``, in a
    string too, where a Push of the same number keeps ``"1.50"``; an object holding one the same."""
    (tmp_path / "n.ndjson").write_text('{"a": 1.50, "b": 1e5}\n')
    ip.run_line_magic("connectors", f"add-file {tmp_path / 'n.ndjson'} -o numbers")
    ip.user_ns["vf"] = ip.run_line_magic("etl", 'push {"platformFile": {{numbers}}}')["virtualFileId"]
    ip.user_ns["x"], ip.user_ns["row"] = Decimal("1.50"), {"a": Decimal("1.50"), "b": [Decimal("1E+5")]}
    assert ip.run_line_magic("etl", 'append_rows {"rows": [{"virtualFileId": "{{vf}}", "content": '
                                    '{"a": {{x}}, "b": "{{x}}", "c": "{{row}}"}}]}') == "ok"
    assert ip.run_cell_magic("etl", "append_rows", "rows:\n  - virtualFileId: '{{vf}}'\n"
                                                   "    content: {a: {{x}}, b: '{{x}}'}\n") == "ok"
    pushed, from_json, from_yaml = ip.run_line_magic("etl", 'iterate {"content": "{{vf}}", "maxBatchSize": 5}')[
        "content"]
    assert pushed == {"a": "1.50", "b": "1E+5"}
    assert from_json == {"a": "1.50", "b": "1.50", "c": '{"a": 1.50, "b": [1E+5]}'}  # json.dumps's spacing kept
    assert from_yaml == {"a": "1.50", "b": "1.50"}


#: values a stranger's row may hold that YAML refuses raw (DEL, C1 controls, U+FFFE) or reads as line breaks
#: (NEL, U+2028, U+2029, CR), beside JSON's escapes and the quotes themselves
UNRULY = ["line1\x85line2", "it's\x7f", "a\u2028b\u2029", "c1\x80\x9f", "x\ufffe\uffff", "tab\there",
          "new\nline\r", 'say "hi" \\ bye', "\ue000 icon \U0001f600"]
#: the same input as a YAML block, a YAML flow line, a JSON line; ``{{v}}`` in double quotes and bare (JSON)
CELLS = ['content: [{note: "{{v}}"}, {note: {{v}}}]\nmaxBatchSize: 5',
         '{content: [{note: "{{v}}"}, {note: {{v}}}], maxBatchSize: 5}',
         '{"content": [{"note": "{{v}}"}, {"note": {{v}}}], "maxBatchSize": 5}']


@pytest.mark.parametrize("value", UNRULY, ids=ascii)
def test_a_placeholder_inserts_every_character_exactly_in_yaml_and_json(ip: Any, value: str) -> None:
    """``{{v}}`` of a row value holding NEL came back with a space in its place in a YAML cell, in every quote
    form, and one holding DEL made the whole cell a 400 (``unacceptable character #x007f``)."""
    ip.user_ns.update(v=value, rows=[{"note": value}, {"other": [value]}])
    for cell in CELLS:
        assert ip.run_cell_magic("etl", "iterate", cell)["content"] == [{"note": value}] * 2, cell
    assert ip.run_cell_magic("etl", "iterate", "content: {{rows}}\nmaxBatchSize: 5")["content"] == ip.user_ns["rows"]


def test_a_value_a_single_quoted_string_cannot_keep_is_a_400_saying_what_to_write(ip: Any) -> None:
    """YAML's ``'…'`` has no escapes: a line break in it was folded into a space, DEL refused the whole cell."""
    ip.user_ns.update(ok="it's\ttab \ue000", nel="a\x85b", lf="a\nb", half="a\ud800")
    assert ip.run_cell_magic("etl", "iterate", "content: [{note: '{{ok}}'}]\nmaxBatchSize: 5")["content"] == [
        {"note": "it's\ttab \ue000"}]
    for name, char in [("nel", "\\u0085"), ("lf", "\\u000a")]:
        with pytest.raises(NotebookError) as caught:
            ip.run_cell_magic("etl", "iterate", f"content: [{{note: '{{{{{name}}}}}'}}]\nmaxBatchSize: 5")
        assert str(caught.value) == (f"etl.iterate failed (400): {{{{{name}}}}}: the value holds {char}, which YAML "
                                     f"cannot keep in a '…' string (it has no escapes): write \"{{{{{name}}}}}\" "
                                     f"or {{{{{name}}}}}")
    for cell in ["content: ['{{half}}']\nmaxBatchSize: 5", *(c.replace("{{v}}", "{{half}}") for c in CELLS)]:
        with pytest.raises(NotebookError, match=r"^etl.iterate failed \(400\): \{\{half\}\}: the value holds \\ud800, "
                                                "half of a UTF-16 surrogate pair"):
            ip.run_cell_magic("etl", "iterate", cell)


def test_pipeline_run_shows_each_step_and_its_progress_in_the_cell_while_it_goes(
        ip: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``%pipeline run`` showed nothing until the table at the end (20 s for a 1M-row job): now the cell's
    output has a line when each step starts and ends and the ops' progress lines (every update here:
    CONNECTOR_OPS_PROGRESS_INTERVAL=0), for a YAML pipeline (its step ids) as for a Dagster job (its steps)."""
    monkeypatch.setenv("CONNECTOR_OPS_PROGRESS_INTERVAL", "0")
    (tmp_path / "rows.csv").write_text("id\n" + "".join(f"{i}\n" for i in range(20_000)))
    (tmp_path / "p.yaml").write_text('name: cell_progress\nsteps:\n'
                                     '  - {id: load, action: etl.push, input: {platformFile: "${file:rows.csv}"}}\n')
    assert ip.run_line_magic("pipeline", f"run {tmp_path / 'p.yaml'}").success
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "load: started (etl.push)" and re.fullmatch(r"load: succeeded in \d+\.\ds", lines[-1])
    assert any(line.startswith("load: push rows.csv: ") for line in lines[1:-1]), lines
    assert ip.run_line_magic("pipeline", "run first_etl").success
    lines = capsys.readouterr().out.splitlines()
    assert "etl_push: started" in lines and "etl_push: push sales.csv: 100% (" in " ".join(lines)
    assert any(re.fullmatch(r"etl_pull: succeeded in \d+\.\ds", line) for line in lines), lines
