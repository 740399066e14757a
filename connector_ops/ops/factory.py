"""Build the Dagster op of an action from its registry entry, so every op behaves the same way.

* config: the action's JSON input (spec field names); fields other actions produce are optional;
* inputs: ``platform_file``, ``virtual_file_id``, ``file_id``, ``folder_id``, ``id`` (where the action
  has the field) override the config when wired; ``fields`` (a dict of input fields computed upstream,
  e.g. by a pipeline step's reference resolver) overrides the config; ``after`` (Nothing) orders steps;
* outputs: one per output field, snake_case; a bare output (``"ok"``, ``null``, ``{}``) is ``result``;
* metadata: Dagster's standard keys (see :mod:`connector_ops.ops.metadata`), durations, byte counts;
* failure: ``dagster.Failure`` whose metadata carries the spec's status and body; a ``RetryPolicy``
  retries it only when the error is ``retryable`` (a provider's 429/5xx/connection failure);
* pools: Drive ops run in the pool ``google_drive``, the mail op in ``mailjet`` (:data:`POOLS`);
* the definition: in a job compiled from a pipeline file, a step first checks that its process loaded the
  version of the file its run was launched with (:func:`ensure_launched_definition`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
import types
import typing
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

import dagster as dg
import dagster._core.errors as dagster_errors
from dagster._utils.error import SerializableErrorInfo
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.alias_generators import to_snake

from connector_ops.kernel.deferred_values import Deferred
from connector_ops.kernel.errors import ConnectorError, ConnectorOpsError
from connector_ops.kernel.notices import warnings_to
from connector_ops.kernel.progress import reporting_to
from connector_ops.ops.asset_files import check_asset_input, publish
from connector_ops.ops.metadata import materialization_metadata, output_metadata, read_metadata, run_metadata
from connector_ops.ops.progress_log import step_progress
from connector_ops.ops.types import type_check_error, type_of
from connector_ops.registry import ActionSpec, error_for, get_action, run_action

#: Dagster pools (concurrency limits set with ``dagster instance concurrency set``, or the instance's
#: ``concurrency.pools`` settings) by connector: runs at once share a provider's rate limit
POOLS = {"drive": "google_drive", "mail": "mailjet"}
_SCALARS = {str: str, int: int, float: float, bool: bool}
#: job tag (copied into each run's tags at launch) with the digest of the pipeline file the job was compiled from
PIPELINE_DIGEST_TAG = "connector_ops/pipeline_digest"
#: the connector-ops version of the process that compiled a pipeline's job, and so of the runs launched from it
VERSION_TAG = "connector_ops/version"
#: job metadata key: the pipeline file the job was compiled from
PIPELINE_FILE_METADATA = "connector_ops/pipeline_file"
#: a step refused because its process loaded another version of the pipeline than its run was launched with
STALE_DEFINITION_STATUS = 409


def _config_type(annotation: Any, *, choices: bool = True) -> Any:
    """A Dagster config type for a pydantic annotation (structure shown in the launchpad).

    ``choices``: a ``Literal`` of strings becomes a Dagster enum (a dropdown; a typo refused at launch, before any
    step runs and materialises an asset; the op still receives the string). ``False`` for a field the model
    normalises before checking it (Join's ``type`` in any case): the model, not Dagster, says what it accepts."""
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin in (typing.Union, types.UnionType):
        if len(args) == 1:
            return dg.Noneable(_config_type(args[0], choices=choices))
        return dg.Any
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    if origin is typing.Literal and choices and args and all(isinstance(a, str) for a in args):
        return _enum(tuple(args))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        fields = config_fields(annotation, required_ok=False)  # a model that ignores unknown fields (spec 2.1's
        lax = annotation.model_config.get("extra") != "forbid"  # platformFile) takes them in config too
        return dg.Permissive(fields) if lax else dg.Shape(fields)
    if origin is list and args and (args[0] in _SCALARS or _is_model(args[0])
                                    or typing.get_origin(args[0]) is typing.Literal):
        return [_config_type(args[0], choices=choices)]
    if origin is dict:
        return dg.Permissive()
    return dg.Any


@functools.cache
def _enum(values: tuple[str, ...]) -> dg.Enum:
    """The enum of these choices, named by them: Dagster checks a value against the first enum of a name in a
    job's config, so two fields with other choices must not share a name (one set of choices, one enum)."""
    return dg.Enum("|".join(values), [dg.EnumValue(v) for v in values])


def _normalised_fields(model: type[BaseModel]) -> frozenset[str]:
    """The fields of ``model`` a validator sees before pydantic checks their type (``mode="before"``, ``"wrap"``
    or ``"plain"``): they accept more than their annotation says."""
    return frozenset(name for dec in model.__pydantic_decorators__.field_validators.values()
                     if dec.info.mode != "after" for name in dec.info.fields)


def config_value(annotation: Any, value: Any) -> Any:
    """``value`` as the config type of ``annotation`` takes it: a scalar the input model would coerce (``"2"``
    for a whole number, ``"false"`` for a boolean) coerced the same way, inside objects and lists too.

    A pipeline step's literal input becomes its op's default config, which Dagster checks strictly at run
    time only: ``pipeline validate`` (the model) passed ``maxBatchSize: "2"``, and the run then failed with a
    ``DagsterInvalidConfigError``. A value the model refuses is left as it is (validation reported it)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    if _is_model(annotation) and isinstance(value, Mapping):
        by_key = {info.alias or name: info.annotation for name, info in annotation.model_fields.items()}
        return {k: config_value(by_key[k], v) if k in by_key else v for k, v in value.items()}
    if typing.get_origin(annotation) is list and args and isinstance(value, list):
        return [config_value(args[0], item) for item in value]
    if annotation in _SCALARS and value is not None:
        try:
            return _adapter(annotation).validate_python(value)
        except ValidationError:
            return value
    return value


@functools.cache
def _adapter(scalar: type) -> TypeAdapter:
    return TypeAdapter(scalar)


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def config_fields(model: type[BaseModel], *, required_ok: bool = True,
                  wirable: frozenset[str] = frozenset(), required: frozenset[str] = frozenset()) -> dict[str, dg.Field]:
    """The config schema of an action's input. ``required``: fields the launchpad must have whatever
    ``required_ok`` says (a pipeline step's literal required fields)."""
    fields = {}
    normalised = _normalised_fields(model)
    for name, info in model.model_fields.items():
        key = info.alias or name
        must = (required_ok and info.is_required() and key not in wirable) or key in required
        fields[key] = dg.Field(_config_type(info.annotation, choices=name not in normalised), is_required=must,
                               description=info.description or None)
    return fields


def output_names(spec: ActionSpec, extensions: Collection[str] = ()) -> dict[str, str]:
    """Spec output field -> op output name. Optional extension fields (Push's ``rejectsFileId``) are not op
    outputs: a second output would break every graph that passes ``etl_push()`` on as one value; their
    values ride on the outputs' metadata instead (:func:`extension_metadata`). ``extensions``: those an op
    built for one YAML step does have, because the step's input guarantees them
    (:meth:`~connector_ops.registry.ActionSpec.outputs_present`)."""
    return {f: to_snake(f) for f in spec.output_fields
            if f not in spec.optional_output_fields or f in extensions} or {"": "result"}


def extension_metadata(spec: ActionSpec, result: Any) -> dict[str, Any]:
    """The optional extension fields of an action's output that apply, as text metadata."""
    if not isinstance(result, Mapping):
        return {}
    return {to_snake(f): dg.MetadataValue.text(str(result[f])) for f in sorted(spec.optional_output_fields)
            if result.get(f) is not None}


def failure(exc: ConnectorError, payload: Mapping[str, Any] | None = None) -> dg.Failure:
    """The op failure of an action error: a ``RetryPolicy`` may retry it only if ``exc.retryable``.

    ``payload``: the input the action ran with; the files it names are recorded as on a success
    (:func:`.metadata.read_metadata`), so ``connector-ops gc`` keeps what a recent failed run read — the
    input its re-execution from failure will read again. Without ``payload`` (refused before its input was
    made) it read nothing, and says so (:data:`.metadata.READS_RECORDED`)."""
    metadata = {"status": dg.MetadataValue.int(exc.status), "body": dg.MetadataValue.json(exc.body),
                "retryable": dg.MetadataValue.bool(exc.retryable),
                **read_metadata(payload or {})}  # no payload: refused before it read anything
    if exc.detail is not None:  # what a ``null`` body cannot say (Clean)
        metadata["detail"] = dg.MetadataValue.text(exc.detail)
    return dg.Failure(description=exc.summary(), metadata=metadata, allow_retries=exc.retryable)


@contextlib.contextmanager
def failing_as(action: str | None) -> Iterator[None]:
    """Raise any error of an op's body as an action op raises its own (:func:`failure`): its words, its status.

    Without it Dagster wraps the error, and a run reported only the wrapper's first line: a pipeline step whose
    ``${file:…}`` resolver met the disk guard said ``DagsterExecutionStepExecutionError: Error occurred while
    executing op "load__input":`` where ``files add`` named the free space. Every op connector-ops builds runs
    its body under this (``action``: the name its failure carries); Dagster's own signals pass through."""
    try:
        yield
    except (dg.Failure, dg.RetryRequested, dg.DagsterError):
        raise
    except Exception as exc:
        raise failure(error_for(None, exc, action=action)) from exc


def ensure_launched_definition(context: dg.OpExecutionContext) -> None:
    """Fail the step (409, never retried) when this process loaded another version of the pipeline file than
    the one its run was launched with.

    A process that runs steps — a Celery worker above all — builds the Definitions once (at its first step) and
    keeps them; after the file is edited and the code location reloaded, a new run (launched with the new version)
    would run the old version's steps there and succeed with the old results. The compiler puts the file's digest
    (which covers the content of its ``${file:…}`` files) in the job's tags, which Dagster copies into the run's
    tags at launch; the two must agree. A job defined in code has no digest, and a run launched before jobs carried
    one has none either: both run as before. Likewise the connector-ops version the job was compiled by: a worker
    not yet upgraded (or not yet restarted after an upgrade) refuses the steps of a run launched by an upgraded code
    location. Four dict lookups per step, called first by every op a compiled pipeline is made of; a re-execution
    adds one read of its job snapshot per process (:func:`_launched_tags`).
    """
    launched_tags = _launched_tags(context)
    for tag, told in ((VERSION_TAG, _another_version), (PIPELINE_DIGEST_TAG, _another_file)):
        loaded, launched = context.job_def.tags.get(tag), launched_tags.get(tag)
        if loaded is not None and launched is not None and loaded != launched:
            raise failure(ConnectorError(STALE_DEFINITION_STATUS, {"message": told(context, loaded, launched)},
                                         action=f"pipeline {context.job_name}"))


def _launched_tags(context: dg.OpExecutionContext) -> Mapping[str, str]:
    """The tags of the job definition the run was created from.

    At launch Dagster copies the job's tags into the run's, so those are read. A re-execution (the UI's
    "Re-execute", the daemon's automatic retries) is created from the job as the code location has it *now*,
    but takes its parent run's tags over the job's: after the file was fixed and the location reloaded, the
    run's tags still carry the old digest. Its job snapshot is what it was made from, so it is read instead:
    else every step of the re-execution (run by processes that loaded the fixed file) would be refused, and a
    worker still holding the old file would pass.
    """
    run = context.run
    if run.parent_run_id is None or run.job_snapshot_id is None:
        return run.tags
    return _snapshot_tags(context.instance, run.job_snapshot_id)


#: job snapshot id -> its tags: ids are content hashes, so an entry never goes stale; one per version of a
#: job re-executed in this process
_SNAPSHOT_TAGS: dict[str, Mapping[str, str]] = {}


def _snapshot_tags(instance: dg.DagsterInstance, snapshot_id: str) -> Mapping[str, str]:
    tags = _SNAPSHOT_TAGS.get(snapshot_id)
    if tags is None:
        tags = _SNAPSHOT_TAGS[snapshot_id] = instance.get_job_snapshot(snapshot_id).tags
    return tags


def _another_version(context: dg.OpExecutionContext, loaded: str, launched: str) -> str:
    """Both sides may be the stale one, and this process cannot tell which: it is behind (not yet upgraded or
    restarted), or the run is (launched, or queued, before every process was upgraded — re-executing it makes
    a run of the version the code location has now, :func:`_launched_tags`)."""
    return (f"the run was launched by connector-ops {launched}, and the process running step {context.op_handle} "
            f"runs connector-ops {loaded}: every process of a deployment (code servers, run workers, Celery "
            f"workers) must run one version. If every process already runs {loaded}, the run was launched (or "
            "queued) before the upgrade: re-execute it (UI: Re-execute; from failure, or all steps if a step then "
            "cannot read an output the old version stored). Otherwise upgrade or restart the processes that run "
            "steps (docs/deployment.md, Upgrading), or reload the code location if its sources were edited since "
            "it loaded, then launch the run again.")


#: the digest of a pipeline file as it is on disk now, or ``None`` when it does not load: given by the pipeline
#: layer, which sits above the ops (:func:`tell_stale_side_with`)
_digest_on_disk: Callable[[str], str | None] | None = None


def tell_stale_side_with(digest_on_disk: Callable[[str], str | None]) -> None:
    """How :func:`_another_file` reads a pipeline file's version now (set once the pipeline layer is imported,
    as it is wherever a compiled pipeline, the only kind of job with a file, exists)."""
    global _digest_on_disk
    _digest_on_disk = digest_on_disk


def _another_file(context: dg.OpExecutionContext, loaded: str, launched: str) -> str:
    """Which side is stale, told by the pipeline as it is on disk now (loaded once, on this refusal only).

    The run's tags hold the version the code location had loaded when it launched the run, this process's job
    the version it loaded. Under the default executors the step runs in a run worker started for the run,
    which loads the file afresh: if the pipeline on disk is this process's version, the code location is the one
    behind (the file was edited and not reloaded: the ``dagster dev`` loop); if it is the run's, this process
    is (a Celery worker started before the edit); if it is neither, the file changed again since both loaded it.
    """
    job_metadata: Mapping[str, Any] = context.job_def.metadata  # Any: see error_of_failed_step; the file a text
    file = job_metadata.get(PIPELINE_FILE_METADATA)
    where = file.value if file is not None else f"the pipeline file of job {context.job_name}"
    on_disk = _digest_on_disk(file.value) if file is not None and _digest_on_disk is not None else None
    where += " (or a file it references with ${file:…})"
    versions = f"(this process loaded version {loaded}, the run was launched with {launched})"
    reload = ("reload the code location (UI: Deployment → Reload, or restart `dagster dev` or the code server, "
              "see docs/deployment.md)")
    if on_disk == loaded:
        return (f"{where} changed since the code location loaded it {versions}: the run was launched with the "
                f"code location's old version, and the process running step {context.op_handle} loaded the file "
                f"as it is now. {reload[0].upper()}{reload[1:]}, then launch the run again.")
    if on_disk == launched:
        return (f"{where} is not the version this run was launched with {versions}: the process running step "
                f"{context.op_handle} loaded the file before it changed. Restart the processes that run steps "
                "(the Celery workers, see docs/deployment.md) after pipeline files change, then launch the run "
                "again.")
    return (f"{where} changed again since the code location and the process running step {context.op_handle} "
            f"loaded it {versions}: {reload} and restart the processes that run steps (the Celery workers), "
            "then launch the run again.")


def error_of_failed_step(event: dg.DagsterEvent) -> ConnectorError:
    """The inverse of :func:`failure`: the ``ConnectorError`` a ``STEP_FAILURE`` event carries (its
    status and body), or a 500 with the description of a ``dg.Failure`` without them, or the first line of
    the error the step raised otherwise (below Dagster's wrapper: :func:`_raised_error`)."""
    data = event.step_failure_data
    user = data.user_failure_data if data else None
    # Any: Dagster types each entry's value as the union of every kind of metadata value; these entries are of
    # the kinds failure() wrote them (status an int, body a JSON, retryable a bool, detail a text)
    metadata: Mapping[str, Any] = user.metadata if user and user.metadata else {}
    status = metadata.get("status")
    if user is not None and status is not None:  # (a status comes only with a user failure)
        body = metadata.get("body")
        description = user.description or ""
        action = description.split(" failed (", 1)[0] if " failed (" in description else None
        retryable, detail = metadata.get("retryable"), metadata.get("detail")
        return ConnectorError(int(status.value), body.value if body is not None else None, action=action,
                              detail=detail.value if detail is not None else None,
                              retryable=bool(retryable.value) if retryable is not None else False)
    if user is not None and user.description:  # a dg.Failure: its own words, not its class path
        return ConnectorError(500, {"message": user.description})
    wrong_type = type_check_error(data.error if data else None)  # a wired input of the wrong kind: a 400
    if wrong_type is not None:
        return wrong_type
    return _raised_error(data.error if data else None)


def _raised_error(error: SerializableErrorInfo | None) -> ConnectorError:
    """The error a step raised without :func:`failure` (an op of a job written in Python; ours all use
    :func:`failing_as`): Dagster wraps it (``DagsterExecutionStepExecutionError: Error occurred while executing op
    "load__input":``), and the words are those of its cause, below the wrappers. A precise error
    (:class:`ConnectorOpsError`, by its class name) keeps its status; anything else is a 500."""
    while error is not None and error.cause is not None and _is_wrapper(error.cls_name):
        error = error.cause
    text = error.message.strip() if error is not None else ""
    first = text.splitlines()[0] if text else "step failed"
    name = error.cls_name if error is not None else None
    if name and not _is_wrapper(name):  # "module.Class: words" -> "words" (the class shows in Dagster's log)
        head, sep, rest = first.partition(": ")
        if sep and head.rsplit(".", 1)[-1] == name and rest:
            first = rest
    status = _precise_statuses().get(name or "", 500)
    return ConnectorError(status, {"message": first})


def _is_wrapper(cls_name: str | None) -> bool:
    """Whether Dagster raised this error around one of the op's own (its message says only where)."""
    cls = getattr(dagster_errors, cls_name or "", None)
    return isinstance(cls, type) and issubclass(cls, dagster_errors.DagsterUserCodeExecutionError)


def _precise_statuses() -> dict[str, int]:
    """Class name -> status of every :class:`ConnectorOpsError` (the classes loaded so far)."""
    found: dict[str, int] = {}
    pending: list[type[ConnectorOpsError]] = [ConnectorOpsError]
    while pending:
        cls = pending.pop()
        found.setdefault(cls.__name__, cls.status)
        pending.extend(cls.__subclasses__())
    return found


def op_payload(spec: ActionSpec, config: Mapping[str, Any], inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The action input: the op config, with wired inputs taking precedence. ``fields`` given as a
    :class:`~connector_ops.kernel.deferred_values.Deferred` (a pipeline step's ``${env.…}`` values, kept out of the
    stored step outputs) are read here, from the environment of the process running the action."""
    payload = {k: v for k, v in config.items() if v is not None}
    fields = inputs.get("fields")
    payload.update((fields.value(os.environ, spec.input_model) if isinstance(fields, Deferred) else fields) or {})
    for input_name, field in spec.wirable_inputs.items():
        value = inputs.get(input_name)
        if value is not None:
            payload[field] = value
    return payload


def env_named(inputs: Mapping[str, Any]) -> dict[tuple[str | int, ...], str]:
    """The fields of ``fields`` read from the environment (a :class:`.Deferred`), which the input's validation
    errors name and never show: the error is the step's failure, stored in the run's events."""
    fields = inputs.get("fields")
    return dict(fields.named()) if isinstance(fields, Deferred) else {}


def build_op(action: str, *, name: str | None = None, assets: Mapping[str, dg.AssetKey] | None = None,
             required_config: frozenset[str] = frozenset(),
             extensions: frozenset[str] = frozenset(), description: str | None = None) -> dg.OpDefinition:
    """The op of ``action`` (named ``<connector>_<action>`` unless ``name`` says otherwise). ``assets``
    maps output fields to asset keys: after such an output the op records a materialisation of the
    asset with the output's metadata and where the data is (a YAML step's ``asset:``).
    ``required_config``: config fields the launchpad must have (a step's literal required fields).
    ``extensions``: optional output fields that are op outputs too (a YAML step refers to them); a run
    whose input does not guarantee them (its config edited in the launchpad) is a 400 before the action runs.
    ``description``: what the op is for, shown first in the UI (a YAML step's ``description:``)."""
    spec = get_action(action)
    assets = dict(assets or {})
    wirable = spec.wirable_inputs
    outs = output_names(spec, extensions)

    # `context` unannotated: OpDefinition refuses any annotation but its context classes, and this module's
    # annotations are strings (``from __future__ import annotations``), which it cannot compare
    def compute(context, inputs: dict[str, Any]) -> Iterator[dg.Output | dg.AssetMaterialization]:  # type: ignore[no-untyped-def]
        with failing_as(spec.name):
            yield from _compute(context, inputs)

    def _compute(context: dg.OpExecutionContext,
                 inputs: dict[str, Any]) -> Iterator[dg.Output | dg.AssetMaterialization]:
        ensure_launched_definition(context)
        resources = {k: getattr(context.resources, k) for k in spec.resource_keys}
        try:
            payload = op_payload(spec, context.op_config or {}, inputs)
        except ConnectorOpsError as exc:  # a ${env.…} unset since the step before read it
            raise failure(ConnectorError(exc.status, {"message": str(exc)}, action=spec.name)) from None
        if missing := sorted(extensions - spec.outputs_present(payload)):
            when = spec.present_when[missing[0]]
            raise failure(ConnectorError(400, {"message": f"{when.field}: must be {when.value!r}: the pipeline's "
                                                          f"later steps refer to this step's {missing[0]}"},
                                         action=spec.name))
        started = time.perf_counter()
        try:
            for field, key in assets.items():
                check_asset_input(field, payload, key)
            with reporting_to(step_progress(context.log.info)), \
                    warnings_to(context.log.warning):
                result = run_action(spec, payload, resources, env_named(inputs))
            # readers (the next steps too) find an asset's data under its own name
            published = {field: publish(field, result[field], key, resources) for field, key in assets.items()}
        except ConnectorError as exc:
            exc.action = exc.action or spec.name
            if exc.detail and exc.detail != exc.message:  # what the spec's fixed body does not say (a 404's cause)
                context.log.error(f"{exc.summary()}: {exc.detail}")
            raise failure(exc, payload) from None
        call = {**run_metadata(payload, time.perf_counter() - started), **extension_metadata(spec, result)}
        if "" in outs:
            yield dg.Output(result, "result", metadata={**output_metadata("", result, resources), **call})
            return
        for field, out_name in outs.items():
            value = published.get(field, result[field])
            yield dg.Output(value, out_name, metadata={**output_metadata(field, value, resources), **call})
            if field in assets:
                yield dg.AssetMaterialization(assets[field], metadata={
                    **materialization_metadata(field, value, resources), **call})

    ins = {
        input_name: dg.In(type_of(field), default_value=None,
                          description=f"wired value for `{field}` (overrides config)")
        for input_name, field in wirable.items()
    }
    ins["fields"] = dg.In(
        dg.Any, default_value=None,
        description="input fields computed at run time (pipeline `${…}` references); they override config",
    )
    ins["after"] = dg.In(dg.Nothing, description="run after these steps (ordering only)")
    return dg.OpDefinition(
        name=name or spec.op_name,
        compute_fn=compute,
        ins=ins,
        outs={out_name: dg.Out(type_of(field), description=f"`{field}` of the output" if field else "the output")
              for field, out_name in outs.items()},
        # nothing else is required at launch: any field may arrive through `fields` or a wired input, and
        # the action's input model (run_action) is the one place that reports a missing field (400, named)
        config_schema=config_fields(spec.input_model, required_ok=False, required=required_config),
        required_resource_keys=set(spec.resource_keys),
        description=(f"{description}\n\n" if description else "") + f"{spec.summary}\n\nAction `{spec.name}`; "
                    "config is its JSON input (spec field names).",
        tags={"connector": spec.connector, "action": spec.name},
        pool=POOLS.get(spec.connector),
    )
