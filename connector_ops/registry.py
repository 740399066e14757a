"""The action registry: ``"etl.push"`` -> input model, action function, output shape, error style.

Every entry point (Dagster op, :func:`invoke`, CLI, IPython magic, YAML pipeline step) goes through
:func:`run_action`, so input validation, error mapping and output serialisation happen in one place.
"""

from __future__ import annotations

import difflib
import importlib
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from connector_ops.kernel.cut_blocks import end_cut_blocks
from connector_ops.kernel.errors import ConnectorError, ConnectorOpsError, InvalidInput, NotFound, field_path, host_of
from connector_ops.kernel.limits import check_payload
from connector_ops.kernel.platform_file import PresentWhen
from connector_ops.kernel.secrets import named_instead

log = logging.getLogger("connector_ops")

#: Fields that other actions produce; an op exposes each of them as an optional Dagster input.
WIRABLE_FIELDS = {
    "platformFile": "platform_file",
    "virtualFileId": "virtual_file_id",
    "fileId": "file_id",
    "folderId": "folder_id",
    "id": "id",
}

#: spec field -> the kind of value it holds, for the fields whose kind never depends on the input
#: (Validate's ``validated`` is rows or an id, as its ``content`` was): a YAML reference from one kind into
#: the other is a load error, a Python wiring a failed type check
FIELD_KINDS = {"platformFile": "platform file", "virtualFileId": "virtual file id",
               "rejectionFileId": "virtual file id", "rejectsFileId": "virtual file id"}


@dataclass(frozen=True)
class ActionSpec:
    """Everything the entry points need to know about one action."""

    name: str  # "etl.push"
    input_model: type[BaseModel]
    output_model: type[BaseModel] | None  # None: a bare output ("ok", null)
    fn: Callable[..., Any]
    resource_keys: tuple[str, ...]
    summary: str
    not_found_status: int = 500  # the spec's status for "not found" (404 where the spec lists it)
    null_error_body: bool = False  # Clean answers errors with the body null
    extra_inputs: Mapping[str, str] = field(default_factory=dict)  # op input name -> input field
    #: its input's strings may hold a NUL: rows' values or a filter's operands, which the store keeps and finds
    #: where its database can (SQLite, as Push keeps a file's) and refuses where it cannot (PostgreSQL); the
    #: model (or the filter parser, for a column name) refuses one anywhere else
    nul_in_values: bool = False

    @property
    def connector(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def short_name(self) -> str:
        return self.name.split(".", 1)[1]

    @property
    def op_name(self) -> str:
        return self.name.replace(".", "_")

    @property
    def output_fields(self) -> list[str]:
        """Spec names of the output fields; empty for a bare output (op output ``result``)."""
        if self.output_model is None:
            return []
        return [f.alias or n for n, f in self.output_model.model_fields.items()]

    @property
    def optional_output_fields(self) -> set[str]:
        """Output fields present only when they apply (extensions such as Push's ``rejectsFileId``)."""
        if self.output_model is None:
            return set()
        return {f.alias or n for n, f in self.output_model.model_fields.items() if not f.is_required()}

    def outputs_present(self, payload: Any) -> frozenset[str]:
        """The optional output fields the input ``payload`` (spec names) guarantees: those marked
        :class:`PresentWhen` whose condition it sets (Push's ``rejectsFileId`` with ``onRowError:
        quarantine``). A YAML step refers to them like any output; the generic op does not have them."""
        return frozenset(name for name, when in self.present_when.items() if when.holds(payload))

    @property
    def present_when(self) -> dict[str, PresentWhen]:
        """Optional output field -> the input setting that makes the output always hold it."""
        if self.output_model is None:
            return {}
        return {f.alias or n: mark for n, f in self.output_model.model_fields.items()
                for mark in f.metadata if isinstance(mark, PresentWhen)}

    @property
    def wirable_inputs(self) -> dict[str, str]:
        """Op input name -> spec field name for the fields other actions can feed."""
        names = {f.alias or n for n, f in self.input_model.model_fields.items()}
        wired = {py: spec for spec, py in WIRABLE_FIELDS.items() if spec in names}
        wired.update(self.extra_inputs)
        return wired


ACTIONS: dict[str, ActionSpec] = {}


#: reStructuredText's inline literal, ``x``
_LITERAL = re.compile(r"``(.+?)``")


def summary_text(line: str) -> str:
    """A docstring's first line as the one-line summary users read (``connector-ops actions``, ``%etl``):
    reStructuredText's double backticks become the single ones of plain text and Markdown."""
    return _LITERAL.sub(r"`\1`", line)


def action(
    name: str,
    input_model: type[BaseModel],
    output_model: type[BaseModel] | None,
    *,
    resources: tuple[str, ...],
    not_found_status: int = 500,
    null_error_body: bool = False,
    extra_inputs: Mapping[str, str] | None = None,
    nul_in_values: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn(inp, **resources)`` as the one implementation of the action ``name``."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        doc = (fn.__doc__ or "").strip().splitlines()
        ACTIONS[name] = ActionSpec(
            name=name,
            input_model=input_model,
            output_model=output_model,
            fn=fn,
            resource_keys=resources,
            summary=summary_text(doc[0]) if doc else name,
            not_found_status=not_found_status,
            null_error_body=null_error_body,
            extra_inputs=dict(extra_inputs or {}),
            nul_in_values=nul_in_values,
        )
        return fn

    return register


#: action -> the module whose import registers it. Explicit, so that an action loads only its own module
#: (``etl.iterate`` never imports Join's or Map's code), and a module that fails to register fails loudly.
ACTION_MODULES = {
    **dict.fromkeys(["etl.push", "etl.pull", "etl.iterate", "etl.query", "etl.append_rows", "etl.clean"],
                    "connector_ops.etl.actions"),
    "etl.delete_rows": "connector_ops.etl.delete_rows",
    "etl.map": "connector_ops.etl.mapping",
    "etl.validate": "connector_ops.etl.validation",
    "etl.join": "connector_ops.etl.joins",
    **dict.fromkeys(["drive.rename", "drive.create_file", "drive.move", "drive.delete_file",
                     "drive.create_shared_link", "drive.copy_file", "drive.create_folder", "drive.upload_file",
                     "drive.download_file", "drive.list", "drive.delete_folder"], "connector_ops.drive.actions"),
    "mail.send_transactional_message": "connector_ops.mail.actions",
}
CONNECTORS = ("etl", "drive", "mail")


def load_all() -> None:
    """Import every action's module, so that ``ACTIONS`` holds them all (listings, ops, the YAML DSL)."""
    for name in ACTION_MODULES:
        _load(name)


def _load(name: str) -> ActionSpec:
    if name not in ACTIONS:
        importlib.import_module(ACTION_MODULES[name])
        if name not in ACTIONS:
            raise RuntimeError(f"{ACTION_MODULES[name]} did not register the action {name!r}")
    return ACTIONS[name]


def get_action(name: str) -> ActionSpec:
    """The action ``name`` (``etl.push``; ``etl-push`` and ``etl_push`` are accepted too). Only its own
    module is imported, so one action never pays for the others' libraries."""
    name = canonical_name(name)
    if name not in ACTION_MODULES:
        raise ConnectorError(400, {"message": unknown_action_message(name)}, action=name)
    return _load(name)


def canonical_name(name: str) -> str:
    """``etl-query`` / ``etl_query`` / ``etl.query`` -> ``etl.query`` (the magics' and ops' spellings)."""
    text = str(name).strip()
    for sep in ("-", "_"):
        connector, found, rest = text.partition(sep)
        if found and "." not in text and connector in CONNECTORS:
            return f"{connector}.{rest.replace('-', '_')}"
    return text


def closest_name(name: str, known: Iterable[str]) -> str | None:
    """The name of ``known`` that ``name`` most likely meant: one differing only in case first
    (``virtualFileID`` -> ``virtualFileId``, which difflib scores below its cutoff), else the closest."""
    known = list(known)
    same = [k for k in known if k.lower() == name.lower()]
    if same:
        return same[0]
    close = difflib.get_close_matches(name.lower(), [k.lower() for k in known], n=1)
    return next((k for k in known if close and k.lower() == close[0]), None)


def unknown_action_message(name: str) -> str:
    """``unknown action 'etl.qury'; did you mean 'etl.query'?`` (else the list of actions)."""
    close = difflib.get_close_matches(name, ACTION_MODULES, n=3, cutoff=0.6)
    if close:
        return f"unknown action {name!r}; did you mean {' or '.join(repr(c) for c in close)}?"
    return f"unknown action {name!r}; known actions: {', '.join(sorted(ACTION_MODULES))}"


#: input models of platform files (a path given instead gets a message saying what one is)
PLATFORM_FILE_MODELS = frozenset({"PlatformFile", "PushFile", "AttachmentFile", "UploadFile"})
PLATFORM_FILE_HINT = ("must be a platform file — the descriptor {name, contentType, link, size, …} actions pass "
                      "between them, not a path; `connector-ops files add PATH` stores a local file and prints one")


#: (action, a field it does not have) -> what the user most likely meant: the field the spec gives the same
#: value in (Iterate and Validate take a virtual file id in ``content``, where other actions name it)
UNKNOWN_FIELD_HINTS = {
    ("etl.iterate", "virtualFileId"): "etl.iterate takes the virtual file id in `content`",
    ("etl.validate", "virtualFileId"): "etl.validate takes the virtual file id (or rows) in `content`",
}


def unknown_field_hint(action: str | None, loc: tuple[Any, ...]) -> str | None:
    """The hint of :data:`UNKNOWN_FIELD_HINTS` for the unknown top-level input field at ``loc``, if any."""
    return UNKNOWN_FIELD_HINTS.get((action or "", str(loc[0]))) if len(loc) == 1 else None


def problem_of(err: Mapping[str, Any], action: str | None = None) -> str:
    """One pydantic error in users' words (no internal class names); ``action``'s hint for a field it lacks."""
    msg = str(err["msg"])
    if err["type"] == "missing":
        return "is required"
    if err["type"] == "extra_forbidden":
        hint = unknown_field_hint(action, tuple(err["loc"]))
        return f"is not a known field ({hint})" if hint else "is not a known field"
    if err["type"] in ("model_type", "model_attributes_type") and \
            (err.get("ctx") or {}).get("class_name") in PLATFORM_FILE_MODELS:
        return f"{PLATFORM_FILE_HINT}; got {type(err.get('input')).__name__}"
    return msg.removeprefix("Value error, ")


#: problems named in one message; an Append of 100,000 rows each missing a field would otherwise be megabytes
PROBLEMS_SHOWN = 10


#: field location -> how a message names the value there instead of showing it (:meth:`.Deferred.named`)
Named = Mapping[tuple[str | int, ...], str]


def describe_validation_error(exc: ValidationError, action: str | None = None, named: Named | None = None) -> str:
    """Turn pydantic's report into ``rows[0].content: problem; …`` with spec (camelCase) field names: the first
    :data:`PROBLEMS_SHOWN` problems, then how many more there are; ``action``'s hints for fields it lacks.
    ``named``: fields whose value must not be shown (read from the environment); a problem at, under or above
    one names it instead (:func:`.secrets.named_instead`)."""
    parts = []
    for err in exc.errors(include_url=False):
        loc = field_path(err["loc"])
        msg = _naming_hidden(problem_of(err, action), err, named or {})
        parts.append(f"{loc}: {msg}" if loc else msg)
    problems = list(dict.fromkeys(parts))
    more = len(problems) - PROBLEMS_SHOWN
    if more > 0:
        problems[PROBLEMS_SHOWN:] = [f"and {more} more problem{'s' * (more > 1)}"]
    return "; ".join(problems)


def _naming_hidden(message: str, err: Mapping[str, Any], named: Named) -> str:
    """``message`` of one pydantic error with each hidden value it may show (:data:`Named`) replaced by its name:
    the error's input is that value or part of it (an error at or under the field), or holds it (a check of the
    object around it)."""
    loc = tuple(p for p in err["loc"] if not str(p).startswith("function-"))
    for where, name in named.items():
        if loc[:len(where)] == where:
            message = named_instead(message, err.get("input"), name)
        elif where[:len(loc)] == loc:
            found, inner = _item_at(err.get("input"), where[len(loc):])
            if found:
                message = named_instead(message, inner, name)
    return message


def _item_at(value: Any, location: tuple[str | int, ...]) -> tuple[bool, Any]:
    """``(True, item)`` at ``location`` inside ``value`` (mappings and lists); ``(False, None)`` if not there."""
    for key in location:
        try:
            value = value[key]
        except (KeyError, IndexError, TypeError):
            return False, None
    return True, value


def parse_input(spec: ActionSpec, payload: Any, named: Named | None = None) -> BaseModel:
    if isinstance(payload, spec.input_model):
        return payload
    if not isinstance(payload, Mapping):
        raise ConnectorError(
            400, {"message": f"input must be a JSON object, got {type(payload).__name__}"}, action=spec.name
        )
    try:
        # depth, long integers, NUL: before pydantic or any action code sees it
        check_payload(payload, nul=not spec.nul_in_values)
    except InvalidInput as exc:
        raise ConnectorError(400, {"message": str(exc)}, action=spec.name) from None
    try:
        return spec.input_model.model_validate(dict(payload))
    except ValidationError as exc:
        raise ConnectorError(400, {"message": describe_validation_error(exc, spec.name, named)},
                             action=spec.name) from None


def error_for(spec: ActionSpec | None, exc: BaseException, *, action: str | None = None) -> ConnectorError:
    """Map a precise error to the spec's status and body for this action.

    ``spec`` ``None``: the error of a step that is no action (a pipeline step's reference resolver, a check),
    named ``action``: a precise error keeps its own status and words, as no spec rewrites them."""
    name = spec.name if spec is not None else action
    if isinstance(exc, ConnectorError):
        exc.action = exc.action or name
        return exc
    detail = None
    if isinstance(exc, InvalidInput):
        status, message = 400, str(exc)
    elif isinstance(exc, NotFound) and spec is not None:
        status, detail = spec.not_found_status, str(exc)
        # the spec fixes ETL's 404 body; which file, and why, stays in the detail (the op's failure and log).
        # NotFound's words name ids and links as messages show them (link_shown: no password, no query)
        message = "not found" if status == 404 and spec.connector == "etl" else detail
    elif isinstance(exc, ConnectorOpsError):
        status, message = exc.status, str(exc)
    else:
        log.debug("unexpected error in %s", name, exc_info=exc)
        status, message = 500, describe_unexpected(exc)
    body = None if spec is not None and spec.null_error_body and status >= 500 else {"message": message}
    # only a provider's transient failure may be retried; invalid input, not found and anything nobody
    # anticipated would fail the same way again
    retryable = isinstance(exc, ConnectorOpsError) and exc.retryable
    return ConnectorError(status, body, action=name, detail=detail or message, retryable=retryable)


#: the modules of the database drivers whose errors the column-wise loads raise without SQLAlchemy around them
_DRIVERS = frozenset({"sqlite3", "psycopg", "adbc_driver_manager", "adbc_driver_sqlite"})


def describe_unexpected(exc: BaseException) -> str:
    """One line for an error nobody anticipated. A database error shows the driver's own message, not
    SQLAlchemy's multi-line report with the statement and its parameters (row data)."""
    orig = getattr(exc, "orig", None)  # sqlalchemy.exc.DBAPIError wraps the driver's exception
    if orig is None and type(exc).__module__.split(".")[0] in _DRIVERS:  # a driver's own, unwrapped (loaders)
        orig = exc
    if orig is not None:
        first = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
        return f"database error: {first}"
    if isinstance(exc, ValidationError):  # a resource's settings (e.g. made by hand): one line, no value
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg'].removeprefix('Value error, ')}"
                             for e in exc.errors(include_url=False, include_input=False))
        return f"invalid {exc.title}: {problems}"
    request = getattr(exc, "_request", None)  # an httpx error: name the host (never credentials, path or query)
    if request is not None:
        return f"{type(exc).__name__} talking to {host_of(request.url)}: {exc}"
    return f"{type(exc).__name__}: {exc}"


def serialise_output(spec: ActionSpec, out: Any) -> Any:
    """The spec's JSON output. Field values are already JSON types (rows are lists of dicts), so only
    nested models are dumped: walking 10,000 rows through pydantic again would double Iterate's cost."""
    if not isinstance(out, BaseModel):
        return out
    return {
        (info.alias or name): _json_value(value)
        for name, info in type(out).model_fields.items()
        if (value := getattr(out, name)) is not None or info.is_required()  # optional extensions: only when set
    }


def _json_value(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(by_alias=True, mode="json")
    if isinstance(value, list) and value and isinstance(value[0], BaseModel):
        return [v.model_dump(by_alias=True, mode="json") for v in value]
    return value


def configured(spec: ActionSpec, resources: Mapping[str, Any], keys: Iterable[str] | None = None) -> dict[str, Any]:
    """The resources of ``keys`` (the action's own by default) from ``resources``; a 500 naming those missing
    or ``None`` (``resources={}`` passed by hand): the set-up is at fault, not the input, and the action
    would otherwise fail inside with a ``KeyError`` or ``AttributeError`` that says nothing of it."""
    keys = spec.resource_keys if keys is None else tuple(keys)
    missing = [k for k in keys if resources.get(k) is None]
    if missing:
        raise ConnectorError(500, {"message": f"resources not configured: {', '.join(missing)}"}, action=spec.name)
    return {k: resources[k] for k in keys}


def run_action(spec: ActionSpec, payload: Any, resources: Mapping[str, Any], named: Named | None = None) -> Any:
    """Validate ``payload``, run the action with its resources and return the spec's JSON output. ``named``:
    fields read from the environment, which a validation error names instead of showing (:data:`Named`)."""
    inp = parse_input(spec, payload, named)
    given = configured(spec, resources)
    try:
        out = spec.fn(inp, **given)
    except Exception as exc:  # every failure leaves as a ConnectorError with the spec's status
        interrupt = interrupt_under(exc)
        if interrupt is not None:
            log.debug("%s: error while interrupted", spec.name, exc_info=exc)
            end_cut_blocks(exc)
            raise interrupt from None
        raise error_for(spec, exc) from exc
    except BaseException as exc:  # a Stop: a transaction whose block it cut is ended now, not at the next error
        end_cut_blocks(exc)
        raise
    return serialise_output(spec, out)


def interrupt_under(exc: BaseException) -> BaseException | None:
    """The interrupt (Ctrl-C's or Jupyter's ``KeyboardInterrupt``, Dagster's: any ``BaseException`` but a
    generator's close and ``SystemExit``, which a Map function's ``sys.exit()`` raises and the Map reports as
    its failure) that ``exc`` was raised while handling, if any: an error of the clean-up an interrupt ran
    into (a statement on the connection it invalidated, SQLAlchemy's own ``assert`` in a commit it cut short)
    replaced it, and a stopped action answered "failed (500)" instead of stopping. The interrupt is what
    happened."""
    seen: set[int] = set()
    cause: BaseException | None = exc.__context__
    while cause is not None and id(cause) not in seen:
        if not isinstance(cause, (Exception, GeneratorExit, SystemExit)):
            return cause
        seen.add(id(cause))
        cause = cause.__context__
    return None
