"""NDJSON Push on the columnar path (issue 13): exactly what the row reader reads, or the row reader.

Differential: random all-string NDJSON (unicode, escapes, quotes, newlines inside values, missing keys,
null, blank lines, CRLF) pushed through Arrow and through the row reader gives the same columns, in the
same order, and the same rows; files Arrow would read differently (numbers, booleans, nested values,
duplicate keys, an object over two lines, two objects on one line, a BOM under plain ``utf-8``) go to the
row reader and give its result or its error. Both databases.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from connector_ops import ConnectorError, invoke
from connector_ops.etl import ndjson_fast
from connector_ops.resources.virtual_files import ndjson_columns
from tests.test_csv_copy import Trickle

KEYS = ["id", "name", "note", "a b", "é", "x\"y"]
TEXT = st.one_of(st.text(alphabet=st.sampled_from([*'ab ,;"\\/\n\r\té🙂{}[]:', "\u2028"]), max_size=8),
                 st.sampled_from(["null", "1.50", "", " 7 ", "2026-01-05", "2026-01-05T10:00:00Z"]))


def pushed(resources: dict[str, Any], data: bytes, monkeypatch, *, fast: bool, **params: Any) -> Any:
    monkeypatch.setattr(ndjson_fast, "FAST", fast)
    pf = resources["platform_files"].add_bytes(data, "rows.ndjson").to_json()
    try:
        vf = invoke("etl.push", {"platformFile": pf, "parameters": params}, resources)["virtualFileId"]
    except ConnectorError as exc:
        return ("error", exc.status, exc.message)
    count, columns, first = resources["virtual_files"].summary(vf, 10_000)
    return ("rows", columns, first, count)


def both(resources, data: bytes, monkeypatch, paths, **params: Any) -> tuple[Any, list[str]]:
    slow = pushed(resources, data, monkeypatch, fast=False, **params)
    paths.clear()
    fast = pushed(resources, data, monkeypatch, fast=True, **params)
    assert fast == slow
    return fast, list(paths)


rows_strategy = st.lists(st.dictionaries(st.sampled_from(KEYS), st.one_of(st.none(), TEXT), max_size=5),
                         min_size=1, max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(rows=rows_strategy, newline=st.sampled_from(["\n", "\r\n"]), blank=st.booleans(),
       spaced=st.booleans())
def test_all_string_ndjson_reads_the_same_on_both_paths(resources, monkeypatch, paths, rows, newline, blank,
                                                         spaced):
    lines = [json.dumps(r, ensure_ascii=spaced, separators=(", ", ": ") if spaced else (",", ":")) for r in rows]
    if blank:
        lines.insert(len(lines) // 2, "  ")
    data = (newline.join(lines) + newline).encode()
    result, ran = both(resources, data, monkeypatch, paths)
    if any(r for r in rows):  # an object with keys: Arrow read it, the row reader never ran
        assert result[0] == "rows" and ran == [], ran


PREAMBLE = st.lists(st.sampled_from(["# exported 2026-11-28", "not json", "", "  ", '{"a": "x"}', "[", "é 🙂"]),
                    max_size=4)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(rows=rows_strategy, preamble=PREAMBLE, ignore=st.integers(0, 5), newline=st.sampled_from(["\n", "\r\n", "\r"]),
       schema=st.one_of(st.none(), st.lists(st.sampled_from([*KEYS, "only in the schema"]), min_size=1, max_size=3,
                                            unique=True)),
       bom=st.booleans())
def test_lines_to_ignore_and_a_schema_read_the_same_on_both_paths(resources, monkeypatch, paths, rows, preamble,
                                                                   ignore, newline, schema, bom):
    """``linesToIgnore`` skips physical lines (LF, CRLF or a lone CR between the ignored ones), and ``schema``
    puts its columns first (one only in the schema stays empty), on the columnar path as in the row
    reader; a BOM before ignored lines is skipped with them."""
    lines = [*preamble, *(json.dumps(r, ensure_ascii=False) for r in rows)]
    data = ("\ufeff" * bom + newline.join(lines[:len(preamble)]) + newline * bool(preamble)
            + "\n".join(lines[len(preamble):]) + "\n").encode()
    params: dict[str, Any] = {"linesToIgnore": ignore}
    if schema:
        params["schema"] = schema
    result, ran = both(resources, data, monkeypatch, paths, **params)
    if ignore == len(preamble) and any(r for r in rows):  # only the preamble skipped, rows with keys: Arrow's
        assert result[0] == "rows" and ran == [], ran


@pytest.mark.parametrize(("data", "encoding", "columnar"), [
    (b'\xff skipped\n{"a": "1"}\n', "utf-8-sig", False),      # an ignored line that is not UTF-8: an error
    (b'skipped\n\xef\xbb\xbf{"a": "1"}\n', "utf-8-sig", False),  # a BOM after the ignored lines is no BOM
    (b'[\n{"a": "1"},\n{"a": "2"}\n]\n', "utf-8-sig", False),    # an array with lines ignored is NDJSON to the reader
    ('skipped é\n{"a": "é"}\n'.encode("cp1252"), "cp1252", True),
    ('skipped\r\n{"a": "1"}\n'.encode("utf-16"), "utf-16", True),
    (b'\xef\xbb\xbfskipped\n{"a": "1"}\n', "utf-8", True),     # a BOM in the ignored line goes with it
])
def test_lines_to_ignore_at_the_edges(resources, monkeypatch, paths, data, encoding, columnar):
    result, ran = both(resources, data, monkeypatch, paths, linesToIgnore=1, encoding=encoding)
    assert ran == ([] if columnar else ["rows"]) and (result[0] == "rows") == columnar, result


@pytest.mark.parametrize("data", [
    b'{"a": "1"}\n{"a": 2}\n',                      # numbers and booleans stored as they are written
    b'{"a": "1.50", "b": 1.50, "c": -0.0, "d": -12}\n',
    b'{"a": true, "b": false, "c": null}\n{"a": 0.000001, "b": 0}\n',
    b'{"a": "x\\" 1"}\n{"a": 7}\n',                # an escaped quote, but not on a number's line
    b'{"a": "x\\": 1", "b": 7}\n',                  # an escaped quote and a '": 1' inside a string
    b'{"a": ": 1 ", "b": 7}\n{"a":": true","b":false}\n',  # strings that open with ':' beside numbers
    b'[\n{"a": [": 1", ":2 "], "b": 7},\n{"a": "x", "b": 8}\n]\n',  # in an array (its line rewritten)
    b'{"k: ": 1, "{": 2, ": 3 ": 4}\n',                  # keys ending or starting so
])
def test_numbers_and_booleans_stored_as_written_take_the_columnar_path(resources, monkeypatch, paths, data):
    result, ran = both(resources, data, monkeypatch, paths)
    assert ran == [] and result[0] == "rows"


@pytest.mark.parametrize("data", [
    b'{"a": 1e5}\n',                                 # numbers whose stored text is not their own: 1E+5,
    b'{"a": -0}\n',                                  # 0,
    b'{"a": 0.0000001}\n',                           # 1E-7
    b'{"a": ' + b'9' * 101 + b'}\n',                # more than 100 characters
    b'{"a": {"b": "c"}, "n": 1}\n',                 # nested values, stored as compact JSON
    b'{"a": {"b": "c"}}\n',                          # a first block with nested values and no numbers
    b'{"a": ["x"]}\n',
    b'{"a": ["x", 1.50]}\n{"a": 2}\n',
    b'{"a": 1}\n{"a": {"b": 2.50, "c": [1e5]}}\n{"a": "\\u00e9", "b": ": {"}\n',
    b'{"a": 1, "b": ": {"}\n{"a": "x\\"", "b": {}}\n{"a": 3}\n',  # a string that looks like a nested value's start
    b'[\n{"a": "1"},\n{"a": 2e0}\n]\n',                # an array's items: 2e0 is stored 2E+0
    b'[{"a": {"b": "1"}, "c": "2"}, {"a": "3"}]',      # side by side, the first holding a nested object
    b'{"a": "\\ud83d\\ude42", "b": [1]}\n{"a": "x"}\n',  # an escaped surrogate pair on a rewritten line
    b'[{"a": [1, {"b": null}]}, {"a": 2}]',
    b'[\n  {\n    "a": {\n      "b": 1e-7\n    }\n  }\n]',
])
def test_lines_the_bytes_cannot_quote_are_written_as_the_row_reader_stores_them(resources, monkeypatch, paths,
                                                                                   data):
    """Each such line made a string-only line by the row reader's own conversion, on the columnar path."""
    result, ran = both(resources, data, monkeypatch, paths)
    assert ran == [] and result[0] == "rows"


@pytest.mark.parametrize("data", [
    b'{"a": 01}\n',                                  # not JSON: the row reader words it
    b'{"a": 1.}\n',
    b'{"a": tru}\n',
    b'{"a": -}\n',
    b'{"a": 1, "b": {"c": 01}}\n',                   # a nested value the row reader refuses
    b'{"a": {}}\n{"a": []}\n{"a": [1]}\n{"a": 3}\n',  # most lines to rewrite: the row reader is faster
    b'{"a": 1}\n{"a": 2}\n{"a": [NaN]}\n',          # NaN is not JSON: the row reader words it
    b'[\n{"a": 1},\n{"a": 2},\n{"a": [-Infinity]}\n]\n',
    b'[\n{"a": 1},\n{"a": 2},\n{"a": ' + b"[" * 100 + b"]" * 100 + b'}\n]\n',  # an item a level too deep
    b'{"a": 1, "b": "\\ud800"}\n{"a": [2]}\n',
    b'{"a": "1", "a": "2"}\n',                       # a key twice: the row reader keeps the last
    b'{"a":\n"1"}\n',                                # an object over two lines: not NDJSON
    b'{"a": "1"} {"a": "2"}\n',                      # two objects on one line
    b'{"a": "1"}\n[1]\n',
    b'{"a": "\\ud800"}\n',
    b'{"a": "1"}\n{"a": "2"\n',
])
def test_what_arrow_would_read_differently_goes_to_the_row_reader(resources, monkeypatch, paths, data):
    _result, ran = both(resources, data, monkeypatch, paths)
    assert ran == ["rows"]


@pytest.mark.parametrize(("head", "line"), [
    (b'{"a": "x", "b": "y"}\n', b'{"a": "x", "b": NaN}\n'),        # strings only: Arrow reads the bytes as they are
    (b'{"a": "x", "b": 1}\n', b'{"a": "x", "b": -Infinity}\n'),   # numbers quoted in the bytes first
    (b'{"a": "x", "b": 1}\n', b'{"a": "x", "b": [Infinity]}\n'),  # a nested value, written by the row reader's rules
    (b'{"a": "x", "b": 1}\n', b'{"a": "x", "c": NaN}\n'),         # a key the first block lacks
])
@pytest.mark.parametrize("where", ["first line", "past the first block"])
def test_nan_and_infinity_are_a_400_naming_the_line_on_both_paths(resources, monkeypatch, paths, head, line, where):
    """NaN, Infinity and -Infinity are not JSON: a JSON array and Append Rows refused them, NDJSON stored them as
    text. Now a 400 naming the line whichever path met it first, the first line or one Arrow reads after the
    block that decides the columns, and nothing is stored."""
    monkeypatch.setattr(ndjson_fast, "BLOCK", 4096)
    monkeypatch.setattr(ndjson_columns, "BLOCK", 4096)
    lines = 1 if where == "first line" else 4096 // len(head) + 10
    data = line if lines == 1 else head * lines + line + head
    word = line.split(b": ")[-1].strip(b"[]}\n").decode()
    before = resources["virtual_files"].inventory()
    result, _ran = both(resources, data, monkeypatch, paths)
    assert result == ("error", 400, f"platformFile: line {lines if lines == 1 else lines + 1}: malformed JSON "
                                    f"({word} is not a JSON number: JSON has no NaN or Infinity)"), result
    assert resources["virtual_files"].inventory() == before


def test_a_bom_under_plain_utf8_is_the_row_readers_call(resources, monkeypatch, paths):
    """The row reader drops it, as it does before a CSV's first line and a JSON array (it was a 400: "malformed
    JSON (Unexpected UTF-8 BOM …)"); after ignored lines it is no BOM (:func:`test_lines_to_ignore_at_the_edges`)."""
    result, ran = both(resources, b'\xef\xbb\xbf{"a": "1"}\n', monkeypatch, paths, encoding="utf-8")
    assert ran == ["rows"] and result == ("rows", ["a"], [{"a": "1"}], 1), result
    result, ran = both(resources, '\ufeff{"a": "1"}\n'.encode("utf-16-le"), monkeypatch, paths, encoding="utf-16-le")
    assert result == ("rows", ["a"], [{"a": "1"}], 1), result
    result, ran = both(resources, b'\xef\xbb\xbf{"a": "1"}\n', monkeypatch, paths)  # utf-8-sig: dropped
    assert ran == [] and result == ("rows", ["a"], [{"a": "1"}], 1)


@pytest.mark.parametrize(("encoding", "extra"), [("cp1252", "é€’"), ("latin-1", "é\xa0\x85"), ("utf-16", "é🙂\u2028"),
                                               ("shift_jis", "日本ｶﾅ")])
def test_ndjson_in_another_encoding_takes_the_columnar_path(resources, monkeypatch, paths, encoding, extra):
    """NDJSON in another encoding is read as UTF-8 on the columnar path (several blocks, so characters of two
    or four bytes fall between chunks), as the row reader reads it; a byte the encoding lacks is the row
    reader's to name, with its line."""
    monkeypatch.setattr(ndjson_fast, "BLOCK", 4096)
    monkeypatch.setattr(ndjson_columns, "BLOCK", 4096)
    values = [f"{i} {extra[i % len(extra)]} {extra * (i % 3)}" for i in range(2000)]
    rows = [{"n": str(i), "v": v, **({"w": None} if i % 7 else {"x": v[::-1]})} for i, v in enumerate(values)]
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode(encoding)
    result, ran = both(resources, data, monkeypatch, paths, encoding=encoding)
    assert ran == [] and result[0] == "rows" and result[3] == 2000
    if encoding == "cp1252":
        at = data.index(b"\n", len(data) // 2)
        result, ran = both(resources, data[:at] + b"\x81" + data[at:], monkeypatch, paths, encoding=encoding)
        line = data[:at].count(b"\n") + 1
        assert ran == ["rows"] and result[0] == "error"
        assert f"line {line}: the file is not valid cp1252" in result[2]


def test_a_json_array_in_another_encoding_takes_the_columnar_path(resources, monkeypatch, paths):
    """A JSON array is read in ``parameters.encoding`` as NDJSON is (it was read as UTF-8 whatever that said),
    converted to UTF-8 as it is read, on the columnar path too."""
    data = '[\n{"a": "é"},\n{"a": "€"}\n]\n'.encode("cp1252")
    result, ran = both(resources, data, monkeypatch, paths, encoding="cp1252")
    assert ran == [] and result == ("rows", ["a"], [{"a": "é"}, {"a": "€"}], 2)


def test_a_late_key_or_type_is_read_again_on_the_columnar_path_and_nothing_is_left(resources, monkeypatch, paths):
    monkeypatch.setattr(ndjson_fast, "BLOCK", 64)  # several Arrow blocks in a small file (probe and load)
    monkeypatch.setattr(ndjson_columns, "BLOCK", 64)
    head = b"".join(b'{"a": "%d"}\n' % i for i in range(40))
    before = resources["virtual_files"].inventory()
    typed = b"".join(b'{"a": %d}\n' % i for i in range(40))  # numbers from the first block: quoted
    result, ran = both(resources, typed + b'{"a": 01}\n', monkeypatch, paths)  # a late fault: the row reader's words
    assert ran == ["rows"] and result[0] == "error" and "line 41" in result[2]
    late = [(typed, tail) for tail in (b'{"a": 41}\n', b'{"a": 1e5}\n', b'{"a": -0}\n', b'{"a": {"b": [1]}}\n',
                                       b'{"a": "x\\" 1"}\n')]  # quoted from the first block on: odd lines rewritten
    late += [(head, tail) for tail in (b'{"a": 7e0}\n', b'{"a": ["7"]}\n', b'{"a": 7}\n', b'{"a": true}\n')]
    # a key the first block lacks: every key found (in the order each first appears), then read again
    late += [(head, b'{"a": "x", "b": "new"}\n'), (typed, b'{"a": 1, "b": "new"}\n'),
             (typed, b'{"a": 1, "b": {"new": 1}}\n'), (head, b'{"c": "1"}\n' * 3 + b'{"b": 2, "c": "2", "d": null}\n')]
    for first, tail in late:  # after a first block of strings: read again with the quoting pass
        result, ran = both(resources, first + tail, monkeypatch, paths)
        assert ran == [] and result[0] == "rows", tail
    assert result[1] == ["a", "c", "b", "d"]
    after = resources["virtual_files"].inventory()
    assert len(after) == len(before) + 2 * len(late)  # two pushes a case (none for the error), nothing left


def test_date_like_strings_stay_text_on_the_columnar_path(resources, monkeypatch, paths):
    """Arrow infers timestamps from such strings; the columnar path reads every column as text."""
    data = b'{"day": "2026-01-05", "at": "2026-01-05T10:00:00Z", "n": "007"}\n{"day": "2026-13-45"}\n'
    result, ran = both(resources, data, monkeypatch, paths)
    assert ran == []
    assert result == ("rows", ["day", "at", "n"], [
        {"day": "2026-01-05", "at": "2026-01-05T10:00:00Z", "n": "007"}, {"day": "2026-13-45"}], 2)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(lines=st.lists(st.sampled_from(["{}", '{"a": "x"}', " {}", "", " ", "\t", "\r", " \r \t", "x", "\r{}",
                                       '{"a":\r"x"}', '{} {}', '{"a":', '"x"}', "{} \t", "\x0c", "\ufeff{}"]),
                      max_size=30),
       last_newline=st.booleans(), size=st.integers(1, 12))
def test_the_line_audit_counts_non_blank_lines_across_any_cuts(lines, last_newline, size):
    """The audit's count is the lines that hold anything but spaces and tabs, a line ending at an LF or a CR
    (as the row reader's lines), and it tells whether each starts with ``{`` and ends with ``}``, however the
    reads fall."""
    data = "\n".join(lines).encode() + (b"\n" if last_newline and lines else b"")
    audit = ndjson_columns._LineAudit(Trickle(data, size))  # reads cut every `size` bytes
    buffer = bytearray(16)
    while audit.readinto(buffer):
        pass
    if size >= 3:  # a BOM starting the bytes is skipped, as Arrow skips it, when one read holds it (a block does)
        data = data.removeprefix(b"\xef\xbb\xbf")
    held = [line.strip(b" \t") for line in re.split(rb"[\r\n]", data) if line.strip(b" \t")]
    assert audit.lines == len(held)
    assert audit.objects == all(line.startswith(b"{") and line.endswith(b"}") for line in held)


@pytest.mark.parametrize("data", [
    b'{"a":\n"1"} {"a":"2"}\n',  # an object over two lines, two objects on the next: as many rows as lines
    b'{"a":"1"} {"a":\r\n"2"}\n',
    b'{"a":\r"1"}\n',  # a lone CR ends a line for the row reader, where Arrow reads a space
])
def test_a_line_that_is_not_one_object_after_the_first_block_is_the_row_readers_400(resources, monkeypatch, paths,
                                                                                     data):
    """The audit counted lines only, so faults past the first block that made up for each other (an object
    over two lines and two objects on one line), or a lone CR inside an object, loaded on the columnar path
    where the row reader refuses the file. Now every line must be one object there too."""
    monkeypatch.setattr(ndjson_fast, "BLOCK", 64)  # several Arrow blocks in a small file (probe and load)
    monkeypatch.setattr(ndjson_columns, "BLOCK", 64)
    before = resources["virtual_files"].inventory()
    result, ran = both(resources, b"".join(b'{"a": "%d"}\n' % i for i in range(40)) + data, monkeypatch, paths)
    assert ran == ["rows"] and result[:2] == ("error", 400) and "line 41: malformed JSON" in result[2], result
    assert len(resources["virtual_files"].inventory()) == len(before)


# -- JSON arrays laid out one object per line (connector_ops.etl.json_array_lines) -----------------
def array_text(rows: list[dict], newline: str, own_brackets: bool, spaced: bool, blank: bool) -> bytes:
    """``rows`` as a JSON array, one object per line; brackets on their own lines or beside the objects."""
    lines = [json.dumps(r, ensure_ascii=spaced, separators=(", ", ": ") if spaced else (",", ":")) for r in rows]
    body = ("  ," if spaced else ",").join(newline + ("  " + newline if blank and i == 1 else "") + line
                                           for i, line in enumerate(lines)).removeprefix(newline)
    return ("[" + newline + body + newline + "]" + newline if own_brackets else "[" + body + "]").encode()


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(rows=rows_strategy, newline=st.sampled_from(["\n", "\r\n"]), own_brackets=st.booleans(),
       spaced=st.booleans(), blank=st.booleans())
def test_a_json_array_one_object_per_line_reads_the_same_on_both_paths(resources, monkeypatch, paths, rows, newline,
                                                                       own_brackets, spaced, blank):
    data = array_text(rows, newline, own_brackets, spaced, blank)
    assert [{k: v for k, v in r.items()} for r in json.loads(data)] == rows  # the layout is a JSON array
    result, ran = both(resources, data, monkeypatch, paths)
    if any(r for r in rows):  # an object with keys: Arrow read it, the row reader never ran
        assert result[0] == "rows" and ran == [], ran


@pytest.mark.parametrize("data", [
    b'[\n{"a": "1"},\n{"a": "2"},\n]\n',               # a comma after the last item
    b'[\n,{"a": "1"}\n]\n',                             # a comma before the first
    b'[\n{"a": "1"},,\n{"a": "2"}\n]\n',                # two commas
    b'[\n{"a": "1"}\n{"a": "2"}\n]\n',                  # no comma between items
    b'[\n{"a": "1"}\n,{"a": "2"}\n]\n',                 # the comma at the start of the next line
    b'[\n  {\n    "a": "1"\n  },\n  {\n    "a": "x\\"\n y"\n  }\n]\n',  # pretty-printed, a break in a string
    b'[\n{"a": "1"},\n{"a": "2"}\n',                    # no closing bracket
    b'[\n{"a": "1"},\n{"a": "2"}\n]\n]\n',              # a bracket too many
    b'[\n{"a": "1"},\n{"a": "2"}\n] x\n',               # something after the array
    b'[\n{"a": "1"},\n["1"]\n]\n',                      # an item that is not an object
    b'[]\n',
    b' \xef\xbb\xbf[\n{"a": "1"}\n]\n',                 # a BOM after a blank (one first is dropped)
])
def test_arrays_laid_out_otherwise_go_to_the_row_reader(resources, monkeypatch, paths, data):
    _result, ran = both(resources, data, monkeypatch, paths)
    assert ran == ["rows"]


def test_an_array_longer_than_a_block_with_a_late_fault_leaves_nothing(resources, monkeypatch, paths):
    monkeypatch.setattr(ndjson_fast, "BLOCK", 64)  # several Arrow blocks in a small file (probe and load)
    monkeypatch.setattr(ndjson_columns, "BLOCK", 64)
    items = b",\n".join(b'{"a": "%d"}' % i for i in range(40))
    before = resources["virtual_files"].inventory()
    result, ran = both(resources, b"[\n" + items + b"\n]\n", monkeypatch, paths)
    assert ran == [] and result[0] == "rows" and result[3] == 40
    result, ran = both(resources, b"[\n" + items + b",\n]\n", monkeypatch, paths)
    assert ran == ["rows"] and result[0] == "error"
    assert len(resources["virtual_files"].inventory()) == len(before) + 2  # the two good pushes, nothing else



@pytest.mark.parametrize("data", [
    b"".join(b'{"a": "%d"}\n' % i for i in range(40)) + b'{"a": "f\xc3f"}\n',  # a lead byte cut short
    b"".join(b'{"a": "%d", "b": %d}\n' % (i, i) for i in range(40)) + b'{"a": "\xff", "b": 1}\n',  # quoted
    b"[\n" + b"".join(b'{"a": "%d"},\n' % i for i in range(40)) + b'{"a": "\xed\xa0\x80"}\n]\n',  # an array
], ids=["ndjson", "ndjson-quoted", "array"])
def test_a_byte_that_is_not_utf8_after_the_first_block_is_the_row_readers_400(resources, monkeypatch, paths, data):
    """Arrow's JSON reader does not check UTF-8, and the columnar path decoded only the first block: a bad
    byte further on was stored as it was (on SQLite a virtual file that Iterate and Pull then failed on, 500
    "Could not decode to UTF-8"). Now it is the row reader's 400 naming the line, and nothing is left."""
    monkeypatch.setattr(ndjson_fast, "BLOCK", 64)  # several Arrow blocks in a small file (probe and load)
    monkeypatch.setattr(ndjson_columns, "BLOCK", 64)
    before = resources["virtual_files"].inventory()
    result, ran = both(resources, data, monkeypatch, paths)
    assert ran == ["rows"] and result[:2] == ("error", 400)
    assert "not valid utf-8-sig" in result[2] or "not UTF-8" in result[2], result
    assert data.startswith(b"[") or "line 41:" in result[2]
    assert len(resources["virtual_files"].inventory()) == len(before)

@settings(max_examples=200, deadline=None, derandomize=True)
@given(rows=st.lists(st.dictionaries(st.sampled_from(KEYS), TEXT, max_size=3), min_size=1, max_size=8),
       newline=st.sampled_from(["\n", "\r\n"]), own_brackets=st.booleans(), spaced=st.booleans(),
       blank=st.booleans(), size=st.integers(1, 12))
def test_an_array_becomes_the_same_lines_however_the_reads_fall(rows, newline, own_brackets, spaced, blank, size):
    """The objects come out one per line, as they are, whatever sizes the reads underneath have (and wherever
    a read ends: after an object, a comma, a CR, blanks or an empty line)."""
    from connector_ops.etl.json_array_lines import ArrayLines

    data = array_text(rows, newline, own_brackets, spaced, blank)
    lines = ArrayLines(Trickle(data, size))
    out = b"".join(iter(lambda: lines.read(7), b""))
    assert [json.loads(line) for line in out.split(b"\n") if line.strip()] == rows


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(rows=rows_strategy, spaced=st.booleans())
def test_a_json_array_of_items_side_by_side_reads_the_same_on_both_paths(resources, monkeypatch, paths, rows,
                                                                          spaced):
    """``json.dumps(rows)``'s layout: split one item per line, unless a string holds a separator."""
    data = json.dumps(rows, ensure_ascii=spaced, separators=(", ", ": ") if spaced else (",", ":")).encode()
    result, ran = both(resources, data, monkeypatch, paths)
    if any(r for r in rows) and b"}," not in data.replace(b"}, {", b"").replace(b"},{", b"") and not any(
            "}," in (v or "") for r in rows for v in r.values()):
        assert result[0] == "rows" and ran == [], ran


@pytest.mark.parametrize("data", [
    b'[{"a": "x}, {y"}, {"a": "2"}]',                 # a separator inside a string: the row reader's
    b'[{"a": "1"} , {"a": "2"}]',                     # a separator spelled otherwise
    b'[{"a": "1"}{"a": "2"}]',                        # no comma
    b'[{"a": "1"}, {"a": "2"},]',                     # a comma after the last item
    b'[{"a": [{"b": "1"}, {"b": "2"}]}]',             # objects side by side inside an item
])
def test_items_side_by_side_the_split_cannot_vouch_for_go_to_the_row_reader(resources, monkeypatch, paths, data):
    _result, ran = both(resources, data, monkeypatch, paths)
    assert ran == ["rows"]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(rows=st.lists(st.dictionaries(st.sampled_from(KEYS), TEXT, max_size=3), min_size=1, max_size=8),
       spaced=st.booleans(), size=st.integers(1, 12))
def test_items_side_by_side_become_one_per_line_however_the_reads_fall(rows, spaced, size):
    from connector_ops.etl.json_array_lines import ArrayLines, ItemsSplit

    assume(not any("}," in (v or "") for r in rows for v in r.values()))
    data = json.dumps(rows, separators=(", ", ": ") if spaced else (",", ":")).encode()
    lines = ArrayLines(io.BufferedReader(ItemsSplit(Trickle(data, size), b"}, {" if spaced else b"},{"), 5))
    out = b"".join(iter(lambda: lines.read(7), b""))
    assert [json.loads(line) for line in out.split(b"\n") if line.strip()] == rows


def test_what_pull_writes_as_json_comes_back_on_the_columnar_path(resources, monkeypatch, paths):
    """Pull's JSON export (one object per line, a missing value left out) is pushed back column-wise."""
    monkeypatch.setattr(ndjson_fast, "FAST", True)
    rows = [{"id": str(i), "name": f"n{i}\n\"q\"", **({"note": "é"} if i % 3 else {})} for i in range(50)]
    source = resources["virtual_files"].create_from_dicts([rows])
    pulled = invoke("etl.pull", {"virtualFileId": source, "exportType": "json", "exportName": "rows.json"},
                    resources)["platformFile"]
    paths.clear()
    again = invoke("etl.push", {"platformFile": pulled}, resources)["virtualFileId"]
    assert paths == []  # Arrow read it, the row reader never ran
    assert resources["virtual_files"].summary(again, 100) == resources["virtual_files"].summary(source, 100)


def test_a_load_that_fails_mid_file_leaves_the_loader_ready_for_the_next(resources, monkeypatch, paths):
    """A load that fails early in a file of several MiB (a number after a first block of strings), read again
    at once with the quoting pass, three times, then a plain file: no load hangs or sees another's bytes.
    (The race this once lost, a drain beside Arrow's read-ahead thread, is forced in test_sqlite_loader.)"""
    import threading

    rows = b"".join(b'{"a": "%d", "b": "%s"}\n' % (i, b"x" * 40) for i in range(150_000))
    late = rows[:rows.index(b'\n', 40_000) + 1] + b'{"a": 7, "b": "y"}\n' + rows[rows.index(b'\n', 40_000) + 1:]
    outcome: list[Any] = []

    def pushes() -> None:
        for data in (late, late, late, rows):
            outcome.append(pushed(resources, data, monkeypatch, fast=True)[3])

    worker = threading.Thread(target=pushes, daemon=True)
    worker.start()
    worker.join(120)
    assert not worker.is_alive(), f"a load hung after {len(outcome)} pushes"
    assert outcome == [150_001] * 3 + [150_000] and paths == []


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(rows=st.lists(st.dictionaries(st.sampled_from(KEYS), st.one_of(  # mostly text: most take the columnar path
    TEXT, TEXT, TEXT, st.none(), st.integers(-99, 99), st.lists(TEXT, max_size=1)), min_size=1, max_size=3),
    min_size=20, max_size=60))
def test_keys_and_types_that_first_appear_in_later_blocks_read_the_same(resources, monkeypatch, paths, rows):
    """Small blocks, so that keys, numbers and nested values first appear after the first one: whatever the
    columnar path retries, the rows and their column order are the row reader's."""
    monkeypatch.setattr(ndjson_fast, "BLOCK", 128)
    monkeypatch.setattr(ndjson_columns, "BLOCK", 128)
    data = ("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n").encode()
    both(resources, data, monkeypatch, paths)
