"""CSV files from and to other tools: TSV by its name, what PostgreSQL's COPY and a BOM-reading reader make of
Pull's CSV, and the charset Pull names. Both databases, real files."""

from __future__ import annotations

import csv
import gzip
import io
import json
import zipfile

import pytest

from connector_ops import ConnectorError, invoke


def push(files, data: bytes, name: str, content_type: str = "text/csv", **parameters) -> str:
    pf = files.add_bytes(data, name, content_type).to_json()
    return invoke("etl.push", {"platformFile": pf, "parameters": parameters})["virtualFileId"]


def rows(vf: str) -> list[dict]:
    return invoke("etl.iterate", {"content": vf, "maxBatchSize": 1000})["content"]


def pull(files, vf: str, name: str = "out.csv", **parameters) -> tuple[bytes, dict]:
    out = invoke("etl.pull", {"virtualFileId": vf, "exportType": "csv", "exportName": name,
                              "parameters": parameters})["platformFile"]
    return files.read_bytes(out), out


TSV = b"id\tname\n1\tAnn, Jr\n2\tBob\n"
TSV_ROWS = [{"id": "1", "name": "Ann, Jr"}, {"id": "2", "name": "Bob"}]


def _zipped(name: str, data: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr(name, data)
    return out.getvalue()


@pytest.mark.parametrize(("name", "content_type", "data"), [
    ("report.tsv", "text/tab-separated-values", TSV),
    ("REPORT.TSV ", "application/octet-stream", TSV),  # the name alone, read as suffixes are
    ("report.txt", "text/tab-separated-values; charset=utf-8", TSV),  # the type alone
    ("report.tsv.gz", "application/gzip", gzip.compress(TSV, mtime=0)),
    ("report.zip", "application/zip", _zipped("report.tsv", TSV)),
], ids=["name-and-type", "name", "type", "gzip", "zip"])
def test_a_tsv_is_pushed_by_tabs(files, env, name, content_type, data):
    assert rows(push(files, data, name, content_type)) == TSV_ROWS


def test_a_csv_delimiter_given_wins_over_a_tsv_name(files, env):
    assert rows(push(files, b"id;name\n1;Ann\n", "report.tsv", csvDelimiter=";")) == [{"id": "1", "name": "Ann"}]
    assert rows(push(files, b"id\tname\n1\tAnn\n", "report.tsv", csvDelimiter=",")) == [{"id\tname": "1\tAnn"}]


def test_a_tsv_pull_writes_tabs_names_its_type_and_pushes_back(files, env):
    vf = push(files, b'id,name\n1,"Ann, Jr"\n2,Bob\n', "a.csv")
    data, pf = pull(files, vf, "report.tsv")
    assert data == b"id\tname\r\n1\tAnn, Jr\r\n2\tBob\r\n"
    assert pf["contentType"] == "text/tab-separated-values"
    assert list(csv.reader(io.StringIO(data.decode()), dialect="excel-tab"))[1] == ["1", "Ann, Jr"]
    assert rows(invoke("etl.push", {"platformFile": pf})["virtualFileId"]) == TSV_ROWS
    _, latin = pull(files, vf, "report.tsv", encoding="latin-1")
    assert latin["contentType"].startswith("text/tab-separated-values; charset=")
    packed, zipped = pull(files, vf, "report.tsv.gz")
    assert gzip.decompress(packed) == data and zipped["contentType"] == "application/gzip"
    assert rows(invoke("etl.push", {"platformFile": zipped})["virtualFileId"]) == TSV_ROWS
    # a delimiter given wins, and then the file is no TSV: its type names the delimiter (below)
    semi, semi_pf = pull(files, vf, "report.tsv", csvDelimiter=";")
    assert semi.startswith(b"id;name\r\n") and semi_pf["contentType"] == 'text/csv; delimiter=";"'
    plain, plain_pf = pull(files, vf, "report.csv")
    assert plain.startswith(b"id,name\r\n") and plain_pf["contentType"] == "text/csv"


def test_a_tsv_pull_with_a_comma_given_says_text_csv_and_pushes_back_by_commas(files, env):
    """Pull's ``report.tsv`` with ``csvDelimiter: ","`` is ``text/csv``; Push once let the ``.tsv`` name win
    over that type and read it back by tabs, as one column ``id,name``. An explicit ``text/csv`` means ``,``;
    the name still decides under a type that does not say."""
    vf = push(files, b'id,name\n1,"Ann, Jr"\n2,Bob\n', "a.csv")
    data, pf = pull(files, vf, "report.tsv", csvDelimiter=",")
    assert data.startswith(b"id,name\r\n") and pf["contentType"] == "text/csv"
    assert rows(invoke("etl.push", {"platformFile": pf})["virtualFileId"]) == TSV_ROWS
    for content_type in ("text/plain", "application/octet-stream"):
        assert rows(push(files, TSV, "report.tsv", content_type)) == TSV_ROWS


@pytest.mark.parametrize(("name", "delimiter", "content_type"), [
    ("report.tsv", ";", 'text/csv; delimiter=";"'),
    ("report.tsv", "|", "text/csv; delimiter=|"),
    ("report.csv", ";", 'text/csv; delimiter=";"'),
    ("report.csv", "tab", "text/csv; delimiter=tab"),
    ("report.csv", "\u00a7", "text/csv; delimiter*=UTF-8''%C2%A7"),
    ("report.tsv.gz", ",", 'application/gzip; delimiter=","'),
    ("report.tsv.gz", ";", 'application/gzip; delimiter=";"'),
    ("report.zip", "|", "application/zip; delimiter=|"),
    ("report.csv", ",", "text/csv"), ("report.tsv", "tab", "text/tab-separated-values"),
], ids=["tsv-semicolon", "tsv-pipe", "csv-semicolon", "csv-tab", "csv-section-sign", "tsv-gz-comma",
        "tsv-gz-semicolon", "zip-pipe", "csv-comma", "tsv-tab"])
def test_a_pull_names_a_delimiter_its_type_and_name_do_not_say_and_pushes_back_as_written(files, env, name,
                                                                                          delimiter, content_type):
    """Pull's ``report.tsv`` (or ``report.csv``) written with ``csvDelimiter: ";"`` said ``text/csv``, and
    pushed back was read by commas unless ``csvDelimiter`` was given again: one column ``id;name``. A
    compressed ``report.tsv.gz`` written with commas said only its name, and was read back by tabs. Now the
    type names the delimiter in a ``delimiter`` parameter whenever its type and name would say another."""
    vf = push(files, b'id,name\n1,"Ann, Jr"\n2,Bob\n', "a.csv")
    _, pf = pull(files, vf, name, csvDelimiter=delimiter)
    assert pf["contentType"] == content_type
    assert rows(invoke("etl.push", {"platformFile": pf})["virtualFileId"]) == TSV_ROWS


def test_a_named_delimiter_keeps_the_charset_and_yields_to_a_csv_delimiter_given(files, env):
    vf = push(files, "id,name\n1,Zoë\n".encode(), "a.csv")
    data, pf = pull(files, vf, "report.csv", csvDelimiter=";", encoding="latin-1")
    assert data == "id;name\r\n1;Zoë\r\n".encode("latin-1")
    assert pf["contentType"] == 'text/csv; charset=ISO-8859-1; delimiter=";"'
    assert rows(invoke("etl.push", {"platformFile": pf})["virtualFileId"]) == [{"id": "1", "name": "Zoë"}]
    given = invoke("etl.push", {"platformFile": pf, "parameters": {"csvDelimiter": ","}})["virtualFileId"]
    assert rows(given) == [{"id;name": "1;Zoë"}]
    bad = files.add_bytes(b"a;b\n1;2\n", "x.csv", 'text/csv; delimiter=";;"').to_json()
    with pytest.raises(ConnectorError) as caught:
        invoke("etl.push", {"platformFile": bad})
    assert caught.value.status == 400 and caught.value.body["message"].startswith(
        "platformFile.contentType: names delimiter ';;', which no CSV can have"), caught.value.body


def test_a_one_column_pull_holding_the_end_of_data_marker_loads_whole_through_postgresql_copy(files, env,
                                                                                             postgres_url):
    """A value ``\\.`` alone on its line ended PostgreSQL's ``COPY … FROM STDIN`` (psql's ``\\copy``): the rows
    after it were silently lost. Pull quotes it, as PostgreSQL's own CSV writer does."""
    import psycopg
    from sqlalchemy.engine import make_url

    values = ["a", "\\.", "b", "\\.", "c"]
    vf = push(files, "".join(json.dumps({"\\.": v}) + "\n" for v in values).encode(), "p.ndjson",
              "application/x-ndjson")
    assert [r["\\."] for r in rows(vf)] == values
    data, _ = pull(files, vf)
    wide, _ = pull(files, push(files, b"x,y\n\\.,\\.\n", "w.csv"))
    assert wide == b"x,y\r\n\\.,\\.\r\n"  # no line of its own: written as it is
    url = make_url(postgres_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        cur.execute("CREATE TEMPORARY TABLE pulled (v text)")
        with cur.copy("COPY pulled FROM STDIN (FORMAT csv, HEADER)") as copy:
            copy.write(data)
        cur.execute("SELECT v FROM pulled")
        assert [v for (v,) in cur.fetchall()] == values
    assert data == b'"\\."\r\na\r\n"\\."\r\nb\r\n"\\."\r\nc\r\n'


@pytest.mark.parametrize("header", [True, False])
def test_a_first_cell_starting_with_u_feff_is_quoted_so_it_is_not_read_as_a_bom(files, env, header):
    """``csv.DictReader`` over an Excel "CSV UTF-8" file opened as ``utf-8`` names its first column
    ``\\ufeffid``; sent on as JSON, pulled, pushed back, the column was renamed ``id`` (the U+FEFF read as a
    BOM). The file's first cell is quoted when it starts with U+FEFF; a missing value beside it stays empty."""
    vf = push(files, b'{"\\ufeffid": "\\ufeff1"}\n{"\\ufeffid": "2", "name": "Bob"}\n', "rows.ndjson",
              "application/x-ndjson")
    data, pf = pull(files, vf, addFirstRowAsSchema=header)
    if header:
        assert rows(invoke("etl.push", {"platformFile": pf})["virtualFileId"]) == [
            {"\ufeffid": "\ufeff1", "name": ""}, {"\ufeffid": "2", "name": "Bob"}]
    else:
        assert rows(push(files, data, "back.csv", schema=["\ufeffid", "name"])) == [
            {"\ufeffid": "\ufeff1", "name": ""}, {"\ufeffid": "2", "name": "Bob"}]
    first = "\ufeffid" if header else "\ufeff1"
    assert data.decode().startswith(f'"{first}",')
    assert next(csv.reader(io.StringIO(data.decode("utf-8-sig")))) == [first, "name" if header else ""]
    # written with a BOM of its own, it reads the same
    with_bom, _ = pull(files, vf, addFirstRowAsSchema=header, encoding="utf-8-sig")
    assert with_bom == b"\xef\xbb\xbf" + data


@pytest.mark.parametrize("header", [True, False])
def test_an_empty_first_cell_before_a_u_feff_delimiter_is_quoted(files, env, header):
    """With ``csvDelimiter: "\ufeff"`` a row whose first value is missing (or empty) began the file with the
    delimiter, which Push read as a BOM: the pulled file was a 400 (``line 1: expected 2 fields, found 1``)."""
    vf = push(files, b'{"b": "1"}\n{"a": "x", "b": "2"}\n', "rows.ndjson", "application/x-ndjson", schema=["a", "b"])
    data, pf = pull(files, vf, csvDelimiter="\ufeff", addFirstRowAsSchema=header)
    assert data.decode().startswith("a\ufeffb\r\n" if header else '""\ufeff1\r\n')
    again = invoke("etl.push", {"platformFile": pf, "parameters": {} if header else {
        "useFirstRowAsSchema": False, "schema": ["a", "b"]}})["virtualFileId"]
    assert rows(again) == [{"a": "", "b": "1"}, {"a": "x", "b": "2"}]


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-32-le"])
def test_a_first_cell_starting_with_u_feff_pushes_back_in_an_encoding_that_keeps_a_bom(files, env, encoding):
    """An export in an encoding whose decoder keeps a BOM as a character (``utf-16-le`` writes none, and reads
    one as U+FEFF) holds the first column ``"\ufeffid"`` quoted. Pushed back from its descriptor on the row
    reader (a small file on SQLite), the U+FEFF was dropped from the name as if it were a BOM: ``id``."""
    vf = push(files, '{"\ufeffid": "1", "name": "Bob"}\n'.encode(), "rows.ndjson", "application/x-ndjson")
    data, pf = pull(files, vf, encoding=encoding)
    assert data.decode(encoding).startswith('"\ufeffid",')
    assert rows(invoke("etl.push", {"platformFile": pf})["virtualFileId"]) == [{"\ufeffid": "1", "name": "Bob"}]


@pytest.mark.parametrize(("encoding", "charset"), [
    ("utf-16-le", "UTF-16LE"), ("utf_16_be", "UTF-16BE"), ("utf-16", "UTF-16"), ("euc_jp", "EUC-JP"),
    ("mac_roman", "macintosh"), ("latin-1", "ISO-8859-1"), ("cp1252", "windows-1252"), ("ascii", "US-ASCII"),
    ("shift_jis", "Shift_JIS"), ("koi8_r", "KOI8-R"), ("cp437", "IBM437"),
    ("cp932", "cp932"), ("iso8859_11", "iso8859-11"),  # IANA's name unknown to Python / no IANA name: Python's
])
def test_a_pull_names_its_charset_by_the_iana_name_which_python_reads_back(files, env, encoding, charset):
    """Pull named Python's codec (``utf-16-le``, ``euc_jp``, ``mac-roman``), which browsers and HTTP clients
    outside Python do not know; IANA's preferred MIME name now, one ``codecs.lookup`` finds too."""
    import codecs

    vf = push(files, b"a\nx\n", "a.csv")
    data, pf = pull(files, vf, encoding=encoding)
    assert pf["contentType"] == f"text/csv; charset={charset}"
    assert codecs.lookup(charset).name == codecs.lookup(encoding).name
    assert data.decode(charset).lstrip("\ufeff") == "a\r\nx\r\n"


def test_every_iana_label_reads_back_as_its_codec():
    import codecs

    from connector_ops.etl.charsets import IANA_NAMES

    assert {name: codecs.lookup(label).name for name, label in IANA_NAMES.items()} == {n: n for n in IANA_NAMES}
