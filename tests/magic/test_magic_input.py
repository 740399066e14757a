"""The magics' input language: ``{{expr}}`` substitution in and out of strings, JSON and YAML parsing."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from connector_ops.kernel.platform_file import PlatformFile
from connector_ops.magic import split_line
from connector_ops.magic_input import InputError, parse, read_input, substitute

NS = {
    "vf": "abc123",
    "n": 5,
    "quote": 'say "hi" \\ bye',
    "apostrophe": "O'Brien",
    "pf": {"name": "a.csv", "link": "http://127.0.0.1:1/files/x", "size": 3},
    "out": {"virtualFileId": "vf-9", "rows": [{"city": "Paris"}]},
    "nothing": None,
    "flag": True,
}


def test_placeholder_inside_a_string_is_text_and_outside_is_json() -> None:
    text = '{"virtualFileId": "{{vf}}", "maxBatchSize": {{n}}, "platformFile": {{pf}}, "x": {{nothing}}}'
    assert read_input(text, NS) == {"virtualFileId": "abc123", "maxBatchSize": 5, "platformFile": NS["pf"], "x": None}


def test_text_inside_strings_is_escaped_for_each_quote_kind() -> None:
    assert read_input('{"a": "<{{quote}}>"}', NS) == {"a": '<say "hi" \\ bye>'}
    assert read_input("{a: '<{{apostrophe}}>'}", NS) == {"a": "<O'Brien>"}
    assert read_input('{"a": "n={{n}}", "b": "{{flag}}"}', NS) == {"a": "n=5", "b": "true"}
    assert read_input('{"a": "{{pf}}"}', NS) == {"a": json.dumps(NS["pf"])}  # a dict inside a string: its JSON


def test_paths_and_dates_inside_strings_are_their_text() -> None:
    ns = {"day": dt.date(2024, 1, 1), "path": Path("/tmp/x y"), "n": np.int64(7)}
    assert read_input('{"a": "report-{{day}}.csv", "b": "{{path}}-{{n}}.csv"}', ns) == {
        "a": "report-2024-01-01.csv", "b": "/tmp/x y-7.csv"}
    assert read_input("{a: 'report-{{day}}.csv'}", ns) == {"a": "report-2024-01-01.csv"}


def test_expressions_reach_into_values() -> None:
    text = '{"id": "{{out.virtualFileId}}", "city": "{{ out.rows[0][\'city\'] }}", "up": "{{ vf | upper }}"}'
    assert read_input(text, NS) == {"id": "vf-9", "city": "Paris", "up": "ABC123"}


def test_yaml_block_with_placeholders_comments_and_apostrophes() -> None:
    body = """
    # the customer's file (an apostrophe in a comment)
    content: {{out.rows}}
    name: O'Brien's report {{n}}
    id: '{{vf}}'
    maxBatchSize: {{n}}
    """
    assert read_input(body, NS) == {
        "content": [{"city": "Paris"}], "name": "O'Brien's report 5", "id": "abc123", "maxBatchSize": 5,
    }


def test_yaml_flow_and_empty_input() -> None:
    assert parse("{virtualFileId: abc, query: {city: Paris}}") == {"virtualFileId": "abc", "query": {"city": "Paris"}}
    assert parse("   ") == {}


def test_yaml_times_stay_text_and_yaml_1_1_otherwise_as_documented() -> None:
    """Base-60 numbers (``17:45`` was 1065) and ``=`` (a load error) are YAML 1.1 only; the rest of YAML 1.1 is
    what docs/notebooks.md says it is."""
    text = "{a: 17:45, b: 1:30:00, c: 190:20:30, d: -1:30, e: 23:59.5, f: 09:30, g: =, h: 2024-01-01 05:06:07}"
    assert parse(text) == {"a": "17:45", "b": "1:30:00", "c": "190:20:30", "d": "-1:30", "e": "23:59.5",
                           "f": "09:30", "g": "=", "h": "2024-01-01 05:06:07"}
    assert parse("{a: yes, b: off, c: 0755, d: 0x1f, e: 1_000, f: 1.50, g: y, h: 12}") == {
        "a": True, "b": False, "c": 493, "d": 31, "e": 1000, "f": Decimal("1.50"), "g": "y", "h": 12}


def test_python_values_become_json() -> None:
    ns = {
        "model": PlatformFile(name="a.csv", link="http://h/x", content_type="text/csv"),
        "frame": pd.DataFrame({"a": [1, 2], "b": ["x", None]}),
        "series": pd.Series([1.5, 2.5]),
        "scalar": np.int64(7),
        "array": np.array([1, 2]),
        "path": Path("/tmp/x"),
        "day": dt.date(2026, 1, 2),
    }
    text = ('{"m": {{model}}, "f": {{frame}}, "s": {{series}}, "i": {{scalar}}, "a": {{array}}, '
            '"p": {{path}}, "d": {{day}}}')
    assert read_input(text, ns) == {
        "m": {"id": None, "name": "a.csv", "contentType": "text/csv", "link": "http://h/x", "size": None,
              "lastModified": None},
        "f": [{"a": 1, "b": "x"}, {"a": 2, "b": None}],
        "s": [1.5, 2.5], "i": 7, "a": [1, 2], "p": "/tmp/x", "d": "2026-01-02",
    }


def test_frames_keep_every_digit_and_missing_values_are_null() -> None:
    frame = pd.DataFrame({"price": [0.1 + 0.2, 123456789.123456, np.nan], "day": pd.to_datetime(
        ["2024-01-02", "2024-01-03 04:05:06", None], format="mixed"), "n": [1, 2, 3]})
    series = pd.Series([1 / 3, np.inf])
    assert read_input('{"f": {{frame}}, "s": {{series}}}', {"frame": frame, "series": series}) == {
        "f": [{"price": Decimal("0.30000000000000004"), "day": "2024-01-02T00:00:00", "n": 1},
              {"price": Decimal("123456789.123456"), "day": "2024-01-03T04:05:06", "n": 2},
              {"price": None, "day": None, "n": 3}],
        "s": [Decimal(repr(1 / 3)), None],  # read back from the JSON text, a number's digits as they are written
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": "{{missing}}"}', "{{missing}}: 'missing' is undefined"),
        ('{"a": {{out.nope}}}', "{{out.nope}}: 'dict object' has no attribute 'nope'"),
        ('{"a": {{ 1 + }}}', "{{1 +}}: "),
        ('{"a": {{vf}', "an opening {{ has no closing }}"),
        ('{"a": {{}}}', "an empty placeholder"),
        ('{"a": {{obj}}}', "{{obj}}: a object is not a JSON value"),
        ('{"a": 1,, }', "input is not valid JSON or YAML: Expecting property name"),
        ("a: [1, 2", "input is not valid JSON or YAML: did not find expected ',' or ']'"),
        ('{virtualFileId: "abc", query: {region: North}',
         "input is not valid JSON or YAML: did not find expected ',' or '}' (line 2, column 1), "
         "while parsing a flow mapping from line 1, column 1"),
        # typed in the cell rather than inserted: libyaml's UTF-8 encoding of the text failed, no 400
        ("a: x\ud800", "input holds \\ud800, half of a UTF-16 surrogate pair"),
    ],
)
def test_bad_input_is_a_400_with_a_clear_message(text: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        read_input(text, {**NS, "obj": object()})
    assert caught.value.status == 400
    assert message in caught.value.message


def test_no_placeholder_means_no_work() -> None:
    text = '{"a": {"b": [1, {"c": "}}"}]}}'
    assert substitute(text, {}) is text


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('query -o rows {"a": 1}', ("query -o rows", '{"a": 1}')),
        ("push --df sales", ("push --df sales", "")),
        ("iterate {{payload}}", ("iterate", "{{payload}}")),
        ("  ", ("", "")),
        ('query {"a": "x -o y"}', ("query", '{"a": "x -o y"}')),
    ],
)
def test_split_line_separates_options_from_the_input(line: str, expected: tuple[str, str]) -> None:
    assert split_line(line) == expected
