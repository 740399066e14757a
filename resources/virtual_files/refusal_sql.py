"""Validate's refused rows worded in the database: each flagged row's error text and its content as JSON.

The row checks of :mod:`connector_ops.etl.validation` word a refused row in Python, one row at a time; for a
file that refuses hundreds of thousands of rows that loop was nearly all of Validate's time. Here the same
words come out of SQL: the problem templates are the checks' own (``WORDING``, passed in as
:class:`.Verdicts`), rendered with SQL expressions in their fields, and the JSON is built by the database's
own string quoting (SQLite ``json_quote``, PostgreSQL ``to_json``: the same escapes as Python's ``json``
without ``ensure_ascii``, which a differential test holds them to).

Each rule costs a row little when its cheap test (:func:`.suspect_sql.surely_passes`) clears the value; the
exact wording runs only for the others. SQL is exact on ASCII text: a row with a value it cannot judge
surely (text beyond ASCII in a number or boolean column, whose ``\\d`` Python reads more widely; a NUL on
SQLite, where text functions stop) gets no verdict here (NULL) and is decided by the row checks.
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping, Sequence
from functools import reduce
from typing import Any

import sqlalchemy as sa

from connector_ops.resources.virtual_files.filters import balanced
from connector_ops.resources.virtual_files.shapes import RuleShape, Verdicts
from connector_ops.resources.virtual_files.suspect_sql import (
    Dialect,
    absent,
    float_parts,
    integer_parts,
    not_boolean,
    surely_passes,
)

SHOWN = 40  # the checks show a value as JSON cut to this many characters, "…" last
SQLITE_MAX_ARGS = 127  # arguments an SQLite function takes (SQLITE_MAX_FUNCTION_ARG's default)

#: a piece of text to concatenate: a literal, a whole number, or an SQL expression
Piece = str | int | sa.ColumnElement[Any]


def error_text(verdicts: Verdicts, columns: Mapping[str, Any], dialect: str) -> Any:
    """The row's error, exactly as the row checks word it ('' when no rule fails), or NULL where SQL cannot
    be sure (the row checks decide those rows)."""
    d = Dialect(dialect)
    words = verdicts.wording
    problems = []
    for rule in verdicts.rules:
        value = columns.get(rule.column)
        if value is None:  # a column the file does not have: missing in every row
            if rule.required:
                problems.append(_concat("; ", rule.column, ": ", words["missing"]))
            continue
        required = (sa.case((value.is_(None), _concat("; ", rule.column, ": ", words["missing"])),
                            else_=_concat("; ", rule.column, ": ", words["empty"]))
                    if rule.required else _text(""))
        cases = [(surely_passes(rule, value, d), _text("")), (absent(rule, value), required)]
        if rule.kind != "string" or not d.postgres:  # NULL: one NULL piece makes the whole text NULL
            cases.append((_unsure(rule, value, d), sa.null()))
        problems.append(sa.case(*cases, else_=_problems(rule, value, words, d)))
    return sa.func.substr(_concat(*problems), 3) if problems else _text("")


def content_json(names: Sequence[str], columns: Mapping[str, Any], dialect: str) -> Any:
    """The row as the checks' ``json.dumps(row, ensure_ascii=False)``: its columns in order, a missing
    value left out."""
    d = Dialect(dialect)
    if not names:
        return _text("{}")
    items = [sa.case((columns[n].is_(None), _text("")),
                     else_=_concat(f", {json.dumps(n, ensure_ascii=False)}: ", _json(columns[n], d)))
             for n in names]
    each = _concat("{", sa.func.substr(_concat(*items), 3), "}")
    if d.postgres:
        at_once, middles = _pg_object(names, columns), PG_SEPARATOR_MIDDLES
    elif 2 * len(names) <= SQLITE_MAX_ARGS:
        at_once = _spaced(sa.func.json_object(*(x for n in names for x in (n, columns[n])), type_=sa.Text))
        middles = SQLITE_SEPARATOR_MIDDLES
    else:
        return each
    if any('"' in n or n in middles for n in names):
        return each
    whole = balanced(sa.and_, [sa.and_(columns[n].is_not(None), d.position(columns[n], '"') == 0,
                                       *(columns[n] != m for m in middles)) for n in names])
    return sa.case((whole, at_once), else_=each)


# A row with no missing value is one JSON object built by one call, its separators then made Python's by
# ``replace``. Adjacent strings of that object meet only at a separator, so ``replace`` can take for one
# only a string that is exactly a separator's middle (on SQLite the value ``,``: ``{"a":","}`` became
# ``{"a": ", "}``) or one that holds a ``"``, escaped but still the character the pattern looks for (the
# value ``x",`` is ``"x\","`` in the JSON). Such a row (a file with such a column name: every row) is built
# value by value instead; the test costs one ``instr`` a value. A quarter less time per refused row on
# SQLite than a ``json_quote`` per value; on PostgreSQL 1M rows took 1.8 s instead of 3.3 s.
#: the middles of the separators respaced: SQLite's ``","`` and ``":"``, PostgreSQL's ``" : "``
SQLITE_SEPARATOR_MIDDLES: tuple[str, ...] = (",", ":")
PG_SEPARATOR_MIDDLES: tuple[str, ...] = (" : ",)


def _spaced(compact: Any) -> Any:
    """SQLite's ``json_object`` of strings (``{"a":"x","b":"y"}``) with Python's separators."""
    return sa.func.replace(sa.func.replace(compact, '","', '", "'), '":"', '": "', type_=sa.Text)


def _pg_object(names: Sequence[str], columns: Mapping[str, Any]) -> Any:
    """PostgreSQL's ``json_object(keys, values)`` (``{"a" : "x", "b" : "y"}``) with Python's separators."""
    from sqlalchemy.dialects import postgresql

    keys = postgresql.array([_text(n) for n in names], type_=sa.Text)
    values = postgresql.array([columns[n] for n in names], type_=sa.Text)
    return sa.func.replace(sa.cast(sa.func.json_object(keys, values), sa.Text), '" : "', '": "', type_=sa.Text)


# -- each rule's problems ------------------------------------------------------------------------
def _problems(rule: RuleShape, value: Any, words: Mapping[str, str], d: Dialect) -> Any:
    """A present value's problems under one rule, each as "; column: words", or ''."""

    def problem(key: str, **fields: Piece) -> Any:
        return _render(f"; {_escape(rule.column)}: {words[key]}", fields)

    def lengths(what: str, length: Any) -> list[tuple[Any, Any]]:
        found = []
        if rule.high is not None:
            found.append((length > rule.high, problem("too_long", what=what, length=length, high=rule.high)))
        if rule.low is not None:
            found.append((length < rule.low, problem("too_short", what=what, length=length, low=rule.low)))
        return found

    shown = _shown(value, d)
    if rule.kind == "boolean":
        cases = [(not_boolean(value, d), problem("not_boolean", value=shown))]
    elif rule.kind == "string":
        cases = lengths("length", sa.func.length(value))
    elif rule.kind == "integer":
        number = integer_parts(value, d)
        cases = [(number.malformed, problem("not_integer", value=shown)), *lengths("digits", number.digits)]
    else:
        number = float_parts(value, d)
        malformed = (number.malformed, problem("not_number", value=shown))
        if rule.precision is None:
            cases = [malformed, *lengths("digits", number.digits)]
        else:  # both digit counts may fail at once: two problems
            p, s = rule.precision
            before = sa.case((number.whole > p - s, problem("whole_digits", whole=number.whole, allowed=p - s,
                                                            spec=rule.spec)), else_=_text(""))
            after = sa.case((number.fraction > s, problem("fraction_digits", fraction=number.fraction,
                                                          allowed=s, spec=rule.spec)), else_=_text(""))
            short = [sa.case(*lengths("digits", number.digits), else_=_text(""))] if rule.low is not None else []
            cases = [malformed, (sa.true(), _concat(before, after, *short))]
    return sa.case(*cases, else_=_text("")) if cases else _text("")


def _unsure(rule: RuleShape, value: Any, d: Dialect) -> Any:
    """Could the checks judge this value otherwise than SQL? (beyond ASCII in a number or a boolean, which
    also counts a NUL on SQLite; a NUL in any SQLite text)."""
    if rule.kind == "string":
        return d.has_nul(value)
    return d.octets(value) != sa.func.length(value)


# -- text in SQL ---------------------------------------------------------------------------------
def _render(template: str, fields: Mapping[str, Piece]) -> Any:
    """A ``str.format`` template with SQL expressions (or plain values) in its fields."""
    pieces: list[Piece] = []
    for literal, field, _, _ in string.Formatter().parse(template):
        pieces.append(literal)
        if field is not None:
            pieces.append(fields[field])
    return _concat(*pieces)


def _escape(text: str) -> str:
    """A column name inside a template: its braces are text, not fields."""
    return text.replace("{", "{{").replace("}", "}}")


def _concat(*pieces: Piece) -> Any:
    """``||`` over the pieces; neighbouring literals are joined first and everything else is made text (so
    PostgreSQL never sees two untyped literals, or a number, beside ``||``)."""
    merged: list[Any] = []
    for piece in pieces:
        if isinstance(piece, int) and not isinstance(piece, bool):
            piece = str(piece)
        if isinstance(piece, str):
            if merged and isinstance(merged[-1], str):
                merged[-1] += piece
            elif piece:
                merged.append(piece)
            continue
        assert not isinstance(piece, bool)  # (an int to the types, never given)
        if not isinstance(piece.type, sa.String):  # a count, or a function of unknown type
            piece = sa.cast(piece, sa.Text)
        merged.append(piece)
    parts = [_text(p) if isinstance(p, str) else p for p in merged] or [_text("")]
    return balanced(_chained, parts)  # a row of 1,599 columns: a chain SQLite and SQLAlchemy cannot nest


def _chained(*parts: Any) -> Any:
    """``a || b || …``."""
    return reduce(lambda a, b: a.op("||", return_type=sa.Text)(b), parts)


def _text(value: str) -> Any:
    return sa.literal(value, sa.Text)


def _json(value: Any, d: Dialect) -> Any:
    """A text value as a JSON string."""
    return sa.cast(sa.func.to_json(value), sa.Text) if d.postgres else sa.func.json_quote(value, type_=sa.Text)


def _shown(value: Any, d: Dialect) -> Any:
    """The value as the checks show it: JSON, cut to ``SHOWN`` characters with "…" last."""
    quoted = _json(value, d)
    return sa.case((sa.func.length(quoted) <= SHOWN, quoted),
                   else_=_concat(sa.func.substr(quoted, 1, SHOWN - 1), "…"))
