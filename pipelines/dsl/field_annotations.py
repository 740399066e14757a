"""Predicates over the annotations pydantic models give their fields: which fields a model has, the type
found at a location below it, and what values a type holds (text only, one value, always a list, always an
object).

``pipeline validate``'s wiring checks (:mod:`.wiring`: a list or an object wired where one value goes) and
the reading of ``${env.…}`` values (:meth:`.references.Deferred.value`: a field that takes text keeps the
variable's text, ``REPORT_NAME=2024`` is the name ``2024``, not the number pydantic then refuses for
``exportName``) ask the same questions of the same annotations, so they are answered once, here.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

from pydantic import BaseModel

_SCALARS = {str: "text", int: "a number", float: "a number", bool: "true or false"}


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


def _union_members(annotation: Any) -> tuple[Any, ...] | None:
    """The members of ``X | Y`` (``typing.Union`` or ``|``) but ``None``'s type; ``None`` if not a union."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(a for a in typing.get_args(annotation) if a is not type(None))
    return None


def _without_none(annotation: Any) -> Any:
    """``X`` of ``X | None``; the annotation itself otherwise."""
    members = _union_members(annotation)
    return members[0] if members is not None and len(members) == 1 else annotation


def annotation_at(model: Any, location: tuple[str | int, ...], *, through_containers: bool = False) -> Any:
    """The type at ``location`` below ``model``, through its models' fields; ``None`` where that is unknown.
    ``through_containers``: also through ``X | None``, list items (an ``int`` key) and mapping values, as a
    value is put into an input (``recipients.0.to``); without, models only, as the wiring checks name a field."""
    current: Any = model
    for key in location:
        if through_containers:
            current = _without_none(current)
            origin, args = typing.get_origin(current), typing.get_args(current)
            if isinstance(key, int) and origin is list:
                current = args[0] if args else None
                continue
            if isinstance(key, str) and origin is dict:
                current = args[1] if len(args) == 2 else None
                continue
            if not isinstance(key, str):
                return None
        if fields_of(current) is None:
            return None
        current = field_annotation(current, str(key))
    return current


def takes_text(model: Any, location: tuple[str | int, ...]) -> bool:
    """Whether the field at ``location`` of ``model`` (through nested models, lists and mappings) takes text
    only (``str`` or ``str | None``): a value of another type there is always refused."""
    return _without_none(annotation_at(model, location, through_containers=True)) is str


def scalar_name(annotation: Any) -> str | None:
    """``text``, ``a number``, ``true or false`` for a type that only holds such values (and perhaps null);
    ``None`` for any other (an object, a list, ``Any``, unknown)."""
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    if typing.get_origin(annotation) is Literal:
        return "text" if all(isinstance(a, str) for a in typing.get_args(annotation)) else None
    members = _union_members(annotation)
    if members is not None:
        names = {scalar_name(a) for a in members}
        return names.pop() if len(names) == 1 else None
    return None


def is_object(annotation: Any) -> bool:
    """Whether a value of type ``annotation`` is always a mapping (a model, a dict; perhaps null)."""
    if (isinstance(annotation, type) and issubclass(annotation, BaseModel)) or annotation is dict:
        return True
    if typing.get_origin(annotation) is dict:
        return True
    members = _union_members(annotation)
    return bool(members and all(is_object(a) for a in members))


def takes_list(annotation: Any) -> bool:
    """Whether a field of type ``annotation`` may hold a list (``list[…]``, ``Any``, or a union with one)."""
    if annotation is Any or annotation is list or typing.get_origin(annotation) is list:
        return True
    return any(takes_list(a) for a in _union_members(annotation) or ())


def only_lists(annotation: Any) -> bool:
    """Whether a field of type ``annotation`` always holds a list (``list[…]``, or a union of lists and
    ``None``): Validate's ``validated`` (rows or an id) is not, whatever it holds in one run."""
    if annotation is list or typing.get_origin(annotation) is list:
        return True
    members = _union_members(annotation)
    return bool(members and all(only_lists(a) for a in members))
