"""What Map's ``action`` string names: registered row functions, built-ins, or ``package.module:function``.

A row function takes a row (``dict[str, str]``, missing columns left out) plus the step's arguments and
returns the new row, or ``None`` to drop it. ``action`` is a pipeline of steps separated by ``|``::

    trim | lower(email) | rename(mail=email) | default(country=FR) | mypkg.rows:fix_phone(phone)

A step is ``name`` or ``name(arg, key=value, …)``; every argument is a string. Bare arguments are
trimmed and may not contain ``, ( ) = | "``; anything else is written as a JSON string (``"a, b"``).
The whole pipeline is resolved before any row is read, so a typo is a 400 that changes nothing.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from connector_ops.etl.map_builtins import BUILTINS, Row, RowFunction, StepFactory
from connector_ops.kernel.errors import InvalidInput

F = TypeVar("F", bound=Callable[..., Any])

FIELD = "action"
_STEPS: dict[str, StepFactory] = {}
_NAME = re.compile(r"[A-Za-z_][\w.]*(?::[A-Za-z_][\w.]*)?")
_BARE = re.compile(r'[^,()=|"]+')


def map_action(name: str) -> Callable[[F], F]:
    """Register ``fn(row, *args, **kwargs)`` as the Map action ``name`` (usable in pipelines).

    >>> @map_action("add_vat")
    ... def add_vat(row, column="price", rate="0.2"):
    ...     row[column] = f"{float(row[column]) * (1 + float(rate)):.2f}"
    ...     return row
    """
    if not _NAME.fullmatch(name) or ":" in name:
        raise ValueError(f"invalid map action name {name!r}: letters, digits, _ and dots")

    def register(fn: F) -> F:
        _STEPS[name] = _binding(fn, name)
        return fn

    return register


def registered() -> list[str]:
    return sorted({**BUILTINS, **_STEPS})


def _binding(fn: Callable[..., Any], label: str) -> StepFactory:
    """A factory for a plain row function: the arguments must fit its signature."""
    try:
        signature: inspect.Signature | None = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have no signature: let the call decide
        signature = None

    def factory(args: tuple[str, ...], kwargs: dict[str, str]) -> RowFunction:
        if signature is not None:
            try:
                signature.bind({}, *args, **kwargs)
            except TypeError as exc:
                raise ValueError(f"{label}: arguments do not fit {label}{signature} ({exc})") from None
        if not args and not kwargs:
            return fn
        return lambda row: fn(row, *args, **kwargs)

    return factory


@dataclass(frozen=True)
class Step:
    name: str
    args: tuple[str, ...]
    kwargs: dict[str, str]


def parse_pipeline(text: str) -> list[Step]:
    """``"trim | rename(a=b)"`` -> steps; ``InvalidInput`` on ``action`` saying where it went wrong."""
    steps: list[Step] = []
    pos = 0

    def fail(problem: str) -> InvalidInput:
        return InvalidInput(FIELD, f"{problem} at character {pos + 1} of {text!r}")

    def skip_space() -> None:
        nonlocal pos
        while pos < len(text) and text[pos].isspace():
            pos += 1

    def token() -> str:
        nonlocal pos
        skip_space()
        if pos < len(text) and text[pos] == '"':
            try:
                value, end = json.JSONDecoder().raw_decode(text, pos)
            except json.JSONDecodeError as exc:
                raise fail(f"unterminated or invalid quoted string ({exc.msg})") from None
            pos = end
            return value
        match = _BARE.match(text, pos)
        if not match or not match.group().strip():
            raise fail("expected an argument")
        pos = match.end()
        return match.group().strip()

    while True:
        skip_space()
        match = _NAME.match(text, pos)
        if not match:
            raise fail("expected a step name")
        name, pos = match.group(), match.end()
        args: list[str] = []
        kwargs: dict[str, str] = {}
        skip_space()
        if pos < len(text) and text[pos] == "(":
            pos += 1
            skip_space()
            if pos < len(text) and text[pos] == ")":
                pos += 1
            else:
                while True:
                    first = token()
                    skip_space()
                    if pos < len(text) and text[pos] == "=":
                        pos += 1
                        if first in kwargs:
                            raise fail(f"{first!r} is given twice")
                        kwargs[first] = token()
                        skip_space()
                    elif kwargs:
                        raise fail("a positional argument cannot follow a key=value argument")
                    else:
                        args.append(first)
                    if pos < len(text) and text[pos] == ",":
                        pos += 1
                        continue
                    if pos < len(text) and text[pos] == ")":
                        pos += 1
                        break
                    raise fail("expected ',' or ')'")
        steps.append(Step(name, tuple(args), kwargs))
        skip_space()
        if pos == len(text):
            return steps
        if text[pos] != "|":
            raise fail("expected '|' between steps")
        pos += 1


def resolve(text: str) -> RowFunction:
    """The row function for a whole ``action`` pipeline (steps applied left to right)."""
    functions = [_resolve_step(step) for step in parse_pipeline(text)]
    if len(functions) == 1:
        return functions[0]

    def pipeline(row: Row) -> Mapping[str, Any] | None:
        current: Any = row
        for fn in functions:
            current = fn(current)
            if current is None:
                return None
            if not isinstance(current, dict):
                current = dict(current)
        return current

    return pipeline


def _resolve_step(step: Step) -> RowFunction:
    if ":" in step.name:
        factory = _binding(_import(step.name), step.name)
    elif step.name in _STEPS or step.name in BUILTINS:
        factory = _STEPS.get(step.name) or BUILTINS[step.name]
    else:
        raise InvalidInput(FIELD, f"unknown map action {step.name!r}; use a built-in ({', '.join(registered())}), "
                                  "a name registered with @map_action, or package.module:function")
    try:
        return factory(step.args, step.kwargs)
    except ValueError as exc:
        raise InvalidInput(FIELD, str(exc)) from None


def _import(reference: str) -> Callable[..., Any]:
    module_name, _, attribute = reference.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInput(FIELD, f"cannot import {module_name!r} ({exc})") from None
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise InvalidInput(FIELD, f"{module_name!r} has no attribute {attribute!r}") from None
    if not callable(target):
        raise InvalidInput(FIELD, f"{reference!r} is not callable")
    return target
