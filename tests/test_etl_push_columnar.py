"""Push's columnar fast path against the ``csv`` module: same rows, same errors, same line numbers.

Differential tests (seeded random files with quotes, delimiters, line breaks, unicode, empty values, empty
lines, ragged rows and stray quotes) compare the fast parser with Python's ``csv`` module, and Push through
the fast path with the slow path's own reading, on both databases. csv-spectrum runs through each path
alone.
"""

from __future__ import annotations

import csv
import io
import json
import random
from unittest.mock import ANY

import pytest

from connector_ops import ConnectorError, invoke
from connector_ops.etl import push_csv
from connector_ops.etl.csv_fast import data_rows
from connector_ops.etl.readers import read_csv
from connector_ops.kernel.errors import InvalidInput
from connector_ops.kernel.streams import as_utf8
from connector_ops.resources.virtual_files import sqlite_loader
from connector_ops.resources.virtual_files.csv_columns import csv_batches
from tests.conftest import CSV_SPECTRUM
from tests.test_csv_copy import Trickle
from tests.test_etl_push_pull import SPECTRUM_CASES, push, rows

ALPHABET = ['a', 'b', ' ', ',', ';', '"', '\n', '\r\n', '\r', 'é', '🙂', '\t', 'x"y', '', '\\N', '\\.']


@pytest.fixture
def fast_only(monkeypatch, caplog):
    """Every push takes the columnar path (also small files on SQLite); the slow path would fail the test."""
    monkeypatch.setattr(sqlite_loader, "SQLITE_CHILD_MIN_BYTES", 0)
    caplog.set_level("DEBUG", logger=push_csv.__name__)

    def no_slow_path(*args, **kwargs):
        raise AssertionError(f"the slow path ran: {caplog.text}")

    monkeypatch.setattr(push_csv, "read_csv", no_slow_path)


@pytest.fixture
def slow_only(monkeypatch):
    monkeypatch.setattr(push_csv, "FAST", False)


@pytest.fixture
def counted(monkeypatch, caplog):
    """The columnar path for every size, and the reasons Push fell back to the slow path."""
    monkeypatch.setattr(sqlite_loader, "SQLITE_CHILD_MIN_BYTES", 0)
    caplog.set_level("DEBUG", logger=push_csv.__name__)
    calls = []

    def counting(*args, **kwargs):
        calls.append(caplog.records[-1].getMessage() if caplog.records else "no reason logged")
        return read_csv(*args, **kwargs)

    monkeypatch.setattr(push_csv, "read_csv", counting)
    return calls


@pytest.mark.parametrize("case", SPECTRUM_CASES)
def test_csv_spectrum_through_the_fast_path(files, env, fast_only, case):
    expected = json.loads((CSV_SPECTRUM / "json" / f"{case}.json").read_text(encoding="utf-8"))
    assert rows(push(files, (CSV_SPECTRUM / "csvs" / f"{case}.csv").read_bytes())) == expected


@pytest.mark.parametrize("case", SPECTRUM_CASES)
def test_csv_spectrum_through_the_slow_path(files, env, slow_only, case):
    expected = json.loads((CSV_SPECTRUM / "json" / f"{case}.json").read_text(encoding="utf-8"))
    assert rows(push(files, (CSV_SPECTRUM / "csvs" / f"{case}.csv").read_bytes())) == expected


def random_csv(rnd: random.Random, *, stray_quotes: bool, rows: int = 40, min_rows: int = 0, preamble: int = 0,
               alphabet: list[str] = ALPHABET, ragged: float = 0.01, empty: float = 0.05) -> tuple[bytes, str]:
    """A CSV file (``preamble`` lines to ignore, a header, ``min_rows`` to ``rows`` rows) and its delimiter; a
    row is ragged with the odds ``ragged``, and followed by an empty line with the odds ``empty``; with
    stray quotes."""
    delimiter = rnd.choice([",", ";", "\t", "|"])
    width = rnd.randint(1, 5)
    out = io.StringIO()
    terminator = rnd.choice(["\n", "\r\n"])
    out.write(f'skipped, "not a row{terminator}' * preamble)
    writer = csv.writer(out, delimiter=delimiter, lineterminator=terminator,
                        quoting=rnd.choice([csv.QUOTE_MINIMAL, csv.QUOTE_ALL]))
    writer.writerow([f"col{i}" for i in range(width)])
    for _ in range(rnd.randint(min_rows, rows)):
        n = width if rnd.random() >= ragged else rnd.randint(1, width + 2)  # now and then a ragged row
        writer.writerow(["".join(rnd.choices(alphabet, k=rnd.randint(0, 4))) for _ in range(n)])
        if rnd.random() < empty:
            out.write(terminator)  # an empty line
    text = out.getvalue()
    if stray_quotes:
        for _ in range(rnd.randint(1, 3)):
            at = rnd.randrange(len(text) + 1)
            text = text[:at] + '"' + text[at:]
    return text.encode(), delimiter


def reference(data: bytes, delimiter: str, lines_to_ignore: int = 0, header: bool = True,
              schema: list[str] | None = None, encoding: str = "utf-8-sig") -> list[dict] | str:
    """What the csv module (Push's slow path) reads: the rows, or the error message."""
    try:
        columns, batches = read_csv(io.BytesIO(data), delimiter=delimiter, lines_to_ignore=lines_to_ignore,
                                    header=header, schema=schema, encoding=encoding,
                                    reopen=lambda: io.BytesIO(data))
        return [dict(zip(columns, row, strict=True)) for batch in batches for row in batch]
    except InvalidInput as exc:
        return str(exc)


def test_the_fast_parser_reads_what_the_csv_module_reads_or_refuses():
    rnd = random.Random(1302)
    fast_reads = 0
    for _ in range(600):
        data, delimiter = random_csv(rnd, stray_quotes=rnd.random() < 0.3)
        expected = reference(data, delimiter)
        try:
            opened = data_rows(io.BytesIO(data), delimiter=delimiter, lines_to_ignore=0, header=True, schema=None,
                               encoding="utf-8-sig")
            assert opened is not None
            columns, body = opened
            read = [r for batch in csv_batches(body, len(columns), delimiter) for r in batch.to_pylist()]
        except Exception:  # refused: Push reads it with the csv module
            continue
        got = [dict(zip(columns, r.values(), strict=True)) for r in read]
        assert got == expected, (data, delimiter)
        fast_reads += 1
    assert fast_reads > 200  # the check refuses only what it must (stray quotes, ragged rows)


def test_push_through_the_fast_path_equals_the_csv_module(files, env, counted):
    rnd = random.Random(1303)
    plain_fell_back = []
    for i in range(24):
        stray = i % 3 == 0
        data, delimiter = random_csv(rnd, stray_quotes=stray)
        expected = reference(data, delimiter)
        before = len(counted)
        pf = files.add_bytes(data, "r.csv", "text/csv").to_json()
        try:
            vf = invoke("etl.push", {"platformFile": pf, "parameters": {"csvDelimiter": delimiter}})["virtualFileId"]
            got: list[dict] | str = rows(vf)
        except ConnectorError as exc:
            assert exc.status == 400
            got = exc.body["message"]
        assert got == expected, data
        if not stray and isinstance(expected, list) and len(counted) > before:
            plain_fell_back.append((data, counted[-1]))
    assert plain_fell_back == []  # plain files never needed the slow path


#: no lone CR: the ``csv`` module writes it unquoted under an LF terminator, and reads it back as a line end
BIG_ALPHABET = [*(c for c in ALPHABET if c != "\r"), "a longer value " * 3]


@pytest.mark.parametrize("seed", range(6))
def test_files_of_many_blocks_push_as_the_csv_module_reads_them(files, env, counted, seed):
    """Random files of 4–13 MiB (the fast path reads 1 MiB blocks; ``COPY`` and the SQLite child take it in
    chunks), so quoted line breaks, CRLFs and multi-byte characters fall across every kind of cut; with
    lines to ignore, a BOM, a header or a schema, and now and then a fault deep in the file (a ragged row, a
    stray quote, a byte that is not UTF-8): the same rows, or the same error with the same line, as the
    ``csv`` module. A file without a fault never needs the slow path."""
    rnd = random.Random(1304 + seed)
    fault = {2: b"\xff", 5: b'"'}.get(seed)  # seed 5 also has ragged rows
    preamble = rnd.choice([0, 2])
    data, delimiter = random_csv(rnd, stray_quotes=False, rows=250_000, min_rows=150_000, preamble=preamble,
                                 alphabet=BIG_ALPHABET, ragged=1 / 100_000 if seed == 5 else 0,
                                 empty=1 / 100_000 if seed == 4 else 0)  # on PostgreSQL: Arrow, not COPY
    if fault:
        at = rnd.randrange(len(data) // 2, len(data))
        data = data[:at] + fault + data[at:]
    if seed % 2:
        data = b"\xef\xbb\xbf" + data
    header = seed % 4 != 3
    width = data.split(b"\n", preamble + 1)[preamble].count(delimiter.encode()) + 1
    names = [f"col{i}" for i in reversed(range(width))] if header else [f"s{i}" for i in range(width)]
    schema = None if header and seed % 4 != 1 else names  # with a header, its names in another order
    parameters: dict = {"csvDelimiter": delimiter, "linesToIgnore": preamble, "useFirstRowAsSchema": header}
    if schema:
        parameters["schema"] = schema
    expected = reference(data, delimiter, preamble, header, schema)
    pf = files.add_bytes(data, "r.csv", "text/csv").to_json()
    try:
        vf = invoke("etl.push", {"platformFile": pf, "parameters": parameters})["virtualFileId"]
        got: list[dict] | str = rows(vf)
    except ConnectorError as exc:
        assert exc.status == 400
        got = exc.body["message"]
    assert len(data) > 1 << 20
    assert got == expected
    if isinstance(expected, list) and not fault:
        assert counted == []


#: characters of each encoding that UTF-8 writes in two to four bytes (and \x85, a line break to no reader here)
IN_ENCODING = {"cp1252": ["é", "€", "’", "ß"], "latin-1": ["é", "ß", "\xa0", "\x85"],
               "utf-16": ["é", "🙂", "€", "\u2028"], "shift_jis": ["日本", "ｶﾅ", "語"]}


@pytest.mark.parametrize("encoding", IN_ENCODING)
def test_files_in_other_encodings_push_on_the_fast_path_as_the_csv_module_reads_them(files, env, counted,
                                                                                    encoding):
    """A file of over 1 MiB in another encoding (``parameters.encoding``) takes the columnar path, read as
    UTF-8 a chunk at a time (characters of two or four bytes cut between chunks), and gives what the ``csv``
    module reads from it; the same file with a byte the encoding lacks deep inside gives the slow path's
    error, with its line."""
    rnd = random.Random(1310)
    alphabet = [*(c for c in BIG_ALPHABET if c not in ("é", "🙂")), *IN_ENCODING[encoding]]
    text, delimiter = random_csv(rnd, stray_quotes=False, rows=30_000, min_rows=25_000, alphabet=alphabet,
                                 ragged=0, empty=1 / 20_000)
    data = text.decode().encode(encoding)
    parameters = {"csvDelimiter": delimiter, "encoding": encoding}
    expected = reference(data, delimiter, encoding=encoding)
    assert isinstance(expected, list) and len(data) > 1 << 20
    pf = files.add_bytes(data, "r.csv", "text/csv").to_json()
    assert rows(invoke("etl.push", {"platformFile": pf, "parameters": parameters})["virtualFileId"]) == expected
    assert counted == []
    if encoding != "cp1252":
        return
    at = data.index(b"\n", len(data) * 3 // 4)
    faulty = data[:at] + b"\x81" + data[at:]  # a byte cp1252 has no character for
    expected = reference(faulty, delimiter, encoding=encoding)
    assert isinstance(expected, str) and "is not valid cp1252" in expected
    pf = files.add_bytes(faulty, "r.csv", "text/csv").to_json()
    with pytest.raises(ConnectorError) as info:
        invoke("etl.push", {"platformFile": pf, "parameters": parameters})
    assert info.value.status == 400 and info.value.body["message"] == expected
    assert len(counted) == 1


@pytest.mark.parametrize("size", [1, 3, 7])
@pytest.mark.parametrize("encoding", [*IN_ENCODING, "utf-32"])
def test_as_utf8_reads_text_cut_anywhere(encoding, size):
    """Characters of any length cut between the source's reads come out whole; a byte the encoding lacks
    raises (the fast path then gives the file to the slow path)."""
    text = "a,b\r\n" + "".join(IN_ENCODING.get(encoding, ["é🙂"])) * 50 + "\n"
    stream, encoding_now = as_utf8(Trickle(text.encode(encoding), size), encoding)
    assert encoding_now == "utf-8" and stream.read() == text.encode()
    assert as_utf8(io.BytesIO(b"x"), "utf-8-sig") == (ANY, "utf-8-sig")
    with pytest.raises(UnicodeDecodeError):
        as_utf8(io.BytesIO(b"a\x81b"), "cp1252")[0].read()


@pytest.mark.parametrize(("encoding", "bom"), [("utf-16-le", "\ufeff"), ("utf-16", ""), ("latin-1", "ï»¿")])
def test_a_bom_another_encoding_keeps_is_the_slow_paths_to_judge(files, env, counted, encoding, bom):
    """``utf-16-le`` keeps a BOM as the character U+FEFF (``utf-16`` consumes it; in latin-1 a UTF-8 BOM is
    three letters): the fast path leaves the first case to the slow path, and every case reads as the
    ``csv`` module reads it."""
    data = (bom + "a,b\n1,é\n").encode(encoding)
    expected = reference(data, ",", encoding=encoding)
    assert rows(push(files, data, encoding=encoding)) == expected
    assert len(counted) == (bom == "\ufeff")


@pytest.mark.parametrize(("data", "message"), [
    (b"a,b\n1,2\n3,4,5\n", "line 3: expected 2 fields, found 3"),
    (b'a,b\n1,"x\ny"\n"open,2\n', "line 4: malformed CSV"),
    (b"a,b\n1,2\n\xff,3\n", "line 3: the file is not valid utf-8-sig"),
    (b'a,b\n1,"x"y\n', "line 2: malformed CSV"),
])
def test_errors_keep_their_exact_line_after_the_fast_path_gives_up(files, env, counted, data, message):
    pf = files.add_bytes(data, "bad.csv", "text/csv").to_json()
    with pytest.raises(ConnectorError) as info:
        invoke("etl.push", {"platformFile": pf})
    assert info.value.status == 400 and message in info.value.body["message"], info.value.body
    assert len(counted) == 1


@pytest.mark.parametrize(("data", "parameters", "expected"), [
    (b"h\r\n\xef\xbb\xbfx\r\ny\r\n", {}, [{"h": "\ufeffx"}, {"h": "y"}]),  # Arrow would drop it as a BOM
    (b"h\r\n\xef\xbb\xbfx\r\n\r\ny\r\n", {}, [{"h": "\ufeffx"}, {"h": "y"}]),
    (b"junk\n\xef\xbb\xbfx,1\n", {"linesToIgnore": 1, "schema": ["a", "b"]}, [{"a": "\ufeffx", "b": "1"}]),
    (b"\xef\xbb\xbf\xef\xbb\xbfk,v\r\n1,2\r\n", {}, [{"\ufeffk": "1", "v": "2"}]),  # the BOM dropped once
    ("\ufeffk,v\n1,2\n".encode("utf-16"), {"encoding": "utf-16"}, [{"\ufeffk": "1", "v": "2"}]),
    (b"\xef\xbb\xbfk,v\r\n1,2\r\n", {"encoding": "utf-8"}, [{"k": "1", "v": "2"}]),  # kept by utf-8, dropped
    # before the csv module parses: a quoted first field stays quoted, a file without a header loses it too
    (b'\xef\xbb\xbf"k",v\r\n1,2\r\n', {"encoding": "utf-8"}, [{"k": "1", "v": "2"}]),
    ('\ufeff"k",v\n1,2\n'.encode("utf-16-le"), {"encoding": "utf-16-le"}, [{"k": "1", "v": "2"}]),
    (b"\xef\xbb\xbfx,y\n1,2\n", {"encoding": "utf-8", "useFirstRowAsSchema": False, "schema": ["a", "b"]},
     [{"a": "x", "b": "y"}, {"a": "1", "b": "2"}]),
    (b"\xef\xbb\xbf\n\nk\n1\n", {"encoding": "utf-8"}, [{"k": "1"}]),  # a BOM alone on the first line
    # quoted, it is the name's first character, not a BOM (it was taken from the name all the same)
    (b'"\xef\xbb\xbfk",v\r\n1,2\r\n', {"encoding": "utf-8"}, [{"\ufeffk": "1", "v": "2"}]),
    ('"\ufeffk",v\r\n1,2\r\n'.encode("utf-16-le"), {"encoding": "utf-16-le"}, [{"\ufeffk": "1", "v": "2"}]),
    ('\ufeff"\ufeffk",v\r\n1,2\r\n'.encode("utf-16-le"), {"encoding": "utf-16-le"}, [{"\ufeffk": "1", "v": "2"}]),
])
def test_a_u_feff_after_the_bom_is_a_character_on_every_path(files, env, counted, monkeypatch, data, parameters,
                                                            expected):
    """The file's BOM is dropped once, by the decoder or else before the ``csv`` module parses (an encoding
    that keeps it as a character: ``utf-8``, ``utf-16-le``); any other U+FEFF is text, also where it starts
    the rows Arrow would read (Arrow drops it there, so those go the slow way)."""
    fast = rows(push(files, data, **parameters))
    monkeypatch.setattr(push_csv, "FAST", False)
    assert fast == rows(push(files, data, **parameters)) == expected


#: a € split by the end of the bad byte search's first read (64 KiB)
_SPLIT = b"h\n" + b"x\n" * 21_844 + b"y" * 21_844 + "€".encode()


@pytest.mark.parametrize(("data", "name", "encoding", "line"), [
    (b"\xef\xbb\xbfh\n1\nb\xff\n", "bom.csv", "utf-8-sig", 3),  # the BOM's bytes are not the text's
    (b"\xef\xbb\xbfh\n1\n\xff\n", "bom.csv", "utf-8-sig", 3),
    ("名,值\n上海,上\n".encode("utf-16") + b"\x00\xd8a\x00\n\x00", "wide.csv", "utf-16", 3),  # 上 is 0x4E0A
    ('{"a":"上海上"}\n'.encode("utf-16") + b"\x00\xd8a\x00\n\x00", "wide.ndjson", "utf-16", 2),
    (_SPLIT + b"\xff\n" + b"z\n", "split.csv", "utf-8-sig", 21_846),  # the € held back across two reads
])
def test_a_byte_the_encoding_cannot_read_is_on_the_line_of_the_decoded_text(files, env, data, name, encoding,
                                                                            line):
    pf = files.add_bytes(data, name, "application/octet-stream").to_json()
    with pytest.raises(ConnectorError) as info:
        invoke("etl.push", {"platformFile": pf, "parameters": {"encoding": encoding}})
    assert info.value.body["message"].startswith(f"platformFile: line {line}: the file is not valid {encoding} ")


@pytest.mark.parametrize("name", ["plain.csv", "ndjson.json", "frame"])
def test_pushed_files_end_with_their_row_key(files, store, fast_only, name):
    """On PostgreSQL the columnar loads build the primary key after the rows (one sorted pass): every
    pushed file ends with the same constraint as any row table, and appended rows follow in order."""
    from connector_ops import push_frame

    rows_in = [{"a": str(i), "b": "x" if i % 2 else None} for i in range(300)]
    if name == "frame":
        import pandas as pd

        vf = push_frame(pd.DataFrame(rows_in))
    else:
        as_json = name.endswith(".json")
        lines = ([json.dumps({k: v for k, v in r.items() if v is not None}) for r in rows_in] if as_json
                 else ["a,b", *(f"{r['a']},{r['b'] or ''}" for r in rows_in)])
        pf = files.add_bytes("\n".join(lines).encode(), name, "application/json" if as_json else "text/csv")
        vf = invoke("etl.push", {"platformFile": pf.to_json()})["virtualFileId"]
    assert store.row_key(vf) in (None, store.ROW_KEY)
    store.append({vf: [{"a": "new"}]})
    assert [r["a"] for r in store.rows(vf)] == [*(r["a"] for r in rows_in), "new"]


def test_rows_appended_after_a_push_follow_it_from_any_session_on_postgresql(postgres_url, tmp_path):
    """A PostgreSQL Push numbers its rows from a sequence that hands its session many values at a time
    (``keys_after.numbered_in_bulk``); afterwards the sequence is back to one value at a time and that
    session holds none: rows appended by either session follow in the order they were appended."""
    from tests.conftest import resources_on
    from tests.virtual_files import StoreForTests

    store, other = (StoreForTests.of(resources_on(postgres_url, tmp_path / "home", **named)["virtual_files"])
                    for named in ({}, {"application_name": "other"}))  # the other: its own engine
    vf = store.create_from_csv(["a"], io.BytesIO(b"1\n2\n3\n"), ",")
    other.append({vf: [{"a": "other"}]})
    store.append({vf: [{"a": "same"}]})
    other.append({vf: [{"a": "other again"}]})
    assert [r["a"] for r in store.rows(vf)] == ["1", "2", "3", "other", "same", "other again"]
    with store.reading() as conn:
        table = store.info(conn, vf).table_name
        cache = conn.exec_driver_sql("SELECT cache_size FROM pg_sequences WHERE sequencename = "
                                     f"'{table}_seq_seq'").scalar_one()
    assert cache == 1
