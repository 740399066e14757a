"""A pipeline written inline in ``defs.yaml``: Dagster's ``{{ … }}`` rendered at load, our ``${…}`` kept.

Dagster's resolver renders every attribute string as a Jinja *native* template: it would also turn a quoted
``"2024"`` into the number 2024 and fail on text that merely looks like Jinja. So the inline pipeline (and
``set:``) get their own resolver: only strings holding ``{{`` or ``{%`` go through Dagster's rendering (with its
scope: ``env``, ``context``, …); every other value, ``${step.field}`` references included, reaches the DSL
untouched and is resolved when the step runs. The result is checked by the DSL's own validator with the lines
of ``defs.yaml``, so a problem reads ``…/defs.yaml:14: step load: …``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dagster.components import ResolutionContext
from dagster.components.resolved.errors import ResolutionException
from dagster.components.resolved.scopes import EnvScope
from dagster_shared.yaml_utils.source_position import SourcePositionTree
from jinja2 import Undefined

from connector_ops.pipelines.dsl.source import NOT_FOUND, Document, value_of_key

_JINJA_MARKS = ("{{", "{%")


class UnsetVariable(Undefined):
    """``{{ env.X }}`` of a variable that is not set. Dagster's ``env.X`` gives None, which Jinja writes as the
    text ``None`` inside a longer string: a deployment that forgot ``REGION`` would silently get the job
    ``customers_none``. This value is falsy and Jinja's ``default`` filter replaces it (``{% if env.X %}``,
    ``{{ env.X | default('eu') }}``, ``{{ env.X or 'eu' }}`` keep working), but writing it out — alone, in a
    string, through a filter such as ``lower`` — fails the load, and Dagster reports the line of
    ``defs.yaml``."""

    __str__ = Undefined._fail_with_undefined_error


class LoadEnvScope(EnvScope):
    """Dagster's ``env`` (``env('X')``, ``env('X', 'default')``), whose ``env.X`` of an unset variable is an
    :class:`UnsetVariable` instead of None."""

    def __getattr__(self, key: str) -> Any:
        value = super().__getattr__(key)  # raises AttributeError for Jinja's own probes
        if value is not None:
            return value
        return UnsetVariable(hint=f"environment variable {key} is not set (`env.{key}`): set it, or give a "
                                  f"default: `env('{key}', 'value')` or `env.{key} | default('value')`", name=key)


def render_templates(context: ResolutionContext, value: Any) -> Any:
    """``value`` with Dagster's templates rendered in the strings that hold one, everything else as written
    (:func:`as_pipeline_file`); ``{{ env.X }}`` of an unset variable fails instead of writing ``None``
    (:class:`UnsetVariable`)."""
    return _render(context.with_scope(env=LoadEnvScope()), as_pipeline_file(context, value))


def as_pipeline_file(context: ResolutionContext, value: Any) -> Any:
    """The attribute ``value`` read from ``defs.yaml`` again as a pipeline file is read
    (:func:`~connector_ops.pipelines.dsl.source.value_of_key`). Dagster's YAML reads 1.1's base-60 numbers:
    an inline step's ``closes: 17:45`` reached the DSL as 1065 (``09:30`` as text), where the same pipeline
    in a file keeps ``"17:45"``. ``value`` as Dagster read it where the file cannot be read again."""
    tree: SourcePositionTree | None = context.source_position_tree
    for part in context.path:
        tree = None if tree is None else tree.children.get(part)
    if tree is None or not isinstance(value, Mapping | list):  # a scalar: text or a number typed as one
        return value
    try:
        text = Path(tree.position.filename).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return value
    again = value_of_key(text, tree.position.start.line, tree.position.start.col)
    return value if again is NOT_FOUND else again


def _render(context: ResolutionContext, value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _render(context.at_path(key), item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_render(context.at_path(i), item) for i, item in enumerate(value)]
    if isinstance(value, str) and any(mark in value for mark in _JINJA_MARKS):
        try:
            return context.resolve_value(value)
        except ResolutionException as exc:
            raise _located(context, exc) from None
    return value


def _located(context: ResolutionContext, exc: ResolutionException) -> ResolutionException:
    """``exc`` said on the line of ``defs.yaml`` and the attribute whose template raised it. Dagster locates
    what Jinja refuses (``env.X`` unset, an unknown name), but passes ``env('X')``'s own refusal of an unset
    variable on bare: the load failed naming the variable, not where it is written."""
    file, lines = yaml_lines(context)
    if str(exc).startswith(f"{file}:"):
        return exc
    field = ".".join(str(part) for part in context.path)
    return ResolutionException(f"{file}:{lines.get((), 1)} - {field}: {exc}")


def yaml_lines(context: ResolutionContext) -> tuple[str, dict[tuple[str | int, ...], int]]:
    """The file of the value ``context`` points at and the line of each path below it (1-based)."""
    tree: SourcePositionTree | None = context.source_position_tree
    if tree is None:
        return "<defs.yaml>", {}
    file = tree.position.filename
    for part in context.path:
        child = tree.children.get(part)
        if child is None:
            return file, {(): tree.position.start.line}
        tree = child
    lines: dict[tuple[str | int, ...], int] = {}
    _collect(tree, (), lines)
    return file, lines


def _collect(tree: SourcePositionTree, path: tuple[str | int, ...], lines: dict[tuple[str | int, ...], int]) -> None:
    lines[path] = tree.position.start.line
    for key, child in tree.children.items():
        _collect(child, (*path, key), lines)


def inline_document(context: ResolutionContext, raw: Any) -> Document:
    """The inline pipeline as a DSL document: templates rendered, located in ``defs.yaml``."""
    file, lines = yaml_lines(context)
    return Document(data=render_templates(context, raw), file=file, lines=lines)
