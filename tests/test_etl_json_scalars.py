"""Numbers and booleans quoted in the bytes so that NDJSON with them takes the columnar path
(:mod:`connector_ops.etl.json_scalars`): a line comes out either refused (the row reader reads the file) or
as JSON that holds, in every top-level value that is now text, exactly the text the row reader stores for
the original value, and that is valid JSON exactly when the original was. Then Push end to end: the same
rows on the columnar path and through the row reader, both databases.
"""

from __future__ import annotations

import io
import json
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connector_ops.etl.json_readers import stored_line
from connector_ops.etl.json_scalars import NotPlainScalars, ScalarsAsText, scalars_quoted
from connector_ops.etl.readers import cell_text
from connector_ops.kernel.errors import InvalidInput
from tests.test_etl_push_ndjson_columnar import Trickle, both

NUMBERS = ["0", "7", "-12", "1.50", "-0.0", "0.000001", "0.0000001", "-0", "1e5", "2.5E-3", "01", "1.", ".5",
           "-", "1.2.3", "1-2", "--1", "9" * 100, "9" * 4301, "3.14159265358979323846264338327950288"]
WORDS = ["true", "false", "null", "tru", "falsey", "nul", "NaN", "Infinity"]
STRINGS = ['"x"', '""', '"a\\": 1, \\"b\\": 2"', '"x\\": 1 "', '"x\\":true, y"', '"say \\"7\\""', '"\\\\"',
           '"é 🙂"', '"1"', '"true"', '"\\u0022: 3"', '": 1 "', '":true,"', '"\\\\": 2 "']
NESTED = ['{"b": 1}', '[1, 2.50, true]', '{}', "[]"]
GOOD = ["0", "7", "-12", "1.50", "-0.0", "0.000001", "true", "false", "null", '"x"', '"1"']
VALUE = st.one_of(st.sampled_from(GOOD), st.sampled_from(NUMBERS + WORDS + STRINGS + NESTED))
KEY = st.sampled_from(['"a"', '"b"', '"a b"', '"é"', '"k\\"q"', '""',
                      '":1"', '"k:"', '"k: "', '"a,"', '"{"', '"["', '": 1 "', '":true "'])  # quotes to count
SPACE = st.sampled_from(["", " ", "  ", "\t"])


@st.composite
def lines(draw: Any) -> str:
    pairs = draw(st.lists(st.tuples(KEY, SPACE, VALUE, SPACE), max_size=3))
    body = ",".join(f"{k}:{before}{v}{after}" for k, before, v, after in pairs)
    return draw(st.sampled_from(["{%s}", "{ %s }", "{%s", "%s}", "[%s]"])) % body


def parsed(line: str | bytes) -> Any:
    try:
        return ("ok", json.loads(line, parse_float=Decimal))
    except ValueError:
        return ("bad", None)


@pytest.mark.parametrize("rewrite", [None, stored_line], ids=["refused", "rewritten"])
@settings(max_examples=3000, deadline=None, derandomize=True)
@given(line=lines(), newline=st.sampled_from(["\n", "\r\n", ""]))
def test_quoted_lines_say_what_the_row_reader_stores(rewrite, line, newline):
    """One line at a time: a chunk of several is refused as a whole if any of its lines is (without
    ``rewrite``); with the row reader's ``rewrite``, a line it would refuse is refused, and any other comes out
    quoted or rewritten, holding the stored text either way."""
    try:
        quoted = scalars_quoted((line + newline).encode(), rewrite).decode()
    except (NotPlainScalars, InvalidInput):
        return
    assert quoted.endswith(newline)
    (was, original), (now, text) = parsed(line), parsed(quoted)
    assert was == now, (line, quoted)  # quoting never breaks a line, nor makes a broken one JSON
    if now == "ok" and isinstance(original, dict):
        assert list(text) == list(original)
        for key, value in text.items():
            if value is None or isinstance(value, str):  # what Arrow reads: it must be the stored text
                assert value == cell_text(original[key]), (line, key)


def _each_line(data: bytes, rewrite: Any) -> bytes | None:
    try:
        return b"".join(scalars_quoted(line, rewrite) for line in data.splitlines(keepends=True))
    except (NotPlainScalars, InvalidInput):
        return None


@pytest.mark.parametrize("rewrite", [None, stored_line], ids=["refused", "rewritten"])
@settings(max_examples=300, deadline=None, derandomize=True)
@given(rows=st.lists(lines(), min_size=1, max_size=6), size=st.integers(1, 40))
def test_whole_lines_are_quoted_however_the_reads_fall(rewrite, rows, size):
    """Whatever the reads, the lines come out as each would alone: quoted, rewritten in place among the
    others, or (any one refused) refused."""
    data = ("\n".join(rows) + "\n").encode()
    expected = _each_line(data, rewrite)
    try:
        assert scalars_quoted(data, rewrite) == expected  # all the lines at once
    except (NotPlainScalars, InvalidInput):
        assert expected is None

    try:
        got = io.BufferedReader(ScalarsAsText(Trickle(data, size), rewrite), 7).read()
    except (NotPlainScalars, InvalidInput):
        got = None
    assert got == expected


class Bare(str):
    """A number's text, written into the JSON as it is."""


STORED_OTHERWISE = ["1e5", "-0", "2.5E-3", "0.0000001"]
NUMBER_TEXTS = ["1.50", "-0.0", "0.000001", "12.25", *STORED_OTHERWISE]
SCALARS = st.one_of(st.none(), st.text(alphabet='ab "\\:,1é', max_size=5), st.booleans(),
                    st.integers(-10**30, 10**30), st.sampled_from(NUMBER_TEXTS).map(Bare))
TYPED = st.one_of(SCALARS, st.lists(SCALARS, max_size=2), st.dictionaries(st.sampled_from(["x", "y"]), SCALARS,
                                                                          max_size=2))


def typed_json(value: Any) -> str:
    if isinstance(value, Bare):
        return value
    if isinstance(value, list):
        return "[" + ", ".join(map(typed_json, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {typed_json(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False)


def typed_line(row: dict[str, Any]) -> str:
    return typed_json(row)


def _texts(value: Any) -> list[str]:
    if isinstance(value, list | dict):
        return [t for v in (value.values() if isinstance(value, dict) else value) for t in _texts(v)]
    return [value] if isinstance(value, str) and not isinstance(value, Bare) else []


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(rows=st.lists(st.dictionaries(st.sampled_from(["id", "name", "n", "ok"]), TYPED, min_size=1, max_size=4),
                     min_size=1, max_size=20), array=st.booleans())
def test_typed_rows_push_the_same_on_both_paths(resources, monkeypatch, paths, rows, array):
    """Numbers, booleans, nested values: quoted where the bytes allow, the other lines written as the row
    reader stores them; either way the rows the row reader makes, on the columnar path."""
    lines_ = [typed_line(r) for r in rows]
    text = ("[\n" + ",\n".join(lines_) + "\n]\n") if array else "\n".join(lines_) + "\n"
    result, ran = both(resources, text.encode(), monkeypatch, paths)
    plain = not any('"' in t or "\\" in t for r in rows for v in r.values() for t in _texts(v))
    typed = any(not isinstance(v, str | type(None)) or isinstance(v, Bare) for r in rows for v in r.values())
    rewritten = sum(any(isinstance(v, list | dict) or (isinstance(v, Bare) and v in STORED_OTHERWISE)
                        for v in r.values()) for r in rows)
    if plain and typed and 2 * rewritten <= len(rows):  # more: the row reader's, faster then
        assert result[0] == "rows" and ran == [], "typed rows did not take the columnar path"


@pytest.mark.parametrize("data", [b"", b"\n", b'{"a": "x"}', b'{"a": 1}', b"[1, 2]\n"])
def test_edges(data):
    assert io.BufferedReader(ScalarsAsText(io.BytesIO(data))).read() == scalars_quoted(data)


def test_a_line_too_long_to_hold_is_the_row_readers(monkeypatch):
    monkeypatch.setattr(ScalarsAsText, "longest", 1 << 16)  # a line waits whole: so much and no more
    stream = io.BufferedReader(ScalarsAsText(io.BytesIO(b'{"a": 1}\n{"a": "' + b"x" * (1 << 17) + b'"}\n')), 8)
    with pytest.raises(NotPlainScalars):
        stream.read()


@pytest.mark.parametrize("lines", [b'": 1 "\n{"a": 2}\n', b'{"a": 2}\n": 1 "\n', b'{"a": 2}\n[": 1", ":true "]\n'])
def test_a_string_first_on_its_line_is_left_alone(lines):
    """Not an object (the row reader refuses such a line), but a string that opens with ``:`` stays one."""
    assert scalars_quoted(lines) == lines.replace(b'"a": 2', b'"a": "2"')


def test_quotes_are_counted_escaped_ones_aside():
    """A key ending in a backslash (``"k\\\\"``) ends at its quote; a ``":`` after an escaped quote, or opening a
    string, is inside one and is left alone."""
    line = b'{"k\\\\": 1, "a": "x\\": 2", "b": ": 3 "}\n'
    assert scalars_quoted(line) == line.replace(b": 1,", b': "1",')


@pytest.mark.parametrize("array", [False, True])
def test_numbers_inside_nested_values_keep_their_digits(resources, monkeypatch, paths, array):
    """A nested object or array is stored as compact JSON whose numbers are written as a top-level number is
    (``2.50``, 20 digits, ``1E+400``), not through ``float`` (``2.5``, 17 digits, ``Infinity``)."""
    line = ('{"a": [2.50, 0.1000000000000000055511151231257827, 1e400, 12345678901234567890.5, -0.0, 7],'
            ' "b": {"k\\"": {"x": 1.10}, "s": "é"}, "c": 2.50}')
    result, _ = both(resources, (f"[{line}]" if array else line).encode(), monkeypatch, paths)
    assert result[2] == [{"a": "[2.50,0.1000000000000000055511151231257827,1E+400,12345678901234567890.5,-0.0,7]",
                          "b": '{"k\\"":{"x":1.10},"s":"é"}', "c": "2.50"}]
