"""The type an action's input model gives a field, found by the field's location (``recipients.0.to``).

Used where a value is put into a field and its type decides how to read it: an ``${env.…}`` value, parsed as
JSON when it is JSON, stays the variable's text in a field that takes text (``REPORT_NAME=2024`` is the name
``2024``, not the number pydantic then refuses for ``exportName``)."""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel


def fields_of(model: Any) -> list[str] | None:
    """The field names (aliases, the spec's camelCase) of a pydantic model; ``None`` for anything else."""
    if isinstance(model, type) and issubclass(model, BaseModel):
        return [f.alias or n for n, f in model.model_fields.items()]
    return None


def field_annotation(model: type[BaseModel], name: str) -> Any:
    """The annotation of the field spelled ``name`` (alias first) in ``model``; ``None`` when it has none."""
    for n, f in model.model_fields.items():
        if (f.alias or n) == name:
            return f.annotation
    return None


def _without_none(annotation: Any) -> Any:
    """``X`` of ``X | None``; the annotation itself otherwise."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
        return kinds[0] if len(kinds) == 1 else annotation
    return annotation


def takes_text(model: Any, location: tuple[str | int, ...]) -> bool:
    """Whether the field at ``location`` of ``model`` (through nested models, lists and mappings) takes text
    only (``str`` or ``str | None``): a value of another type there is always refused."""
    current: Any = model
    for key in location:
        current = _without_none(current)
        origin = typing.get_origin(current)
        if isinstance(key, int) and origin is list:
            current = typing.get_args(current)[0] if typing.get_args(current) else None
        elif isinstance(key, str) and origin is dict:
            args = typing.get_args(current)
            current = args[1] if len(args) == 2 else None
        elif isinstance(key, str) and fields_of(current) is not None:
            current = field_annotation(current, key)
        else:
            return False
    return _without_none(current) is str
