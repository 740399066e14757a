"""``${…}`` references inside step inputs: parsing, finding and resolving them.

Forms (docs/pipelines.md): ``${step.field[.sub…]}`` (an earlier step's output; ``${step}`` is the
whole output), ``${env.NAME}`` / ``${env.NAME:-default}`` (environment, parsed as JSON when it is
JSON, but for a whole field the action takes as text: :meth:`EnvFields.value`;
the default also stands in for a variable set but empty), ``${batch.rows}`` /
``${batch.index}`` / ``${batch.virtualFileId}`` (inside a ``foreach`` step), ``${trigger.fileId}`` /
``${trigger.name}`` / ``${trigger.folderId}`` (the drive file that started the run) and
``${file:path}`` (a local file — a relative path from the pipeline file's folder, an absolute one as it
is, ``..`` allowed: read with the step process's rights, so a pipeline file is code to review — stored as
a platform file when the step runs; ``${file:path?name=rows.json&contentType=application/json}`` stores
it under another name and content type, URL-encoded as a query string). A string that is exactly one reference takes the
referenced value with its JSON type; inside a longer string the value is interpolated (strings as is,
other values as compact JSON). ``$${`` writes a literal ``${``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from connector_ops.kernel.deferred_values import Deferred
from connector_ops.kernel.errors import InvalidInput
from connector_ops.kernel.platform_file import check_file_name, check_media_type

_TOKEN = re.compile(r"\$\$\{|\$\{([^{}]*)\}")
_SEGMENT = re.compile(r"^[A-Za-z0-9_-]+$")
#: a closed ``${…}`` not escaped (``$${`` writes ``${``), well formed or not: what is meant as a reference (the
#: loader's checks and the editor's JSON schema, whose regular expressions need no lookbehind)
CLOSED_REFERENCE = r"(?:^|[^$])\$\{[^{}]*\}"

ENV, BATCH, TRIGGER, FILE = "env", "batch", "trigger", "file"
#: roots that are not step ids
RESERVED_ROOTS = frozenset({ENV, BATCH, TRIGGER, FILE})
BATCH_FIELDS = ("rows", "index", "virtualFileId")
TRIGGER_FIELDS = ("fileId", "name", "folderId")
#: what ``${file:path?…}`` may set on the stored file (as ``%connectors add-file --name/--content-type``)
FILE_OPTIONS = ("name", "contentType")

Location = tuple[str | int, ...]


@dataclass(frozen=True)
class Ref:
    """One ``${…}``: ``root`` is a step id or a reserved root, ``path`` the fields below it."""

    root: str
    path: tuple[str, ...] = ()
    text: str = ""
    default: str | None = None  # ``${env.NAME:-default}``
    options: tuple[tuple[str, str], ...] = ()  # ``${file:path?name=…&contentType=…}``

    @property
    def is_file(self) -> bool:
        return self.root == FILE


class ReferenceSyntaxError(ValueError):
    pass


def _parse_ref(inner: str) -> Ref:
    body = inner.strip()
    text = "${" + inner + "}"
    if body.startswith(FILE + ":"):
        path, _, query = body[len(FILE) + 1:].partition("?")
        path = path.strip()
        if not path:
            raise ReferenceSyntaxError(f"{text}: the file path is empty")
        return Ref(FILE, (path,), text, options=_file_options(query, text))
    default = None
    if body.startswith(ENV + ".") and ":-" in body:
        body, default = body.split(":-", 1)
    parts = body.split(".")
    bad = [p for p in parts if not _SEGMENT.fullmatch(p)]
    if not body or bad:
        raise ReferenceSyntaxError(f"{text} is not a reference; write ${{step.field}}, ${{env.NAME}} or ${{file:path}}")
    return Ref(parts[0], tuple(parts[1:]), text, default)


def _file_options(query: str, text: str) -> tuple[tuple[str, str], ...]:
    """``name=a.json&contentType=application/json`` -> the options, each known, once, not empty."""
    problem = ReferenceSyntaxError(f"{text}: after ? write {'=…&'.join(FILE_OPTIONS)}=… (each once, not empty)")
    try:
        options = parse_qsl(query, keep_blank_values=True, strict_parsing=True) if query else []
    except ValueError:
        raise problem from None
    keys = [k for k, _v in options]
    if any(k not in FILE_OPTIONS for k in keys) or len(set(keys)) < len(keys) or not all(v for _k, v in options):
        raise problem
    for key, value in options:  # the checks the store makes when the step adds the file: refused now, not mid-run
        try:
            _FILE_OPTION_CHECKS[key](value)
        except ValueError as exc:
            raise ReferenceSyntaxError(f"{text}: {key} {exc}") from None
    return tuple(options)


#: each option's check, the platform file store's (``clean_name``, ``clean_content_type``)
_FILE_OPTION_CHECKS: dict[str, Callable[[str], Any]] = {"name": check_file_name, "contentType": check_media_type}


def parse_template(text: str) -> list[str | Ref]:
    """Split a string into literal parts and references (raises :class:`ReferenceSyntaxError`)."""
    parts: list[str | Ref] = []
    pos = 0
    literal = ""
    for match in _TOKEN.finditer(text):
        literal += _unopened(text, text[pos:match.start()])
        pos = match.end()
        if match.group(0) == "$${":
            literal += "${"
            continue
        if literal:
            parts.append(literal)
            literal = ""
        parts.append(_parse_ref(match.group(1)))
    literal += _unopened(text, text[pos:])
    if literal:
        parts.append(literal)
    return parts


def _unopened(text: str, between: str) -> str:
    """``between`` (text outside every reference) when it opens none; an unclosed ``${`` would otherwise be
    taken as literal text, its dependency silently dropped and its field left unchecked."""
    if "${" in between:
        raise ReferenceSyntaxError(f"{text!r}: a reference opened with ${{ is not closed with }} (nor may it "
                                   "hold { or }); write $${ for a literal ${")
    return between


def is_template(text: str) -> bool:
    """Whether ``text`` holds a reference (a string whose reference syntax is broken holds none)."""
    try:
        return any(isinstance(part, Ref) for part in parse_template(text))
    except ReferenceSyntaxError:
        return False


def exact_ref(value: Any) -> Ref | None:
    """The reference if ``value`` is a string that is exactly one reference."""
    if not isinstance(value, str):
        return None
    parts = parse_template(value)
    return parts[0] if len(parts) == 1 and isinstance(parts[0], Ref) else None


def walk_strings(value: Any, location: Location = ()) -> Iterator[tuple[Location, str]]:
    """Every string inside ``value`` (dict values and list items, recursively) with its location."""
    if isinstance(value, str):
        yield location, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from walk_strings(item, (*location, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from walk_strings(item, (*location, i))


def find_refs(value: Any, location: Location = ()) -> Iterator[tuple[Location, Ref, bool]]:
    """``(location, ref, exact)`` for every reference inside ``value``."""
    for loc, text in walk_strings(value, location):
        parts = parse_template(text)
        exact = len(parts) == 1
        for part in parts:
            if isinstance(part, Ref):
                yield loc, part, exact


def has_refs(value: Any) -> bool:
    return any(True for _ in find_refs(value))


def unescape(value: Any) -> Any:
    """``value`` with ``$${`` turned into ``${`` (for values without references)."""
    if isinstance(value, str):
        return value.replace("$${", "${")
    if isinstance(value, Mapping):
        return {k: unescape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unescape(v) for v in value]
    return value


@dataclass
class Scope:
    """What references resolve against when a step runs."""

    steps: Mapping[str, Any] = field(default_factory=dict)  # step id -> {output field: value} or bare value
    environ: Mapping[str, str] = field(default_factory=dict)
    batch: Mapping[str, Any] | None = None
    trigger: Mapping[str, Any] | None = None
    add_file: Callable[[str, Mapping[str, str]], Any] | None = None  # (path, FILE_OPTIONS) -> descriptor


def _env_text(environ: Mapping[str, str], name: str, ref: Ref) -> str:
    """The variable's text. ``:-default`` stands in when it is unset *or empty*, as the shell's ``${NAME:-default}``
    does: ``NAME=`` in an env file or a blank ConfigMap key means "not given", and an empty folder id or delimiter
    is never what the default was written for. Without a default an empty variable is the empty text."""
    raw = environ.get(name)
    if not raw and ref.default is not None:
        return ref.default
    if raw is None:
        raise InvalidInput(ref.text, f"environment variable {name} is not set")
    return raw


def _env_value(environ: Mapping[str, str], name: str, ref: Ref, exact: bool) -> Any:
    raw = _env_text(environ, name, ref)
    if not exact:
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _descend(value: Any, path: tuple[str, ...], ref: Ref) -> Any:
    for i, key in enumerate(path):
        if isinstance(value, Mapping) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            where = ".".join((ref.root, *path[:i])) or ref.root
            raise InvalidInput(ref.text, f"{where} has no {key!r}")
    return value


def lookup(ref: Ref, scope: Scope, *, exact: bool = True) -> Any:
    """The value a reference stands for in ``scope``."""
    if ref.root == ENV:
        return _descend(_env_value(scope.environ, ref.path[0], ref, exact), ref.path[1:], ref)
    if ref.root == FILE:
        if scope.add_file is None:
            raise InvalidInput(ref.text, "files cannot be added here")
        return scope.add_file(ref.path[0], dict(ref.options))
    if ref.root == BATCH:
        if scope.batch is None:
            raise InvalidInput(ref.text, "${batch…} is only available inside a foreach step")
        return _descend(scope.batch, ref.path, ref)
    if ref.root == TRIGGER:
        return _descend(scope.trigger or {}, ref.path, ref)
    if ref.root not in scope.steps:
        raise InvalidInput(ref.text, f"step {ref.root!r} has no output here")
    return _descend(scope.steps[ref.root], ref.path, ref)


def _interpolated(value: Any) -> str:
    """How a referenced value reads inside a longer string: strings as they are, others as compact JSON."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def resolve_text(text: str, scope: Scope) -> str:
    """``text`` with every reference read as text, even when it is the whole string (an environment value as
    the variable's raw text, never parsed as JSON): for settings that are always text, such as the drive folder
    a sensor watches (``${env.ID}`` holding ``1e3`` is the folder ``1e3``, not ``1000.0``)."""
    return "".join(p if isinstance(p, str) else _interpolated(lookup(p, scope, exact=False))
                   for p in parse_template(text))


def _joined(parts: Sequence[str | Ref], scope: Scope) -> Any:
    """The value of one template string: an exact reference keeps its JSON type, else the parts joined."""
    if len(parts) == 1 and isinstance(parts[0], Ref):
        return lookup(parts[0], scope)
    return "".join(p if isinstance(p, str) else _interpolated(lookup(p, scope, exact=False)) for p in parts)


def resolve(value: Any, scope: Scope) -> Any:
    """``value`` with every reference replaced (exact ones keep their JSON type)."""
    return _resolve(value, scope, (), None)


def resolve_deferring_env(value: Any, scope: Scope) -> Any:
    """:func:`resolve` for a value the step-output store keeps: each string holding an ``${env.…}`` stays an
    :class:`EnvFields` entry (the variable's name, its other references resolved now), read by the action op
    when it runs; the store would otherwise keep a secret until gc. Each is read once here too, so a variable
    that is not set fails this step, as before."""
    pending: dict[Location, tuple[str | Ref, ...]] = {}
    resolved = _resolve(value, scope, (), pending)
    return EnvFields(resolved, tuple(pending.items())) if pending else resolved


def _resolve(value: Any, scope: Scope, location: Location,
             pending: dict[Location, tuple[str | Ref, ...]] | None) -> Any:
    if isinstance(value, str):
        parts = parse_template(value)
        if pending is None or not any(isinstance(p, Ref) and p.root == ENV for p in parts):
            return _joined(parts, scope)
        exact = len(parts) == 1
        kept = tuple(p if exact or isinstance(p, str) or p.root == ENV else _interpolated(lookup(p, scope, exact=False))
                     for p in parts)
        _joined(kept, scope)  # an unset variable is this step's 400
        pending[location] = kept
        return None
    if isinstance(value, Mapping):
        return {k: _resolve(v, scope, (*location, k), pending) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, scope, (*location, i), pending) for i, v in enumerate(value)]
    return value


@dataclass(frozen=True)
class EnvFields(Deferred):
    """Resolved input fields but for their ``${env.…}`` strings, kept as ``(location, parts)``: what a step
    stores on its way to the action op, which reads the variables where it runs (:class:`.Deferred`)."""

    fields: Any
    env: tuple[tuple[Location, tuple[str | Ref, ...]], ...]

    def value(self, environ: Mapping[str, str], model: Any = None) -> Any:
        """The fields with their variables read from ``environ``. A whole ``${env.NAME}`` put into a field of
        ``model`` that takes text keeps the variable's text (``REPORT_NAME=2024`` is the name ``2024``): read as
        JSON it would be a number the field refuses."""
        from connector_ops.pipelines.dsl.field_annotations import takes_text  # pydantic, only where a model is given

        scope = Scope(environ=environ)
        fields = self.fields
        for location, parts in self.env:
            only = parts[0] if len(parts) == 1 else None
            if isinstance(only, Ref) and len(only.path) == 1 and model is not None and takes_text(model, location):
                value: Any = _env_text(environ, only.path[0], only)
            else:
                value = _joined(parts, scope)
            fields = _replaced(fields, location, value)
        return fields

    def named(self) -> dict[Location, str]:
        """``the value of ${env.X}`` (the whole field) or ``the text made with ${env.X}`` (a longer string) by
        field location: what an error about the field says in place of the value."""
        names: dict[Location, str] = {}
        for location, parts in self.env:
            refs = ", ".join(p.text for p in parts if isinstance(p, Ref))
            names[location] = f"the value of {refs}" if len(parts) == 1 else f"the text made with {refs}"
        return names


def _replaced(value: Any, location: Location, new: Any) -> Any:
    """``value`` with ``new`` at ``location``, copying only the containers on the way."""
    if not location:
        return new
    head, rest = location[0], location[1:]
    copy = dict(value) if isinstance(value, Mapping) else list(value)
    copy[head] = _replaced(value[head], rest, new)  # type: ignore[index]  # a key of a mapping, an index of a list
    return copy
