"""Validate: every rule, the float "p,s" form at its edges, required's object form, the virtual-file form."""

from __future__ import annotations

import json

import pytest

from connector_ops import ConnectorError, invoke
from connector_ops.etl.validation import SCAN_BATCH
from connector_ops.resources.virtual_files.store import VirtualFileStore

INLINE: dict = {}


@pytest.fixture(autouse=True)
def _inline_resources(tmp_path):
    """Inline content never touches the database; one SQLite store is enough for those tests."""
    INLINE["virtual_files"] = VirtualFileStore(database_url=f"sqlite:///{tmp_path / 'inline.db'}")
    yield
    INLINE.clear()


def check(schema: dict, rows: list[dict]) -> dict:
    return invoke("etl.validate", {"content": rows, "schema": schema}, INLINE)


def errors(schema: dict, values: list) -> list[str | None]:
    """The error text for each value of column ``v`` (None when accepted)."""
    rows = [{"v": value} for value in values]
    out = check(schema, rows)
    by_content = {r["content"]: r["error"] for r in out["rejected"]}
    assert len(out["validated"]) + len(out["rejected"]) == len(rows)
    return [by_content.get(json.dumps(row, ensure_ascii=False)) for row in rows]


@pytest.mark.parametrize(("rule", "value", "error"), [
    ({"type": "string"}, "abc", None),
    ({"type": "string"}, 5, 'v: 5 is not a string'),
    ({"type": "string", "minLength": 3}, "ab", "v: length 2 is less than minLength 3"),
    ({"type": "string", "minLength": 3}, "abc", None),
    ({"type": "string", "maxLength": 3}, "abcd", "v: length 4 is more than maxLength 3"),
    ({"type": "string", "maxLength": 3}, "été", None),                    # code points, not bytes
    ({"type": "integer"}, "42", None),
    ({"type": "integer"}, "-42", None),
    ({"type": "integer"}, "+7", None),
    ({"type": "integer"}, 42, None),
    ({"type": "integer"}, "4.2", 'v: "4.2" is not an integer'),
    ({"type": "integer"}, "1e3", 'v: "1e3" is not an integer'),
    ({"type": "integer"}, " 4", 'v: " 4" is not an integer'),
    ({"type": "integer"}, True, "v: true is not an integer"),
    ({"type": "integer", "maxLength": 3}, "-999", None),
    ({"type": "integer", "maxLength": 3}, "0001", None),                  # leading zeros not counted
    ({"type": "integer", "maxLength": 3}, "1000", "v: digits 4 is more than maxLength 3"),
    ({"type": "integer", "minLength": 2}, "7", "v: digits 1 is less than minLength 2"),
    ({"type": "float"}, "1.5", None),
    ({"type": "float"}, ".5", None),
    ({"type": "float"}, "-3", None),
    ({"type": "float"}, 2.25, None),
    ({"type": "float"}, "1,5", 'v: "1,5" is not a number'),
    ({"type": "float"}, "NaN", 'v: "NaN" is not a number'),
    ({"type": "float"}, "1e2", 'v: "1e2" is not a number'),
    ({"type": "float"}, "1_0", 'v: "1_0" is not a number'),
    ({"type": "boolean"}, "true", None),
    ({"type": "boolean"}, "FALSE", None),
    ({"type": "boolean"}, False, None),
    ({"type": "boolean"}, "yes", 'v: "yes" is not a boolean (true or false)'),
    ({"type": "boolean"}, 1, "v: 1 is not a boolean (true or false)"),
])
def test_rules(rule, value, error):
    assert errors({"v": rule}, [value]) == [error]


P52 = {"v": {"type": "float", "maxLength": "5,2"}}


@pytest.mark.parametrize(("value", "error"), [
    ("123.45", None), ("-123.45", None), ("0.12", None), ("123", None), ("00012.30", None), ("123.450", None),
    ("999.99", None), (".5", None), ("+1.5", None), (123.45, None),
    ("1234.5", 'v: 4 digits before the decimal point, at most 3 allowed (maxLength "5,2")'),
    ("12345", 'v: 5 digits before the decimal point, at most 3 allowed (maxLength "5,2")'),
    ("123.456", 'v: 3 digits after the decimal point, at most 2 allowed (maxLength "5,2")'),   # no rounding
    ("1234.567", 'v: 4 digits before the decimal point, at most 3 allowed (maxLength "5,2"); '
                 'v: 3 digits after the decimal point, at most 2 allowed (maxLength "5,2")'),
    (" 1.5", 'v: " 1.5" is not a number'),
])
def test_float_precision_scale_like_sql_decimal(value, error):
    assert errors(P52, [value]) == [error]


def test_precision_edges_zero_scale_and_all_decimals():
    assert errors({"v": {"type": "float", "maxLength": "3,0"}}, ["999", "1000", "1.0", "1.5"]) == [
        None, 'v: 4 digits before the decimal point, at most 3 allowed (maxLength "3,0")', None,
        'v: 1 digits after the decimal point, at most 0 allowed (maxLength "3,0")']
    assert errors({"v": {"type": "float", "maxLength": " 2 , 2 "}}, ["0.99", "1.0", "0.999"]) == [
        None, 'v: 1 digits before the decimal point, at most 0 allowed (maxLength " 2 , 2 ")',
        'v: 3 digits after the decimal point, at most 2 allowed (maxLength " 2 , 2 ")']
    assert errors({"v": {"type": "float", "maxLength": 4, "minLength": 2}}, ["12.34", "123.45", "5"]) == [
        None, "v: digits 5 is more than maxLength 4", "v: digits 1 is less than minLength 2"]


def test_min_length_counts_with_the_precision_form_too():
    """minLength counts a float's digits before and after the point beside a ``"p,s"`` maxLength, after its
    own problems; one past p digits could never pass: a 400."""
    assert errors({"v": {"type": "float", "minLength": 3, "maxLength": "5,2"}},
                  ["1", "1.5", "1.25", "000.120", "1234", "12345.6"]) == [
        "v: digits 1 is less than minLength 3", "v: digits 2 is less than minLength 3", None,
        "v: digits 2 is less than minLength 3",
        'v: 4 digits before the decimal point, at most 3 allowed (maxLength "5,2")',
        'v: 5 digits before the decimal point, at most 3 allowed (maxLength "5,2")']
    assert errors({"v": {"type": "float", "minLength": 5, "maxLength": "5,2"}}, ["1234"]) == [
        'v: 4 digits before the decimal point, at most 3 allowed (maxLength "5,2"); '
        "v: digits 4 is less than minLength 5"]
    with pytest.raises(ConnectorError) as info:
        check({"v": {"type": "float", "minLength": 6, "maxLength": "5,2"}}, [])
    assert (info.value.status, info.value.message) == (
        400, 'schema.v: minLength 6 is more than the 5 digits maxLength "5,2" allows')


def test_required_boolean_and_object_forms():
    schema = {"v": {"type": "string", "required": True}}
    assert errors(schema, ["x", "", None]) == [None, "v: required value is empty", "v: required value is missing"]
    out = check(schema, [{"other": "1"}])
    assert out["rejected"] == [{"error": "v: required value is missing", "content": '{"other": "1"}'}]
    assert errors({"v": {"type": "integer", "required": {"value": True}}}, ["1", "", None]) == [
        None, "v: required value is empty", "v: required value is missing"]
    assert errors({"v": {"type": "string", "required": {"value": True, "allowEmpty": True}}}, ["", None]) == [
        None, "v: required value is missing"]
    assert errors({"v": {"type": "integer", "required": {"value": False}}}, ["", None, "x"]) == [
        None, None, 'v: "x" is not an integer']
    assert errors({"v": {"type": "integer"}}, ["", None]) == [None, None]  # optional: no value, no checks


def test_every_failing_column_is_named_and_valid_rows_pass_unchanged():
    schema = {"id": {"type": "integer", "required": True}, "name": {"type": "string", "maxLength": 3},
              "ok": {"type": "boolean"}}
    rows = [{"id": "1", "name": "Ann", "ok": "true", "extra": [1, {"x": None}]},
            {"id": "x", "name": "Anne-Marie", "ok": "maybe"}]
    out = check(schema, rows)
    assert out["validated"] == [rows[0]]
    assert out["rejected"] == [{
        "error": 'id: "x" is not an integer; name: length 10 is more than maxLength 3; '
                 'ok: "maybe" is not a boolean (true or false)',
        "content": json.dumps(rows[1], ensure_ascii=False),
    }]


@pytest.mark.parametrize(("schema", "message"), [
    ({"age": {"type": "int"}}, 'schema.age.type: unknown type "int"'),
    ({"age": {"maxLength": 3}}, "schema.age.type: is required"),
    ({"age": {"type": "integer", "maxLen": 3}}, "schema.age: unknown rule 'maxLen'"),
    ({"age": "integer"}, "schema.age: a rule must be an object"),
    ({"age": {"type": "integer", "maxLength": "5,2"}}, 'schema.age.maxLength: must be a non-negative whole number (th'),
    ({"age": {"type": "integer", "maxLength": -1}}, "schema.age.maxLength: must be a non-negative whole number"),
    ({"age": {"type": "string", "minLength": True}}, "schema.age.minLength: must be a non-negative whole number"),
    ({"age": {"type": "string", "minLength": 5, "maxLength": 2}}, "schema.age: minLength 5 is more than maxLength 2"),
    ({"p": {"type": "float", "maxLength": "5;2"}}, 'schema.p.maxLength: must be "<digits>,<decimals>"'),
    ({"p": {"type": "float", "maxLength": "2,3"}}, "schema.p.maxLength: \"2,3\": digits must be at least 1"),
    ({"b": {"type": "boolean", "maxLength": 1}}, "schema.b: minLength/maxLength do not apply to a boolean"),
    ({"r": {"type": "string", "required": "yes"}}, "schema.r.required: must be a boolean"),
    ({"r": {"type": "string", "required": {"value": 1}}}, "schema.r.required: the object form"),
    ({"r": {"type": "string", "required": {"on": True}}}, "schema.r.required: unknown key 'on'"),
])
def test_malformed_schemas_are_400_naming_the_column(schema, message):
    with pytest.raises(ConnectorError) as info:
        check(schema, [{"age": "1"}])
    assert info.value.status == 400
    assert info.value.message.startswith(message), info.value.message


def test_virtual_file_content_writes_two_files(store, resources):
    """The store reads the source in pages of ``SCAN_BATCH`` rows (the size Validate passes it); the file
    spans three pages, with refused rows on each side of both page boundaries and on the last page, so a
    split that loses, repeats or reorders a page fails the exact comparisons below."""
    bad = {0: "x", SCAN_BATCH - 1: "12.345", SCAN_BATCH: "", 2 * SCAN_BATCH: "x", 2 * SCAN_BATCH + 2: "12.345"}
    rows = [{"id": str(i), "price": bad.get(i, f"{i % 100}.5")} for i in range(2 * SCAN_BATCH + 3)]
    assert len(rows) > 2 * SCAN_BATCH  # at least three pages
    vf = store.create_from_rows(rows)
    schema = {"price": {"type": "float", "maxLength": "4,2", "required": True}}
    out = invoke("etl.validate", {"content": vf, "schema": schema}, resources)
    assert store.rows(out["validated"]) == [row for i, row in enumerate(rows) if i not in bad]
    not_a_number, too_precise = 'price: "x" is not a number', \
        'price: 3 digits after the decimal point, at most 2 allowed (maxLength "4,2")'
    assert store.rows(out["rejected"]) == [
        {"error": not_a_number, "content": '{"id": "0", "price": "x"}'},
        {"error": too_precise, "content": f'{{"id": "{SCAN_BATCH - 1}", "price": "12.345"}}'},
        {"error": "price: required value is empty", "content": f'{{"id": "{SCAN_BATCH}", "price": ""}}'},
        {"error": not_a_number, "content": f'{{"id": "{2 * SCAN_BATCH}", "price": "x"}}'},
        {"error": too_precise, "content": f'{{"id": "{2 * SCAN_BATCH + 2}", "price": "12.345"}}'},
    ]
    assert store.rows(vf) == rows
    inline = invoke("etl.validate", {"content": rows, "schema": schema}, resources)
    assert store.rows(out["rejected"]) == inline["rejected"]


def test_an_empty_column_name_in_the_schema_is_a_400_inline_and_on_a_file(store, resources):
    """An empty column name is a 400 on every path that names columns, as Append Rows and Push say it: Validate
    took one and failed every row with ": required value is missing" (no file's column can have that name).
    On both databases, before any file is written."""
    vf = store.create_from_rows([{"a": "x"}])
    before = store.inventory()
    for content in ([{"a": "x"}], vf):
        with pytest.raises(ConnectorError) as info:
            invoke("etl.validate", {"content": content, "schema": {"a": {"type": "string"},
                                                                   "": {"type": "integer", "required": True}}},
                   resources)
        assert (info.value.status, info.value.message) == (400, "schema: column 2's name is empty")
    assert store.inventory() == before


def test_unknown_virtual_file_is_404(store, resources):
    with pytest.raises(ConnectorError) as info:
        invoke("etl.validate", {"content": "nope", "schema": {}}, resources)
    assert (info.value.status, info.value.body) == (404, {"message": "not found"})


@pytest.mark.parametrize("columns", [["a", "b"], ["a", ":"], [":", "a"], ["a", " : "], [" : ", ","], [",", "a"],
                                     ['a":', "b"], ["a", 'b" : ']])
def test_a_value_or_name_like_a_separator_keeps_its_content_text(store, resources, columns):
    """The database builds a refused row's content as one JSON object and then respaces its separators
    (SQLite ``","`` → ``", "``, ``":"`` → ``": "``; PostgreSQL ``" : "`` → ``": "``): a value or column name
    that is exactly a separator's middle (SQLite: ``{"a": ", "}``) or ends in a ``"`` and one (``x",`` is
    ``"x\\","`` in the JSON) was taken for a separator, so the content differed from the inline form's.
    Every row here is refused (the first column not an integer) with every column present."""
    first, second = columns
    texts = [",", ":", " : ", '","', "x", ", ", "", 'x",', 'x":', 'x" : ', '"', '\\",', ',"', '":"']
    rows = [{first: u, second: v} for u in texts for v in texts if (u, v) != ("", "")]
    vf = store.create_from_rows(rows)
    schema = {first: {"type": "integer", "required": True}}
    out = invoke("etl.validate", {"content": vf, "schema": schema}, resources)
    inline = invoke("etl.validate", {"content": rows, "schema": schema}, resources)
    assert store.rows(out["validated"]) == inline["validated"] == []
    assert store.rows(out["rejected"]) == [dict(r) for r in inline["rejected"]]
    assert [json.loads(r["content"]) for r in store.rows(out["rejected"])] == rows
