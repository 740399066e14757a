"""Validate over columns: a row Arrow's vectors let through is one the row checks accept (random rules and
values, ASCII and not), and rows the vectors flag are exactly checked by the row checks."""

from __future__ import annotations

import random

from connector_ops.etl.validation import compile_schema, row_error
from connector_ops.etl.validation_columns import suspects

PIECES = ["0", "7", "12", "007", "-", "+", ".", "5", "00", "a", "TRUE", "true", "False", "fAlSe", " ", "",
          "٣", "١٢", "ſ", "é", "e5", "1e3", "NaN", "12.340", ".5", "5."]


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


def test_rows_the_vectors_pass_are_rows_the_row_checks_accept():
    rnd = random.Random(1304)
    names = ["a", "b", "c"]
    flagged_total = 0
    for _ in range(300):
        rules = compile_schema({n: random_rule(rnd) for n in rnd.sample([*names, "absent"], rnd.randint(1, 4))})
        page = [tuple(None if rnd.random() < 0.1 else "".join(rnd.choices(PIECES, k=rnd.randint(0, 3)))
                      for _ in names) for _ in range(40)]
        flagged = set(suspects(rules, names, page))
        flagged_total += len(flagged)
        for at, values in enumerate(page):
            row = {n: v for n, v in zip(names, values, strict=True) if v is not None}
            if at not in flagged:
                assert row_error(rules, row) is None, (rules, row)
    assert flagged_total < 300 * 40  # the vectors do let rows through


def test_the_vectors_flag_no_valid_ascii_row():
    rules = compile_schema({"id": {"type": "integer", "maxLength": 3, "required": True},
                            "price": {"type": "float", "maxLength": "5,2"},
                            "ok": {"type": "boolean"}, "name": {"type": "string", "minLength": 2}})
    page = [("7", "123.45", "TRUE", "ab"), ("-007", ".5", "false", "abc"), ("1", "100.10", None, "xy"),
            ("1234", "1.5", "true", "ab"), ("1", "1.555", "true", "ab"), ("1", "1", "yes", "ab"),
            ("1", "1", "true", "a"), ("", "1", "true", "ab")]
    assert suspects(rules, ["id", "price", "ok", "name"], page) == [3, 4, 5, 6, 7]
