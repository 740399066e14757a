"""Which rows may break a Validate rule, as one SQL condition over the row table (SQLite and PostgreSQL).

Validate splits a file in the database: the rows the condition clears are copied to the accepted file by
one ``INSERT … SELECT`` (they never reach Python), and only the rows it flags are read and decided by the
row checks of :mod:`connector_ops.etl.validation`, which word the errors. So the condition may flag a row
the checks accept, but must never clear one they refuse: it is exact on ASCII text and flags everything
else (the checks' ``\\d`` also takes other scripts' digits; a boolean here must spell true/false in ASCII).
A condition that comes out NULL counts as flagged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from connector_ops.resources.virtual_files.shapes import RuleShape


class _Dialect:
    """The few functions whose spelling differs between the two databases."""

    def __init__(self, name: str) -> None:
        self.postgres = name == "postgresql"

    def has_other_than(self, value: Any, allowed: str) -> Any:
        """True where ``value`` holds a character outside the class ``allowed`` (e.g. ``0-9.``)."""
        if self.postgres:
            return value.op("~", is_comparison=True)(f"[^{allowed}]")
        return value.op("GLOB", is_comparison=True)(f"*[^{allowed}]*")

    def matches_any(self, value: Any, globs: Sequence[str], regex: str) -> Any:
        if self.postgres:
            return value.op("~", is_comparison=True)(regex)
        return sa.or_(*(value.op("GLOB", is_comparison=True)(g) for g in globs))

    def position(self, value: Any, char: str) -> Any:
        return sa.func.strpos(value, char) if self.postgres else sa.func.instr(value, char)

    def greatest(self, *values: Any) -> Any:
        return sa.func.greatest(*values) if self.postgres else sa.func.max(*values)


def may_fail(rules: Sequence[RuleShape], columns: Mapping[str, Any], dialect: str) -> Any:
    """The condition: true (never NULL) for every row that breaks a rule, and maybe a few that do not."""
    d = _Dialect(dialect)
    conditions = []
    for rule in rules:
        value = columns.get(rule.column)
        if value is None:  # a column the file does not have: missing in every row
            if rule.required:
                return sa.true()
            continue
        absent = value.is_(None) if rule.allow_empty else sa.or_(value.is_(None), value == "")
        check = sa.func.coalesce(_check(rule, value, d), sa.true())
        conditions.append(sa.case((absent, sa.literal(rule.required)), else_=check))
    return sa.func.coalesce(sa.or_(*conditions), sa.true()) if conditions else sa.false()


def _check(rule: RuleShape, value: Any, d: _Dialect) -> Any:
    """May a present value break the rule?"""
    if rule.kind == "boolean":
        return sa.not_(d.matches_any(value, ("[Tt][Rr][Uu][Ee]", "[Ff][Aa][Ll][Ss][Ee]"),
                                     "^([Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee])$"))
    if rule.kind == "string":
        return _outside(sa.func.length(value), rule.low, rule.high)
    body = sa.case((sa.func.substr(value, 1, 1).in_(["+", "-"]), sa.func.substr(value, 2)), else_=value)
    if rule.kind == "integer":
        malformed = sa.or_(body == "", d.has_other_than(body, "0-9"))
        digits = d.greatest(sa.func.length(sa.func.ltrim(body, "0")), 1)
        return sa.or_(malformed, _outside(digits, rule.low, rule.high))
    # float: digits with at most one point, not empty, not a point alone
    two_points = d.matches_any(body, ("*.*.*",), r"\..*\.")
    malformed = sa.or_(body.in_(["", "."]), d.has_other_than(body, "0-9."), two_points)
    dot = d.position(body, ".")
    before = sa.case((dot > 0, sa.func.substr(body, 1, dot - 1)), else_=body)
    after = sa.case((dot > 0, sa.func.substr(body, dot + 1)), else_="")
    whole = sa.func.length(sa.func.ltrim(before, "0"))
    fraction = sa.func.length(sa.func.rtrim(after, "0"))
    if rule.precision is not None:
        p, s = rule.precision
        return sa.or_(malformed, whole > p - s, fraction > s)
    return sa.or_(malformed, _outside(d.greatest(whole + fraction, 1), rule.low, rule.high))


def _outside(length: Any, low: int | None, high: int | None) -> Any:
    out = [length < low] if low is not None else []
    if high is not None:
        out.append(length > high)
    return sa.or_(*out) if out else sa.false()
