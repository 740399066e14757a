"""Which rows may break a Validate rule, as one SQL condition over the row table (SQLite and PostgreSQL).

Validate splits a file in the database: the rows the condition clears are copied to the accepted file by
one ``INSERT … SELECT`` (they never reach Python); only the rows it flags are judged exactly — in SQL by
:mod:`.refusal_sql`, or by the row checks of :mod:`connector_ops.etl.validation` where SQL cannot be sure.
So the condition may flag a row the checks accept, but must never clear one they refuse. It is made of a
few cheap tests per rule on the raw text (no sign, digits and one point, lengths counted with leading zeros),
because it runs on every row: it flags signs, padded zeros, text beyond ASCII (the checks' ``\\d`` also
takes other scripts' digits; a boolean must spell true/false in ASCII) and, on SQLite, a NUL (its text
functions stop there). The numeric pieces the exact wording needs are here too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from connector_ops.resources.virtual_files.filters import balanced
from connector_ops.resources.virtual_files.shapes import RuleShape


class Dialect:
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

    def has_twice(self, value: Any, char: str) -> Any:
        """True where ``value`` holds ``char`` (not a LIKE or GLOB wildcard) twice or more. On PostgreSQL ``LIKE``
        costs less than a regular expression: 1M rows took 0.065 s, against 0.145 s for ``\\..*\\.`` (a script)."""
        if self.postgres:
            return value.like(f"%{char}%{char}%")
        return value.op("GLOB", is_comparison=True)(f"*{char}*{char}*")

    def position(self, value: Any, char: str) -> Any:
        return sa.func.strpos(value, char) if self.postgres else sa.func.instr(value, char)

    def has_nul(self, value: Any) -> Any:
        """SQLite only (PostgreSQL text holds no NUL): its length() and GLOB stop at one."""
        return sa.func.instr(value, sa.func.char(0)) > 0

    def octets(self, value: Any) -> Any:
        """The value's length in bytes, never less than its length in characters; on SQLite counted past a
        NUL (``length()`` of the text stops there; of a BLOB it is the stored size)."""
        if self.postgres:
            return sa.func.octet_length(value)
        return sa.func.length(sa.cast(value, sa.LargeBinary))

    def greatest(self, *values: Any) -> Any:
        return sa.func.greatest(*values) if self.postgres else sa.func.max(*values)


#: the rules' cheap tests from the cheapest (a length or two) to the dearest (a float's patterns and point): the
#: condition stops at a row's first failing rule, so a row that fails a cheap rule skips the dear ones (SQLite,
#: 1M rows, the benchmark's five rules, 3/8 of the rows failing a string's minLength: 0.85 s → 0.60 s)
COST_RANK = {"string": 0, "boolean": 1, "integer": 2, "float": 3}


def may_fail(rules: Sequence[RuleShape], columns: Mapping[str, Any], dialect: str) -> Any:
    """The condition: true (never NULL) for every row that breaks a rule, and maybe a few that do not."""
    d = Dialect(dialect)
    passes = []
    for rule in sorted(rules, key=lambda r: COST_RANK[r.kind]):  # stable: the schema's order within a kind
        value = columns.get(rule.column)
        if value is None:  # a column the file does not have: missing in every row
            if rule.required:
                return sa.true()
            continue
        passes.append(surely_passes(rule, value, d))
    return sa.not_(balanced(sa.and_, passes)) if passes else sa.false()  # a rule on each of 1,599 columns


def surely_passes(rule: RuleShape, value: Any, d: Dialect) -> Any:
    """True (never NULL) where the value surely meets the rule: a few cheap tests on the raw text (signs,
    leading and trailing zeros, text beyond ASCII and, on SQLite, a NUL are left to the exact checks)."""
    present = _plainly_meets(rule, value, d)  # never NULL for a present value
    if present is None:
        return sa.not_(absent(rule, value)) if rule.required else sa.true()
    if rule.required:  # present and meets it; a NULL value stops at the first test
        return sa.and_(value.is_not(None), *([] if rule.allow_empty else [value != ""]), present)
    return sa.or_(absent(rule, value), present)


def absent(rule: RuleShape, value: Any) -> Any:
    """Is the value missing (or empty, unless the rule allows an empty value)?"""
    return value.is_(None) if rule.allow_empty else sa.or_(value.is_(None), value == "")


def _plainly_meets(rule: RuleShape, value: Any, d: Dialect) -> Any:
    """Does a present value meet the rule, read plainly (digits and one point, nothing else)? False is
    "not sure"; None when every present value meets it (a string without bounds)."""
    length = sa.func.length(value)
    if rule.kind == "string":  # no NUL test on SQLite: a NUL makes length() short, which only fails a low
        # bound, and the bytes (never fewer than the characters) bound a high one
        longest = length if d.postgres else d.octets(value)
        bounds = ([length >= rule.low] if rule.low is not None else []) + \
                 ([longest <= rule.high] if rule.high is not None else [])
        return sa.and_(*bounds) if bounds else None
    tests = [] if d.postgres else [sa.not_(d.has_nul(value))]  # SQLite's functions stop at a NUL
    if rule.kind == "boolean":
        return sa.and_(*tests, sa.not_(not_boolean(value, d)))
    if rule.kind == "integer":
        tests.append(sa.not_(_not_integer(value, d)))  # no sign: signed values are left to the exact check
        if rule.high is not None:
            tests.append(length <= rule.high)  # leading zeros counted: at least the digits the check counts
        if rule.low is not None:
            tests.append(d.greatest(sa.func.length(sa.func.ltrim(value, "0")), 1) >= rule.low)
        return sa.and_(*tests)
    dot = d.position(value, ".")
    tests.append(sa.not_(_not_decimal(value, d)))
    if rule.precision is not None:
        p, s = rule.precision
        tests.append(sa.case((dot == 0, length <= p - s), else_=sa.and_(dot - 1 <= p - s, length - dot <= s)))
    if rule.high is not None:
        tests.append(sa.case((dot == 0, length), else_=length - 1) <= rule.high)
    if rule.low is not None:
        tests.append(float_parts(value, d).digits >= rule.low)
    return sa.and_(*tests)


def not_boolean(value: Any, d: Dialect) -> Any:
    return sa.not_(d.matches_any(value, ("[Tt][Rr][Uu][Ee]", "[Ff][Aa][Ll][Ss][Ee]"),
                                 "^([Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee])$"))


@dataclass(frozen=True)
class Number:
    """A numeric text's pieces as SQL expressions, exact on ASCII: is it malformed, and its digit counts
    (``whole``: before the point, leading zeros not counted; ``fraction``: after it, trailing zeros not
    counted; ``digits``: what min/maxLength count)."""

    malformed: Any
    digits: Any
    whole: Any = None
    fraction: Any = None


def _unsigned(value: Any) -> Any:
    return sa.case((sa.func.substr(value, 1, 1).in_(["+", "-"]), sa.func.substr(value, 2)), else_=value)


def _not_integer(digits: Any, d: Dialect) -> Any:
    """Is the unsigned text anything but one or more digits?"""
    return sa.or_(digits == "", d.has_other_than(digits, "0-9"))


def _not_decimal(digits: Any, d: Dialect) -> Any:
    """Is the unsigned text anything but digits with at most one point (not empty, not a point alone)?"""
    return sa.or_(digits.in_(["", "."]), d.has_other_than(digits, "0-9."),
                  d.has_twice(digits, "."))


def integer_parts(value: Any, d: Dialect) -> Number:
    body = _unsigned(value)
    return Number(_not_integer(body, d), d.greatest(sa.func.length(sa.func.ltrim(body, "0")), 1))


def float_parts(value: Any, d: Dialect) -> Number:
    body = _unsigned(value)
    malformed = _not_decimal(body, d)
    dot = d.position(body, ".")
    before = sa.case((dot > 0, sa.func.substr(body, 1, dot - 1)), else_=body)
    after = sa.case((dot > 0, sa.func.substr(body, dot + 1)), else_="")
    whole = sa.func.length(sa.func.ltrim(before, "0"))
    fraction = sa.func.length(sa.func.rtrim(after, "0"))
    return Number(malformed, d.greatest(whole + fraction, 1), whole, fraction)
