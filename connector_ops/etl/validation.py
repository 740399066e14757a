"""Validate (spec 2.7, 4.C): check rows against a schema of per-column rules.

The schema is compiled once into one small check per column (a malformed schema is a 400 naming the
column before any row is read). A refused row goes to ``rejected`` as ``{error, content}`` where the
error names every failing column and rule; accepted rows go to ``validated`` unchanged.

``content`` may also be a virtual file id: the store then reads the rows by keyset pages and writes two
new virtual files (accepted rows with the source's columns; ``error``/``content`` rows) in one
transaction, and ``validated``/``rejected`` are their ids — memory stays bounded whatever the size.

Numbers follow research/etl.md §4: strings are checked with strict patterns (no exponents, spaces,
``NaN`` or ``_``); a float's ``maxLength "p,s"`` reads as SQL ``DECIMAL(p,s)``: at most ``s`` digits
after the point (trailing zeros not counted) and ``p−s`` before it (leading zeros not counted).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from connector_ops.etl import models as m
from connector_ops.kernel.errors import InvalidInput
from connector_ops.kernel.limits import check_column_names
from connector_ops.kernel.progress import PHASE, track
from connector_ops.registry import action
from connector_ops.resources.virtual_files.shapes import SCAN_BATCH, Verdicts
from connector_ops.resources.virtual_files.store import VirtualFileStore

RULES = ("type", "minLength", "maxLength", "required")
TYPES = ("string", "integer", "float", "boolean")
REQUIRED_KEYS = ("value", "allowEmpty")
_INTEGER = re.compile(r"[+-]?(\d+)")
_FLOAT = re.compile(r"[+-]?(?:(\d+)(?:\.(\d*))?|\.(\d+))")
_PRECISION = re.compile(r"\s*(\d+)\s*,\s*(\d+)\s*")

#: the words of every problem, one place for both renderings: :func:`row_error` here, and the SQL that words
#: the refused rows in the database (``resources/virtual_files/refusal_sql.py``); ``{value}`` is the value as
#: JSON (:func:`_show`), the other fields are numbers or the rule's own text
WORDING = {
    "missing": "required value is missing",
    "empty": "required value is empty",
    "too_long": "{what} {length} is more than maxLength {high}",
    "too_short": "{what} {length} is less than minLength {low}",
    "not_string": "{value} is not a string",
    "not_integer": "{value} is not an integer",
    "not_number": "{value} is not a number",
    "not_boolean": "{value} is not a boolean (true or false)",
    "whole_digits": "{whole} digits before the decimal point, at most {allowed} allowed (maxLength {spec})",
    "fraction_digits": "{fraction} digits after the decimal point, at most {allowed} allowed (maxLength {spec})",
}

#: a value check: the value (present, not None) -> the problems with it, in words (empty: fine)
Check = Callable[[Any], Sequence[str]]
OK: tuple[str, ...] = ()


@dataclass(frozen=True)
class ColumnRule:
    column: str
    required: bool
    allow_empty: bool
    check: Check
    # the rule's parameters, for clearing rows in SQL (connector_ops.resources.virtual_files.suspect_sql)
    kind: str = "string"
    low: int | None = None
    high: int | None = None
    precision: tuple[int, int] | None = None
    spec: str = ""  # a float's "p,s" maxLength as the errors show it (JSON)


# -- compiling the schema ------------------------------------------------------------------------
def compile_schema(schema: Mapping[str, Any]) -> list[ColumnRule]:
    """One rule per column; the column names first as every path takes them (:func:`.check_column_names`): an
    empty name, which no file's column can have, failed every row as "required value is missing"."""
    check_column_names(list(schema), "schema")
    return [_compile_rule(column, rule) for column, rule in schema.items()]


def _compile_rule(column: str, rule: Any) -> ColumnRule:
    field = f"schema.{column}"
    if not isinstance(rule, Mapping):
        raise InvalidInput(field, f"a rule must be an object like {{\"type\": \"string\"}}, got {_show(rule)}")
    unknown = [k for k in rule if k not in RULES]
    if unknown:
        raise InvalidInput(field, f"unknown rule {unknown[0]!r} (rules: {', '.join(RULES)})")
    kind = rule.get("type")
    if kind not in TYPES:
        problem = "is required" if kind is None else f"unknown type {_show(kind)}"
        raise InvalidInput(f"{field}.type", f"{problem} (types: {', '.join(TYPES)})")
    required, allow_empty = _required(field, rule.get("required", False))
    low = _count(f"{field}.minLength", rule.get("minLength"))
    high = rule.get("maxLength")
    if kind == "boolean" and (low is not None or high is not None):
        raise InvalidInput(field, "minLength/maxLength do not apply to a boolean")
    if kind == "float" and isinstance(high, str):
        precision = _precision(f"{field}.maxLength", high)
        if low is not None and low > precision[0]:
            raise InvalidInput(field, f"minLength {low} is more than the {precision[0]} digits maxLength "
                                      f"{_show(high)} allows")
        return ColumnRule(column, required, allow_empty, _float_check(low, None, precision, high), kind, low, None,
                          precision, _show(high))
    high = _count(f"{field}.maxLength", high, decimal_form=kind == "float")
    if low is not None and high is not None and low > high:
        raise InvalidInput(field, f"minLength {low} is more than maxLength {high}")
    checks: dict[str, Callable[[], Check]] = {
        "string": lambda: _string_check(low, high),
        "integer": lambda: _integer_check(low, high),
        "float": lambda: _float_check(low, high, None, high),
        "boolean": lambda: _boolean_check,
    }
    return ColumnRule(column, required, allow_empty, checks[kind](), kind, low, high)


def _required(field: str, value: Any) -> tuple[bool, bool]:
    """``true``/``false``, or the object form ``{"value": bool, "allowEmpty": bool}``."""
    if isinstance(value, bool):
        return value, False
    if isinstance(value, Mapping):
        unknown = [k for k in value if k not in REQUIRED_KEYS]
        if unknown:
            raise InvalidInput(f"{field}.required", f"unknown key {unknown[0]!r} (keys: value, allowEmpty)")
        flag, allow_empty = value.get("value"), value.get("allowEmpty", False)
        if not isinstance(flag, bool) or not isinstance(allow_empty, bool):
            raise InvalidInput(f"{field}.required", 'the object form is {"value": true|false, "allowEmpty": '
                                                    'true|false}; value is required')
        return flag, allow_empty
    raise InvalidInput(f"{field}.required", f"must be a boolean or {{\"value\": boolean}}, got {_show(value)}")


def _count(field: str, value: Any, *, decimal_form: bool = False) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        hint = ' or "<digits>,<decimals>"' if decimal_form else ""
        if isinstance(value, str) and not decimal_form:
            hint = ' (the "<digits>,<decimals>" form is for type float)'
        raise InvalidInput(field, f"must be a non-negative whole number{hint}, got {_show(value)}")
    return value


def _precision(field: str, text: str) -> tuple[int, int]:
    match = _PRECISION.fullmatch(text)
    if not match:
        raise InvalidInput(field, f'must be "<digits>,<decimals>" like "5,2", got {_show(text)}')
    p, s = int(match[1]), int(match[2])
    if p < 1 or s > p:
        raise InvalidInput(field, f'"{text}": digits must be at least 1 and decimals at most digits')
    return p, s


# -- the checks ----------------------------------------------------------------------------------
def _lengths(what: str, length: int, low: int | None, high: int | None) -> Sequence[str]:
    if high is not None and length > high:
        return [WORDING["too_long"].format(what=what, length=length, high=high)]
    if low is not None and length < low:
        return [WORDING["too_short"].format(what=what, length=length, low=low)]
    return OK


def _string_check(low: int | None, high: int | None) -> Check:
    def check(value: Any) -> Sequence[str]:
        if not isinstance(value, str):
            return [WORDING["not_string"].format(value=_show(value))]
        return _lengths("length", len(value), low, high)

    return check


def _number_text(value: Any) -> str | None:
    """A JSON number as plain decimal text; strings as they are; anything else None."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        return None
    number = value if isinstance(value, Decimal) else Decimal(str(value))  # a Decimal: read from JSON text
    return format(number, "f") if number.is_finite() else None


def _integer_check(low: int | None, high: int | None) -> Check:
    def check(value: Any) -> Sequence[str]:
        text = _number_text(value)
        match = _INTEGER.fullmatch(text) if text is not None else None
        if match is None:
            return [WORDING["not_integer"].format(value=_show(value))]
        digits = len(match[1].lstrip("0")) or 1
        return _lengths("digits", digits, low, high)

    return check


def _float_check(low: int | None, high: int | None, precision: tuple[int, int] | None, spec: Any) -> Check:
    def check(value: Any) -> Sequence[str]:
        text = _number_text(value)
        match = _FLOAT.fullmatch(text) if text is not None else None
        if match is None:
            return [WORDING["not_number"].format(value=_show(value))]
        whole = (match[1] or "").lstrip("0")
        fraction = ((match[2] if match[1] is not None else match[3]) or "").rstrip("0")
        digits = max(1, len(whole) + len(fraction))
        if precision is not None:  # each digit count, then minLength: every problem, as SQL words them
            p, s = precision
            problems = []
            if len(whole) > p - s:
                problems.append(WORDING["whole_digits"].format(whole=len(whole), allowed=p - s, spec=_show(spec)))
            if len(fraction) > s:
                problems.append(WORDING["fraction_digits"].format(fraction=len(fraction), allowed=s,
                                                                  spec=_show(spec)))
            return [*problems, *_lengths("digits", digits, low, None)] or OK
        return _lengths("digits", digits, low, high)

    return check


def _boolean_check(value: Any) -> Sequence[str]:
    if isinstance(value, bool) or (isinstance(value, str) and value.lower() in ("true", "false")):
        return OK
    return [WORDING["not_boolean"].format(value=_show(value))]


def _show(value: Any, limit: int = 40) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def row_error(rules: list[ColumnRule], row: Mapping[str, Any]) -> str | None:
    """Every failing column and rule in words, or None when the row is valid (the hot loop: no allocation
    for a valid row)."""
    problems: list[str] | None = None
    for rule in rules:
        value = row.get(rule.column)
        if value is None or (value == "" and not rule.allow_empty):
            if rule.required:
                problems = problems or []
                problems.append(f"{rule.column}: {WORDING['missing' if value is None else 'empty']}")
            continue
        found = rule.check(value)
        if found:
            problems = problems or []
            problems.extend(f"{rule.column}: {p}" for p in found)
    return "; ".join(problems) if problems is not None else None


_content: Callable[[Mapping[str, Any]], str] = json.JSONEncoder(ensure_ascii=False).encode  # = json.dumps(row, …)


# -- the action ----------------------------------------------------------------------------------
@action("etl.validate", m.ValidateInput, m.ValidateOutput, resources=("virtual_files",), not_found_status=404,
        extra_inputs={"virtual_file_id": "content", "content": "content"})
def validate(inp: m.ValidateInput, virtual_files: VirtualFileStore) -> m.ValidateOutput:
    """Split rows into validated and rejected ({error, content}) by the schema's column rules."""
    rules = compile_schema(inp.schema_)
    if isinstance(inp.content, str):
        accepted, refused = validate_file(virtual_files, inp.content, rules)
        return m.ValidateOutput(validated=accepted, rejected=refused)
    validated: list[dict[str, Any]] = []
    rejected: list[m.RejectedRow] = []
    for row in inp.content:
        error = row_error(rules, row)
        if error is None:
            validated.append(row)
        else:
            rejected.append(m.RejectedRow(error=error, content=_content(row)))
    return m.ValidateOutput(validated=validated, rejected=rejected)


def validate_file(store: VirtualFileStore, vf_id: str, rules: list[ColumnRule],
                  batch_size: int | None = None) -> tuple[str, str]:
    """Validate a virtual file into two new ones (accepted rows, ``error``/``content`` rows); their ids.
    The page size is read when called (``SCAN_BATCH`` unless given), so a test can make pages small."""

    def refuse(row: Mapping[str, Any]) -> tuple[str, str] | None:
        error = row_error(rules, row)
        return None if error is None else (error, _content(row))

    # the database judges the rows it can in SQL statements: a phase, as Join's
    with track(f"validate {vf_id}: checking rows", None, PHASE):
        return store.split_rows(vf_id, refuse, ["error", "content"], batch_size or SCAN_BATCH,
                                verdicts=Verdicts(rules, WORDING))
