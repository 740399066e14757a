"""Pretty-printed JSON arrays on the one-item-per-line paths (:mod:`connector_ops.etl.json_layouts`): dropping
a line break never changes what JSON reads — a line break put anywhere (in a string, a number, ``true``, a
key) is either refused or harmless — whatever the reads underneath; and Push gives the same rows on the
columnar path and through the row reader, both databases.
"""

from __future__ import annotations

import io
import json
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from connector_ops.etl.json_layouts import Joined, NotPretty, item_indentation, joined
from tests.test_etl_json_scalars import parsed
from tests.test_etl_push_ndjson_columnar import Trickle, both

SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
                   st.decimals(allow_nan=False, allow_infinity=False, places=2),
                   st.text(alphabet=st.sampled_from([*'ab :,{}[]"\\é\t', "\n"]), max_size=6))
VALUE = st.recursive(SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(st.sampled_from(["k", "l"]), inner, max_size=2)),
                     max_leaves=5)
ROWS = st.lists(st.dictionaries(st.sampled_from(["id", "name", "n", "a b"]), VALUE, min_size=1, max_size=4),
                min_size=1, max_size=5)
INDENT = st.sampled_from([1, 2, 4, "\t"])


def text_of(rows: list[dict], indent: Any) -> str:
    return json.dumps(rows, indent=indent, ensure_ascii=False, default=str)


@settings(max_examples=2000, deadline=None, derandomize=True)
@given(rows=ROWS, indent=INDENT, cuts=st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(["\n", "\r"]),
                                                          st.booleans()), max_size=3), crlf=st.booleans())
def test_dropping_line_breaks_never_changes_what_json_reads(rows, indent, cuts, crlf):
    text = text_of(rows, indent)
    if crlf:
        text = text.replace("\n", "\r\n")
    for cut, brk, near_quote in cuts:  # a line break or a CR anywhere: in a string, a number, a word …
        quotes = [i for i, c in enumerate(text) if c == '"']
        at = quotes[cut % len(quotes)] + 1 if near_quote and quotes else cut % (len(text) + 1)
        text = text[:at] + brk + text[at:]  # … and right after a quote, escaped or not, most of all
    data = text.encode()
    try:
        out = joined(data, ord(" "))
    except NotPretty:
        return
    assert b"\n" not in out and b"\r" not in out
    assert parsed(out) == parsed(data), (data, out)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(rows=ROWS, indent=INDENT, size=st.integers(1, 40), crlf=st.booleans())
def test_joined_whatever_the_reads(rows, indent, size, crlf):
    text = text_of(rows, indent)
    data = (text.replace("\n", "\r\n") if crlf else text).encode()
    try:
        expected = joined(data, ord(" "))
    except NotPretty:
        expected = None
    try:
        got = io.BufferedReader(Joined(Trickle(data, size)), 7).read()
    except NotPretty:
        got = None
    assert got == expected


def test_the_layout_is_told_from_the_head():
    assert item_indentation(b'[\n  {\n    "a": 1\n  }\n]') == b"  "
    assert item_indentation(b'\xef\xbb\xbf [\r\n\t{\r\n\t\t"a": 1') == b"\t"
    assert item_indentation(b'[\n{"a": 1},\n{"a": 2}\n]') is None  # one object per line
    assert item_indentation(b'[{"a": 1}, {"a": 2}]') is None  # side by side
    assert item_indentation(b'{"a": 1}\n') is None  # NDJSON


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(rows=st.lists(st.dictionaries(st.sampled_from(["id", "name", "n", "ok"]), st.one_of(
    st.none(), st.booleans(), st.integers(-999, 999), st.text(alphabet='ab :,{}[]é', max_size=5)),
    min_size=1, max_size=4), min_size=1, max_size=20), indent=INDENT, crlf=st.booleans())
def test_pretty_arrays_push_the_same_on_both_paths(resources, monkeypatch, paths, rows, indent, crlf):
    text = text_of(rows, indent)
    data = (text.replace("\n", "\r\n") if crlf else text).encode()
    result, ran = both(resources, data, monkeypatch, paths)
    # a string holding the items' separator splits an item: that file goes to the row reader, rightly
    assume(not any(isinstance(v, str) and "}," in v for r in rows for v in r.values()))
    assert result[0] == "rows" and ran == [], "a plain pretty-printed array did not take the columnar path"


def test_a_line_break_after_an_escaped_quote_is_inside_its_string():
    """Counting every quote would place a line break after an escaped quote (``"x\\"`` + break + `` y"``) between
    two strings, and join a broken file into one that reads; escaped quotes are not counted."""
    data = b'[\n  {\n    "a": "x\\"\n y", "b": "z\\" w"\n  }\n]'
    assert parsed(data)[0] == "bad"  # a raw line break inside a string
    try:
        out = joined(data, ord(" "))
    except NotPretty:
        return
    raise AssertionError(f"joined a broken file into {out!r}")


def test_escaped_quotes_are_told_from_real_ones():
    rows = [{"a": 'say "hi"', "b": "back\\slash\\", "c": '\\"', "d": 1}, {"a": "x"}]
    data = json.dumps(rows, indent=2).encode()
    assert json.loads(joined(data, ord(" "))) == rows
