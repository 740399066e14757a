"""Validate split in the database (both databases): the rows the SQL condition clears are rows the row
checks accept, and the split — accepted rows in order, rejected rows with their errors and JSON content
worded in SQL — equals checking every row in Python (random rules and values, ASCII and not, JSON escapes,
long values, odd column names)."""

from __future__ import annotations

import random
from typing import Any

import sqlalchemy as sa

from connector_ops.etl.validation import _content, compile_schema, row_error, validate_file
from connector_ops.resources.virtual_files.suspect_sql import may_fail

PIECES = ["0", "7", "12", "007", "-", "+", ".", "5", "00", "a", "TRUE", "true", "False", "fAlSe", " ", "",
          "٣", "١٢", "ſ", "é", "e5", "1e3", "NaN", "12.340", ".5", "5.", "İ", "K",
          '"', "\\", "\n", "\t", "\r\n", "\x01", "\x1f", "\x7f", "\u2028", "😀", "{x}", "x" * 37, "9" * 41]
NAMES = ["a", 'b "{0}"', "ç"]


def random_rule(rnd: random.Random) -> dict:
    kind = rnd.choice(["string", "integer", "float", "boolean"])
    rule: dict = {"type": kind}
    if rnd.random() < 0.5:
        rule["required"] = rnd.choice([True, False, {"value": True, "allowEmpty": True}, {"value": False}])
    if kind == "float" and rnd.random() < 0.4:
        p = rnd.randint(1, 6)
        rule["maxLength"] = f"{p},{rnd.randint(0, p)}"
        if rnd.random() < 0.5:
            rule["minLength"] = rnd.randint(0, min(p, 3))
    elif kind != "boolean":
        if rnd.random() < 0.5:
            rule["minLength"] = rnd.randint(0, 3)
        if rnd.random() < 0.5:
            rule["maxLength"] = rule.get("minLength", 0) + rnd.randint(0, 4)
    return rule


def random_rows(rnd: random.Random, n: int, pieces: list[str] = PIECES) -> list[dict[str, str]]:
    rows = []
    for _ in range(n):
        values = [None if rnd.random() < 0.1 else "".join(rnd.choices(pieces, k=rnd.randint(0, 3))) for _ in NAMES]
        rows.append({k: v for k, v in zip(NAMES, values, strict=True) if v is not None})
    return rows


def flagged_rows(store: Any, vf_id: str, rules: list) -> set[int]:
    """The seq of every row the SQL condition flags."""
    with store.reading() as conn:
        info = store.info(conn, vf_id)
        condition = may_fail(rules, info.column_map(), conn.dialect.name)
        return set(conn.execute(sa.select(info.table.c.seq).where(condition)).scalars())


def test_the_database_split_equals_checking_every_row_in_python(store: Any) -> None:
    rnd = random.Random(1304)
    cleared = 0
    # SQLite text holds a NUL, where its length() and GLOB stop (PostgreSQL text cannot hold one)
    pieces = [*PIECES, "\x00", "ab\x00cdefgh"] if store.sql.dialect == "sqlite" else PIECES
    for _ in range(60):
        schema = {n: random_rule(rnd) for n in rnd.sample([*NAMES, "absent"], rnd.randint(1, 4))}
        rules = compile_schema(schema)
        rows = random_rows(rnd, 40, pieces)
        vf = store.create_from_rows(rows)
        flagged = flagged_rows(store, vf, rules)
        for seq, row in enumerate(rows, start=1):
            if seq not in flagged:
                assert row_error(rules, row) is None, (schema, row)
                cleared += 1
        accepted, rejected = validate_file(store, vf, rules, batch_size=7)
        stored = store.rows(vf)  # as a reader sees them: keys in the file's column order
        expected_bad = [{"error": e, "content": _content(r)} for r in stored if (e := row_error(rules, r)) is not None]
        assert store.rows(accepted) == [r for r in stored if row_error(rules, r) is None], schema
        assert store.rows(rejected) == expected_bad
    assert cleared > 300  # the database does clear rows


def test_sql_words_every_row_it_can_judge_and_python_only_the_others(store: Any) -> None:
    """The row checks run only for rows with text beyond ASCII in a number or boolean column (and, on
    SQLite, a NUL): every other refused row is worded by the database."""
    from connector_ops.etl.validation import WORDING
    from connector_ops.resources.virtual_files.shapes import Verdicts

    rules = compile_schema({"n": {"type": "integer", "maxLength": 2}, "s": {"type": "string", "maxLength": 3},
                            "f": {"type": "float", "maxLength": "3,1", "required": True}})
    rows = [{"n": "1", "s": "abc", "f": "1.5"}, {"n": "123", "s": "héllo\n\"", "f": "123.25"},
            {"n": "x", "f": ""}, {"n": "١٢", "s": "ok", "f": "1"}, {"n": "1", "s": "é", "f": "١"},
            {"s": "é" * 50, "f": "1234.5"}]
    nul = store.sql.dialect == "sqlite"
    if nul:
        rows.append({"n": "1\x00x", "f": "1"})
    vf = store.create_from_rows(rows)
    asked: list[dict] = []

    def refuse(row: dict) -> tuple[str, str] | None:
        asked.append(row)
        error = row_error(rules, row)
        return None if error is None else (error, _content(row))

    accepted, rejected = store.split_rows(vf, refuse, ["error", "content"], 2, verdicts=Verdicts(rules, WORDING))
    assert asked == [rows[3], rows[4], *rows[6:]]
    assert store.rows(accepted) == [rows[0], rows[3], rows[4]]  # Python's \\d reads "١٢" and "١" as digits
    assert [r["error"] for r in store.rows(rejected)] == [
        'n: digits 3 is more than maxLength 2; s: length 7 is more than maxLength 3; f: 3 digits before the '
        'decimal point, at most 2 allowed (maxLength "3,1"); f: 2 digits after the decimal point, at most 1 '
        'allowed (maxLength "3,1")',
        'n: "x" is not an integer; f: required value is empty',
        's: length 50 is more than maxLength 3; f: 4 digits before the decimal point, at most 2 allowed '
        '(maxLength "3,1")',
        *(['n: "1\\u0000x" is not an integer'] if nul else [])]
    assert [r["content"] for r in store.rows(rejected)] == [_content(r) for r in rows if row_error(rules, r)]


def test_appending_to_the_refused_file_numbers_after_its_rows(store: Any) -> None:
    """Refused rows keep their source seq too; a later append goes after them."""
    from connector_ops import invoke

    vf = store.create_from_rows([{"n": "1"}, {"n": "x"}, {"n": "٣"}, {"n": "y"}])
    out = invoke("etl.validate", {"content": vf, "schema": {"n": {"type": "integer"}}})
    invoke("etl.append_rows", {"rows": [{"virtualFileId": out["rejected"], "content": {"error": "e"}}]})
    assert [r.get("content") for r in store.rows(out["rejected"])] == ['{"n": "x"}', '{"n": "y"}', None]


def test_the_condition_clears_plain_valid_rows_and_sql_accepts_the_padded_one(store: Any) -> None:
    """The cheap condition flags signs and padded zeros ("-007"); the exact wording in SQL then finds no
    problem and accepts the row without asking Python."""
    rules = compile_schema({"id": {"type": "integer", "maxLength": 3, "required": True},
                            "price": {"type": "float", "maxLength": "5,2"},
                            "ok": {"type": "boolean"}, "name": {"type": "string", "minLength": 2}})
    rows = [("7", "123.45", "TRUE", "ab"), ("-007", ".5", "false", "abc"), ("1", "100.10", None, "xy"),
            ("1234", "1.5", "true", "ab"), ("1", "1.555", "true", "ab"), ("1", "1", "yes", "ab"),
            ("1", "1", "true", "a"), ("", "1", "true", "ab")]
    names = ["id", "price", "ok", "name"]
    vf = store.create_from_rows([{n: v for n, v in zip(names, r, strict=True) if v is not None} for r in rows])
    assert sorted(flagged_rows(store, vf, rules)) == [2, 4, 5, 6, 7, 8]
    accepted, rejected = validate_file(store, vf, rules)
    assert [r["id"] for r in store.rows(accepted)] == ["7", "-007", "1"]
    assert len(store.rows(rejected)) == 5


def test_appending_to_the_accepted_file_numbers_after_its_rows(store: Any) -> None:
    """Accepted rows keep their source seq; a later append must not collide with them (PostgreSQL's sequence)."""
    from connector_ops import invoke

    vf = store.create_from_rows([{"n": "1"}, {"n": "x"}, {"n": "3"}])
    out = invoke("etl.validate", {"content": vf, "schema": {"n": {"type": "integer"}}})
    invoke("etl.append_rows", {"rows": [{"virtualFileId": out["validated"], "content": {"n": "4"}}]})
    assert store.rows(out["validated"]) == [{"n": "1"}, {"n": "3"}, {"n": "4"}]


def test_a_wide_file_is_worded_like_a_narrow_one(store: Any) -> None:
    """Past SQLite's limit of function arguments the content is built value by value, as for a row with
    a missing value; either way it is the checks' JSON."""
    names = [f"col {i} \"q\"" for i in range(70)]
    rows = [{n: f"v{i}:{j}\t\"" for i, n in enumerate(names)} for j in range(3)]
    rows[1].pop(names[5])
    rows.append({names[0]: "ok", names[1]: "toolong"})
    rules = compile_schema({names[1]: {"type": "string", "maxLength": 5}})
    vf = store.create_from_rows(rows)
    _accepted, rejected = validate_file(store, vf, rules)
    assert store.rows(rejected) == [{"error": row_error(rules, r), "content": _content(r)} for r in store.rows(vf)
                                    if row_error(rules, r)]
    assert len(store.rows(rejected)) == 4


def test_a_file_of_the_most_columns_is_worded_like_a_narrow_one(store: Any) -> None:
    """A row's error and JSON content are one ``||`` expression over its rules and columns: built as a chain,
    Validate of a file of more than ~70 columns was a 500 (SQLite's parser stack, then Python's recursion
    limit on both databases). At the 1,599 columns a file may have, with a rule on each, it words every row
    as the row checks do."""
    names = [f"c{i}" for i in range(1599)]
    rules = compile_schema({n: {"type": "integer", "maxLength": 3, "required": True} for n in names})
    fine = dict.fromkeys(names, "7")
    refused = {n: ("x" if i % 3 == 0 else "12345" if i % 3 == 1 else "7") for i, n in enumerate(names)}
    missing = {n: "8" for n in names[:-1]}  # the last value missing: the JSON built value by value
    vf = store.create_from_rows([fine, refused, missing, fine])
    accepted, rejected = validate_file(store, vf, rules)
    assert store.rows(accepted) == [fine, fine]
    expected = [{"error": row_error(rules, r), "content": _content(r)} for r in (refused, missing)]
    assert store.rows(rejected) == expected
    assert expected[0]["error"].count(";") == 1065 and '"c1598": "7"}' in expected[0]["content"]


def test_validates_new_files_are_shaped_like_any_other_on_postgresql(postgres_resources: dict) -> None:
    """On PostgreSQL Validate makes its files by CREATE TABLE … AS (parallel workers); each must end up
    as any row table: ``seq`` not null, drawn from its own sequence, the primary key; text columns.
    (SQLite fills the tables it created.)"""
    from tests.virtual_files import StoreForTests

    store = StoreForTests.of(postgres_resources["virtual_files"])
    vf = store.create_from_rows([{"n": "1", "s": "a"}, {"n": "x", "s": "b"}])
    accepted, rejected = validate_file(store, vf, compile_schema({"n": {"type": "integer"}}))

    def shape(vf_id: str) -> tuple:
        with store.reading() as conn:
            table = store.info(conn, vf_id).table_name
            columns = conn.execute(sa.text(
                "SELECT column_name, data_type, is_nullable, column_default LIKE 'nextval(%' FROM "
                "information_schema.columns WHERE table_name = :t ORDER BY ordinal_position"), {"t": table}).all()
        return [tuple(c) for c in columns], store.row_key(vf_id)

    plain = store.create_from_rows([{"n": "1", "s": "a"}])
    assert shape(accepted) == shape(plain)
    columns, key = shape(rejected)
    assert columns == shape(plain)[0] and key == store.ROW_KEY
