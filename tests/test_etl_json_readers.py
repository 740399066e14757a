"""The JSON row reader: an array laid out one object per line is read line by line by ``json``, and gives
exactly what ``ijson``'s event parser gives — the same rows, or the same error — whatever the items hold
(numbers written every way, booleans, nested values, ``NaN``, escaped surrogates, a key twice, nesting at
the depth limit, items that are not objects) and wherever the layout breaks. The event parser is the
oracle: ``_json_array`` on the same bytes. Then NDJSON's lone surrogate, and Push end to end.
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from connector_ops import ConnectorError, invoke
from connector_ops.etl import json_readers
from connector_ops.etl.json_array_lines import LAYOUT_PEEK
from connector_ops.kernel.errors import InvalidInput
from connector_ops.kernel.limits import MAX_DEPTH

STRING = st.text(alphabet=st.sampled_from([*'ab ,"\\/{}[]:é🙂', "\u2028", "\t", "\n"]), max_size=6).map(
    lambda text: json.dumps(text, ensure_ascii=False))
NUMBER = st.sampled_from(["0", "-0", "7", "-12", "1.50", "-0.0", "1e5", "1E+5", "2.5e-3", "0.0000001", "1E400",
                          "12345678901234567890123", "3.14159265358979323846264338327950288"])
ODD = st.sampled_from(["NaN", "Infinity", "-Infinity", '"\\ud800"', '"x\\udc00y"', '"\\ud83d\\ude00"',
                       '"\\u00e9"', "01", "1.", '"tab\tin"', "tru", '"\\u0000"'])
SCALAR = st.one_of(STRING, NUMBER, st.sampled_from(["true", "false", "null"]))
KEYS = st.sampled_from(['"id"', '"name"', '"a b"', '"é"', '"x\\"y"', '""'])


def _value(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.lists(children, max_size=3).map(lambda xs: "[" + ",".join(xs) + "]"),
                     st.lists(st.tuples(KEYS, children), max_size=3).map(
                         lambda kv: "{" + ",".join(f"{k}:{v}" for k, v in kv) + "}"))


def _object(values: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.lists(st.tuples(KEYS, values), max_size=4).map(
        lambda kv: "{" + ", ".join(f"{k}: {v}" for k, v in kv) + "}")


PLAIN = _object(st.recursive(SCALAR, _value, max_leaves=6))
ANY = _object(st.recursive(st.one_of(SCALAR, ODD), _value, max_leaves=6))
ITEM = st.one_of(ANY, ANY, ANY, SCALAR, st.just("[]"))


def nested(levels: int) -> str:
    """An item whose innermost container is ``levels`` deep (the item itself is level 1)."""
    return '{"a": ' + "[" * (levels - 1) + "]" * (levels - 1) + "}"


def read_by_lines(data: bytes) -> tuple[Any, int]:
    """What read_json gives for ``data``, and how often it had to reopen the file (the event parser ran)."""
    opened = 0

    def reopen() -> Any:
        nonlocal opened
        opened += 1
        return contextlib.nullcontext(io.BytesIO(data))

    return outcome(lambda: json_readers.read_json(io.BytesIO(data), lines_to_ignore=0, encoding="utf-8",
                                                  reopen=reopen)), opened


def outcome(batches: Any) -> Any:
    try:
        return ("rows", [row for batch in batches() for row in batch])
    except InvalidInput as exc:
        return ("error", exc.field, exc.problem)


def by_events(data: bytes) -> Any:
    return outcome(lambda: json_readers._json_array(io.BytesIO(data)))


def layout(items: list[str], newline: str, own_brackets: bool, indent: str) -> bytes:
    """One item per line, or (``newline`` a separator itself, ``", "`` or ``","``) side by side on one line, or
    (``"pretty"``) each object's pairs on lines of their own, indented."""
    if newline in (", ", ","):
        return ("[" + newline.join(items) + "]\n").encode()
    if newline == "pretty":
        def pretty(item: str) -> str:
            if item.startswith("{") and item.endswith("}"):
                item = "{\n    " + item[1:-1].replace(", ", ",\n    ") + "\n  }"
            return "  " + item
        return ("[\n" + ",\n".join(map(pretty, items)) + "\n]\n").encode()
    body = ("," + newline).join(indent + item for item in items)
    text = ("[" + newline + body + newline + "]" if own_brackets else "[" + body + "]") + newline
    return text.encode()


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(items=st.lists(ITEM, max_size=12), newline=st.sampled_from(["\n", "\r\n", ", ", ",", "pretty"]),
       own_brackets=st.booleans(), indent=st.sampled_from(["", "  "]), batch=st.integers(1, 4),
       fault=st.one_of(st.none(), st.integers(0, 12)),
       fault_kind=st.sampled_from(["two on a line", "over two lines", "no comma", "trailing comma", "after"]))
def test_an_array_read_by_lines_gives_what_the_event_parser_gives(monkeypatch, items, newline, own_brackets, indent,
                                                                   batch, fault, fault_kind):
    monkeypatch.setattr(json_readers, "BATCH", batch)  # batches handed on before a late fault: they are skipped
    data = layout(items, newline, own_brackets, indent)
    if fault is not None and items:
        at = min(fault, len(items) - 1)
        broken = list(items)
        if fault_kind == "two on a line" and at + 1 < len(items):
            broken[at:at + 2] = [broken[at] + ", " + broken[at + 1]]
        elif fault_kind == "over two lines":
            broken[at] = broken[at].replace(": ", ":" + newline, 1)
        data = layout(broken, newline, own_brackets, indent)
        if fault_kind == "no comma":
            data = data.replace(("," + newline).encode(), newline.encode(), 1)
        elif fault_kind == "trailing comma":
            data = data.rstrip()[:-1] + b"," + newline.encode() + b"]" + newline.encode()
        elif fault_kind == "after":
            data += b"{}" + newline.encode()
    assert read_by_lines(data)[0] == by_events(data)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(items=st.lists(PLAIN, min_size=1, max_size=12), newline=st.sampled_from(["\n", "\r\n", ", ", ",", "pretty"]),
       indent=st.sampled_from(["", "  "]))
def test_plain_objects_one_per_line_are_read_by_lines_alone(items, newline, indent):
    """Also side by side on one line (json.dump's layout) as long as no string holds a separator, and
    pretty-printed as long as none holds an escaped quote either."""
    assume(newline in ("\n", "\r\n") or not any("}," in item for item in items))
    assume(newline != "pretty" or not any('\\"' in item or "\n" in item for item in items))
    data = layout(items, newline, True, indent)
    got, opened = read_by_lines(data)
    assert got == by_events(data) and got[0] == "rows"
    assert opened == 0, "the event parser ran"


@pytest.mark.parametrize("levels", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 3000])
def test_nesting_at_the_limit_reads_the_same(levels):
    data = layout(['{"a": "1"}', nested(levels), '{"a": "3"}'], "\n", True, "")
    got, _opened = read_by_lines(data)
    assert got == by_events(data)
    assert (got[0] == "rows") == (levels <= MAX_DEPTH)


@pytest.mark.parametrize("levels", [MAX_DEPTH, MAX_DEPTH + 1, MAX_DEPTH + 2])
@pytest.mark.parametrize("in_strings", [0, 200], ids=["bare", "brackets-in-strings"])
def test_an_ndjson_line_at_the_limit_is_judged_by_its_nesting_not_its_brackets(levels, in_strings):
    """A line is walked only when it has more brackets than the limit allows levels; brackets inside strings
    make it walked, never refused (NDJSON's row object is a level of its own: one more than an array item)."""
    line = nested(levels)[:-1] + ', "s": "' + "[{" * in_strings + '"}'
    data = ('{"a": "1"}\n' + line + "\n").encode()
    try:
        got = [row for batch in json_readers.read_json(io.BytesIO(data), lines_to_ignore=0, encoding="utf-8")
               for row in batch]
    except InvalidInput as exc:
        assert levels > MAX_DEPTH + 1 and "line 2: a[0]" in str(exc)
        assert str(exc).endswith(f"nested deeper than {MAX_DEPTH + 1} levels")
    else:
        assert levels <= MAX_DEPTH + 1 and got[1]["s"] == "[{" * in_strings


def test_numbers_keep_their_text_and_a_late_fault_leaves_the_rows_handed_on_to_the_event_parser(monkeypatch):
    monkeypatch.setattr(json_readers, "BATCH", 2)
    items = ['{"n": ' + str(i) + ', "x": 1.50, "b": true, "l": [1, 2.0]}' for i in range(7)]
    items[5] = '{"n": 5, "x":\n 1.50, "b": true, "l": [1, 2.0]}'  # an object over two lines, after two batches
    data = layout(items, "\n", True, "")
    got, opened = read_by_lines(data)
    assert opened == 1 and got == by_events(data)
    assert [r["n"] for r in got[1]] == [str(i) for i in range(7)]
    assert got[1][0] == {"n": "0", "x": "1.50", "b": "true", "l": "[1,2.0]"}


def test_an_ndjson_line_with_half_a_surrogate_pair_is_a_400_naming_it():
    data = b'{"a": "ok \\ud83d\\ude00"}\n{"a": "x\\ud800y"}\n'
    got = outcome(lambda: json_readers.read_json(io.BytesIO(data), lines_to_ignore=0, encoding="utf-8"))
    assert got == ("error", "platformFile",
                   "line 2: a: holds \\ud800, half of a UTF-16 surrogate pair without its other half, "
                   "which is not a character")


@pytest.mark.parametrize("name", ["rows.json", "rows.ndjson"])
def test_typed_json_pushes_the_same_whichever_way_it_is_written(resources, name):
    rows = [{"id": i, "price": 9.5 + i, "exact": "1.50", "ok": i % 2 == 0, "tags": ["a", i], "none": None}
            for i in range(25)]
    lines = [json.dumps(r).replace('"exact": "1.50"', '"exact": 1.50') for r in rows]
    data = ("[\n" + ",\n".join(lines) + "\n]\n" if name.endswith(".json") else "\n".join(lines) + "\n").encode()
    pf = resources["platform_files"].add_bytes(data, name).to_json()
    vf = invoke("etl.push", {"platformFile": pf}, resources)["virtualFileId"]
    got = invoke("etl.iterate", {"content": vf, "maxBatchSize": 100}, resources)["content"]
    assert got[3] == {"id": "3", "price": "12.5", "exact": "1.50", "ok": "false", "tags": '["a",3]'}
    assert len(got) == 25


@pytest.mark.parametrize("name", ["rows.json", "rows.ndjson"])
def test_a_number_is_written_as_decimal_writes_it(resources, name):
    """The README's examples, in both layouts (and so through whichever reader takes each)."""
    written = {"1e5": "1E+5", "0.0000001": "1E-7", "12e-1": "1.2", "-0": "0", "1.50": "1.50", "-0.0": "-0.0",
               "12345678901234567890123": "12345678901234567890123"}
    items = [f'{{"x": {number}}}' for number in written]
    data = ("[\n" + ",\n".join(items) + "\n]\n" if name.endswith(".json") else "\n".join(items) + "\n").encode()
    pf = resources["platform_files"].add_bytes(data, name).to_json()
    vf = invoke("etl.push", {"platformFile": pf}, resources)["virtualFileId"]
    got = invoke("etl.iterate", {"content": vf, "maxBatchSize": 100}, resources)["content"]
    assert [r["x"] for r in got] == list(written.values())


def test_push_refuses_half_a_surrogate_pair_in_ndjson_and_reads_arrays_as_before(resources):
    pf = resources["platform_files"].add_bytes(b'{"a": "x\\udc00"}\n', "rows.ndjson").to_json()
    with pytest.raises(ConnectorError) as caught:
        invoke("etl.push", {"platformFile": pf}, resources)
    assert caught.value.status == 400 and "\\udc00, half of a UTF-16 surrogate pair" in caught.value.message
    pf = resources["platform_files"].add_bytes(b'[\n{"a": "x\\ud800y"},\n{"a": "\\ud83d\\ude00"}\n]\n',
                                               "rows.json").to_json()
    vf = invoke("etl.push", {"platformFile": pf}, resources)["virtualFileId"]
    got = invoke("etl.iterate", {"content": vf, "maxBatchSize": 10}, resources)["content"]
    assert got == [{"a": "x?y"}, {"a": "\U0001f600"}]  # yajl's reading: a lone half becomes "?"


@pytest.mark.parametrize("size", ["small", "past the layout probe"])
def test_a_lone_low_half_in_an_array_becomes_a_question_mark_as_a_high_one_does(resources, size):
    """A lone LOW surrogate's escape in a pure-ASCII array was a 400 "the file is not valid UTF-8" (yajl writes it
    out as bytes that are no UTF-8), where a lone high one becomes ``?``. Now both do, in a value, a key, a nested
    value, and after a whole pair; an escaped backslash before ``udc00`` is text. Both databases; a large file
    too (read by lines, then by the event parser from the item that holds it)."""
    head = b'[\n' + (b'{"a": "x", "k": "v"},\n' * (LAYOUT_PEEK // 10 if size != "small" else 1))
    items = [
        b'{"a": "x\\udc00y", "\\uDFFF": "k"}',
        b'{"a": {"b": ["\\udc00", "\\ud800"]}}',
        b'{"a": "\\ud83d\\ude00\\udfff", "k": "\\\\udc00"}',
    ]
    pf = resources["platform_files"].add_bytes(head + b",\n".join(items) + b"\n]\n", "rows.json").to_json()
    vf = invoke("etl.push", {"platformFile": pf}, resources)["virtualFileId"]
    got = invoke("etl.iterate", {"content": vf, "maxBatchSize": 10**7}, resources)["content"]
    assert got[-3:] == [{"a": "x?y", "?": "k"}, {"a": '{"b":["?","?"]}'}, {"a": "\U0001f600?", "k": "\\udc00"}]
    assert len(got) == head.count(b"\n") - 1 + 3


@pytest.mark.parametrize(("action", "payload", "field"), [
    ("etl.append_rows", {"rows": [{"virtualFileId": "vf", "content": {"a": "x\ud800"}}]}, "rows[0].content.a"),
    ("etl.query", {"virtualFileId": "vf", "query": {"a": "\udfff"}}, "query.a"),
    ("etl.query", {"virtualFileId": "vf", "query": {"\ud800b": "1"}}, "query"),
])
def test_half_a_surrogate_pair_in_any_payload_is_a_400_naming_the_field(resources, action, payload, field):
    with pytest.raises(ConnectorError) as caught:
        invoke(action, payload, resources)
    assert caught.value.status == 400
    assert caught.value.message.startswith(f"{field}: ") or f"{field}: a key holds" in caught.value.message
    assert "half of a UTF-16 surrogate pair without its other half" in caught.value.message


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(batches=st.lists(st.lists(st.one_of(
    st.just({"a": "1", "b": "2"}), st.just({"b": "x", "a": None}), st.just({"a": "", "b": "y"}),
    st.just({"a": "1"}), st.just({"c": "3", "a": "4"}), st.just({"a": "5", "b": "6", "c": "7"})),
    min_size=1, max_size=5), min_size=1, max_size=4))
def test_batches_of_dicts_are_stored_as_row_by_row(resources, batches):
    """The store aligns a batch whose rows share the first one's keys in one go, any other row by row: the
    columns come in the order their keys first appear, a key a row lacks is a missing value."""
    columns = list(dict.fromkeys(k for batch in batches for row in batch for k in row))
    expected = [{k: row[k] for k in columns if row.get(k) is not None} for batch in batches for row in batch]
    store = resources["virtual_files"]
    vf = store.create_from_dicts(batches)
    count, names, first = store.summary(vf, 100)
    assert (count, names, first) == (len(expected), columns, expected)
    store.drop(vf)
