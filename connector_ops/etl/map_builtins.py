"""Map's built-in steps: a small set that composes with ``|`` (see docs/etl-transforms.md).

Each is a factory: it checks its arguments once (a wrong argument is a 400 before any row is read) and
returns the row function. Column arguments name columns; a column a row does not have is left alone,
except where said otherwise. Every step keeps the column order of the row.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

Row = dict[str, str]
RowFunction = Callable[[Row], Mapping[str, Any] | None]
#: a step factory: the step's (args, kwargs) -> the row function (raises ValueError for bad arguments)
StepFactory = Callable[[tuple[str, ...], dict[str, str]], RowFunction]

#: name -> factory of every built-in step (user functions are registered in map_functions)
BUILTINS: dict[str, StepFactory] = {}


def step_factory(name: str) -> Callable[[StepFactory], StepFactory]:
    """Register a factory that checks its arguments once and returns the row function."""

    def register(factory: StepFactory) -> StepFactory:
        BUILTINS[name] = factory
        return factory

    return register

CASTS = ("integer", "float", "boolean", "string")
TRUE_WORDS, FALSE_WORDS = {"true", "yes", "y", "1", "on"}, {"false", "no", "n", "0", "off"}
_INTEGER = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
#: the decimal exponents a cast float may have: a double's range (a float written out past it would be
#: hundreds of digits, and is no double any reader can load)
_FLOAT_EXPONENTS = range(-308, 309)


def _only_columns(name: str, kwargs: dict[str, str]) -> None:
    if kwargs:
        raise ValueError(f"{name}: takes column names only, got {sorted(kwargs)}")


def _only_pairs(name: str, args: tuple[str, ...], kwargs: dict[str, str], what: str) -> None:
    if args or not kwargs:
        raise ValueError(f"{name}: takes {what} pairs, e.g. {name}(column=…)")


def _each_value(name: str, args: tuple[str, ...], kwargs: dict[str, str],
                change: Callable[[str], str]) -> RowFunction:
    """A step that changes the value of the named columns (every column when none is named)."""
    _only_columns(name, kwargs)
    columns = args

    def step(row: Row) -> Row:
        for column in columns or list(row):
            value = row.get(column)
            if value is not None:
                row[column] = change(value)
        return row

    return step


@step_factory("trim")
def trim(args: tuple[str, ...], kwargs: dict[str, str]) -> RowFunction:
    """``trim`` / ``trim(a, b)``: strip leading and trailing whitespace."""
    return _each_value("trim", args, kwargs, str.strip)


@step_factory("upper")
def upper(args: tuple[str, ...], kwargs: dict[str, str]) -> RowFunction:
    """``upper(a, …)``: upper case (every column when none is named)."""
    return _each_value("upper", args, kwargs, str.upper)


@step_factory("lower")
def lower(args: tuple[str, ...], kwargs: dict[str, str]) -> RowFunction:
    """``lower(a, …)``: lower case (every column when none is named)."""
    return _each_value("lower", args, kwargs, str.lower)


@step_factory("rename")
def rename(args: tuple[str, ...], kwargs: dict[str, str]) -> RowFunction:
    """``rename(old=new, …)``: rename columns in place (same position)."""
    _only_pairs("rename", args, kwargs, "old=new")
    if len(set(kwargs.values())) != len(kwargs):
        raise ValueError("rename: two columns cannot get the same new name")
    mapping = dict(kwargs)

    def renamed(row: Row) -> Row:
        out = {mapping.get(k, k): v for k, v in row.items()}
        if len(out) < len(row):  # a new name that the row already had: refuse rather than lose a value
            clash = sorted(new for old, new in mapping.items() if old in row and new in row)
            raise ValueError(f"rename: column {clash[0]!r} already exists")
        return out

    return renamed


@step_factory("drop")
def drop(args: tuple[str, ...], kwargs: dict[str, str]) -> RowFunction:
    """``drop(a, …)``: remove columns."""
    _only_columns("drop", kwargs)
    if not args:
        raise ValueError("drop: name the columns to remove")
    gone = set(args)
    return lambda row: {k: v for k, v in row.items() if k not in gone}


@step_factory("keep")
def keep(args: tuple[str, ...], kwargs: dict[str, str]) -> RowFunction:
    """``keep(a, …)``: keep only these columns, in this order."""
    _only_columns("keep", kwargs)
    if not args:
        raise ValueError("keep: name the columns to keep")
    return lambda row: {k: row[k] for k in args if k in row}


@step_factory("default")
def default(args: tuple[str, ...], kwargs: dict[str, str]) -> RowFunction:
    """``default(a=value, …)``: set the value where the column is missing or empty."""
    _only_pairs("default", args, kwargs, "column=value")
    defaults = dict(kwargs)

    def step(row: Row) -> Row:
        for column, value in defaults.items():
            if not row.get(column):
                row[column] = value
        return row

    return step


@step_factory("set")
def set_(args: tuple[str, ...], kwargs: dict[str, str]) -> RowFunction:
    """``set(a=value, …)``: set the value in every row (adds the column if needed)."""
    _only_pairs("set", args, kwargs, "column=value")
    values = dict(kwargs)

    def step(row: Row) -> Row:
        row.update(values)
        return row

    return step


@step_factory("cast")
def cast(args: tuple[str, ...], kwargs: dict[str, str]) -> RowFunction:
    """``cast(a=integer, b=float, c=boolean)``: normalise the text of a value to its type's canonical form.

    integer ``" 007"`` → ``"7"``; float ``"1.50"`` → ``"1.5"``; boolean true/yes/y/1/on → ``"true"``
    (false/no/n/0/off → ``"false"``, any case). Missing and empty values are left alone; a value that
    is not of the type fails the Map with the row number.
    """
    _only_pairs("cast", args, kwargs, f"column=type ({'/'.join(CASTS)})")
    unknown = {c: t for c, t in kwargs.items() if t not in CASTS}
    if unknown:
        raise ValueError(f"cast: unknown type(s) {unknown}; use {', '.join(CASTS)}")
    converters = {c: _CONVERTERS[t] for c, t in kwargs.items()}

    def step(row: Row) -> Row:
        for column, convert in converters.items():
            value = row.get(column)
            if value:
                row[column] = convert(column, value)
        return row

    return step


def _to_integer(column: str, value: str) -> str:
    text = value.strip()
    if not _INTEGER.fullmatch(text):
        raise ValueError(f"cast: {column}={value!r} is not an integer")
    return str(int(text))


def _to_float(column: str, value: str) -> str:
    """Plain decimal text with a point, every digit kept and none added (``"1e3"`` → ``"1000.0"``,
    ``"123456789012345678"`` → ``"123456789012345678.0"``): what Validate's float rule accepts, where a
    double's ``repr`` wrote ``1.2345678901234568e+17``, a digit lost and an exponent the rule refuses."""
    text = value.strip()
    if not _FLOAT.fullmatch(text):
        raise ValueError(f"cast: {column}={value!r} is not a number")
    number = Decimal(text)
    if number and number.adjusted() not in _FLOAT_EXPONENTS:
        raise ValueError(f"cast: {column}={value!r} is out of a float's range (exponents -308 to 308)")
    whole, _, fraction = format(number, "f").partition(".")
    return f"{whole}.{fraction.rstrip('0') or '0'}"


def _to_boolean(column: str, value: str) -> str:
    word = value.strip().lower()
    if word in TRUE_WORDS:
        return "true"
    if word in FALSE_WORDS:
        return "false"
    raise ValueError(f"cast: {column}={value!r} is not a boolean")


_CONVERTERS: dict[str, Callable[[str, str], str]] = {
    "integer": _to_integer, "float": _to_float, "boolean": _to_boolean, "string": lambda _c, v: v,
}


@step_factory("concat")
def concat(args: tuple[str, ...], kwargs: dict[str, str]) -> RowFunction:
    """``concat(target, a, b, …, sep=" ")``: target = the present values of a, b, … joined by sep."""
    extra = set(kwargs) - {"sep"}
    if extra or len(args) < 2:
        raise ValueError("concat: concat(target, column, …, sep=' ') — a target and at least one column")
    target, sources, sep = args[0], args[1:], kwargs.get("sep", "")

    def step(row: Row) -> Row:
        parts = [row[c] for c in sources if row.get(c) is not None]
        if parts:
            row[target] = sep.join(parts)
        return row

    return step
