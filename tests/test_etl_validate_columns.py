"""Validate split in the database (both databases): the rows the SQL condition clears are rows the row
checks accept, and the split — accepted rows in order, rejected rows with their errors — equals checking
every row in Python (random rules and values, ASCII and not)."""

from __future__ import annotations

import random
from typing import Any

import sqlalchemy as sa

from connector_ops.etl.validation import _content, compile_schema, row_error, validate_file
from connector_ops.resources.virtual_files.suspect_sql import may_fail

PIECES = ["0", "7", "12", "007", "-", "+", ".", "5", "00", "a", "TRUE", "true", "False", "fAlSe", " ", "",
          "٣", "١٢", "ſ", "é", "e5", "1e3", "NaN", "12.340", ".5", "5.", "İ", "K"]
NAMES = ["a", "b", "c"]


def random_rule(rnd: random.Random) -> dict:
    kind = rnd.choice(["string", "integer", "float", "boolean"])
    rule: dict = {"type": kind}
    if rnd.random() < 0.5:
        rule["required"] = rnd.choice([True, False, {"value": True, "allowEmpty": True}, {"value": False}])
    if kind == "float" and rnd.random() < 0.4:
        p = rnd.randint(1, 6)
        rule["maxLength"] = f"{p},{rnd.randint(0, p)}"
    elif kind != "boolean":
        if rnd.random() < 0.5:
            rule["minLength"] = rnd.randint(0, 3)
        if rnd.random() < 0.5:
            rule["maxLength"] = rule.get("minLength", 0) + rnd.randint(0, 4)
    return rule


def random_rows(rnd: random.Random, n: int) -> list[dict[str, str]]:
    rows = []
    for _ in range(n):
        values = [None if rnd.random() < 0.1 else "".join(rnd.choices(PIECES, k=rnd.randint(0, 3))) for _ in NAMES]
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
    for _ in range(60):
        schema = {n: random_rule(rnd) for n in rnd.sample([*NAMES, "absent"], rnd.randint(1, 4))}
        rules = compile_schema(schema)
        rows = random_rows(rnd, 40)
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


def test_the_condition_flags_no_valid_ascii_row(store: Any) -> None:
    rules = compile_schema({"id": {"type": "integer", "maxLength": 3, "required": True},
                            "price": {"type": "float", "maxLength": "5,2"},
                            "ok": {"type": "boolean"}, "name": {"type": "string", "minLength": 2}})
    rows = [("7", "123.45", "TRUE", "ab"), ("-007", ".5", "false", "abc"), ("1", "100.10", None, "xy"),
            ("1234", "1.5", "true", "ab"), ("1", "1.555", "true", "ab"), ("1", "1", "yes", "ab"),
            ("1", "1", "true", "a"), ("", "1", "true", "ab")]
    names = ["id", "price", "ok", "name"]
    vf = store.create_from_rows([{n: v for n, v in zip(names, r, strict=True) if v is not None} for r in rows])
    assert sorted(flagged_rows(store, vf, rules)) == [4, 5, 6, 7, 8]


def test_appending_to_the_accepted_file_numbers_after_its_rows(store: Any) -> None:
    """Accepted rows keep their source seq; a later append must not collide with them (PostgreSQL's sequence)."""
    from connector_ops import invoke

    vf = store.create_from_rows([{"n": "1"}, {"n": "x"}, {"n": "3"}])
    out = invoke("etl.validate", {"content": vf, "schema": {"n": {"type": "integer"}}})
    invoke("etl.append_rows", {"rows": [{"virtualFileId": out["validated"], "content": {"n": "4"}}]})
    assert store.rows(out["validated"]) == [{"n": "1"}, {"n": "3"}, {"n": "4"}]
