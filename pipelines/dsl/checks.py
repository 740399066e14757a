"""``check:`` on an asset step: Validate as an asset check, with the rejected rows kept (dead-letter rows).

    - id: sales
      action: etl.push
      asset: sales/orders
      check:
        schema: {order_id: {type: string, required: true}, quantity: {type: integer}}
        max_rejected: 0.05       # a count (0, 1, …) or a share below 1; default 0
        severity: WARN           # ERROR (default) or WARN
        blocking: false          # true: a failed check fails, and what reads the asset's data does not run
        name: validate           # the check's name (default validate)

Each run evaluates the check right after the step (node ``<step>__check``) on the virtual file the step
made, and the Definitions declare the same check on the asset, so the UI lists it and can execute it
again on the latest materialisation (:func:`connector_ops.ops.checks.validate_check`). The result carries
the rejected count and share, a table of rejected rows with their errors and the rejects CSV.
"""


from collections.abc import Iterator, Mapping
from typing import Any

import dagster as dg

from connector_ops.kernel.errors import ConnectorError, InvalidInput
from connector_ops.ops.checks import (
    SEVERITIES,
    ValidateRule,
    check_max_rejected,
    evaluate,
    export_name,
    file_gone,
    validate_check,
)
from connector_ops.ops.factory import ensure_launched_definition, failing_as, failure
from connector_ops.pipelines.dsl import references as r
from connector_ops.pipelines.dsl.model import Asset, Check, Pipeline
from connector_ops.pipelines.dsl.sections import Report, known_mapping
from connector_ops.pipelines.dsl.text_keys import key_problem, non_text_keys, written

CHECK_KEYS = ("schema", "max_rejected", "severity", "blocking", "name")
VIRTUAL_FILE_FIELDS = ("virtualFileId", "validated")
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")



def parse_check(raw: Any, path: tuple[str | int, ...], asset: Asset | None, has_asset: bool,
                report: Report) -> Check | None:
    """The ``check`` mapping at ``path`` (``None``: absent, or wrong with every problem reported)."""
    if raw is None:
        return None
    ok = known_mapping(raw, path, "check", CHECK_KEYS,
                       "`check` must be a mapping: {schema: {...}, max_rejected: N, severity: ERROR|WARN}", report)
    if ok is None:
        return None
    if not has_asset:
        report(path, "`check` validates an asset's data: add `asset: <key>` to the step")
        ok = False
    elif asset is not None and asset.field not in VIRTUAL_FILE_FIELDS:
        report(path, f"`check` runs Validate on a virtual file; this step's asset is its `{asset.field}`")
        ok = False
    schema = raw.get("schema")
    if not isinstance(schema, Mapping) or not schema:
        report((*path, "schema"), "`schema` is required: a mapping of column -> rules, as Validate's schema")
        ok = False
    elif r.has_refs(schema):
        report((*path, "schema"), "`schema` must be literal: the check also runs outside a run, from the UI")
        ok = False
    else:
        ok = _schema_ok(schema, (*path, "schema"), report) and ok
    limit = raw.get("max_rejected", 0)
    try:
        check_max_rejected(limit)
    except ValueError as exc:
        report((*path, "max_rejected"), str(exc))
        ok = False
    severity = raw.get("severity", "ERROR")
    if not isinstance(severity, str) or severity.upper() not in SEVERITIES:
        report((*path, "severity"), f"`severity` must be ERROR or WARN, got {severity!r}")
        ok = False
    blocking = raw.get("blocking", False)
    if not isinstance(blocking, bool):
        report((*path, "blocking"), "`blocking` must be true or false")
        ok = False
    name = raw.get("name", "validate")
    if not isinstance(name, str) or not name or not set(name) <= _NAME_CHARS:
        report((*path, "name"), "`name` must be a name of letters, digits and _")
        ok = False
    if not ok:
        return None
    return Check(name=name, schema=dict(schema), max_rejected=limit, severity=severity.upper(), blocking=blocking)


def _schema_ok(schema: Mapping[str, Any], path: tuple[str | int, ...], report: Report) -> bool:
    """Validate's own parser of the schema: its problems now, at load time, rather than in every run."""
    from connector_ops.etl.validation import compile_schema

    odd = list(non_text_keys(schema))
    for where, key in odd:  # YAML's `1:` or `true:`: named as written, not a TypeError of the column-name check
        report((*path, *where, written(key)), key_problem(key))
    if odd:
        return False
    try:
        compile_schema(r.unescape(dict(schema)))
    except InvalidInput as exc:
        report(path, str(exc))
        return False
    return True


def _rule(check: Check) -> ValidateRule:
    return ValidateRule(schema=check.schema, max_rejected=check.max_rejected, severity=check.severity)


#: the status of a failed blocking check: the data was read and breaks the check's rules
BLOCKED_STATUS = 422
#: the node evaluating a step's check (``<step>__check``): a step of its own in a run's report
CHECK_NODE_SUFFIX = "__check"


def check_op(name: str, key: dg.AssetKey, check: Check) -> dg.OpDefinition:
    """The op evaluating ``check`` on the virtual file wired to its ``virtual_file_id`` input.

    It passes the id on: after a blocking check, the steps reading the asset's data read it from here,
    so they wait for the check and do not run when it fails.
    """
    rule = _rule(check)

    @dg.op(name=name, ins={"virtual_file_id": dg.In(str)},
           out=dg.Out(str, description="the virtual file checked (after a blocking check, its readers read it here)"),
           required_resource_keys={"virtual_files", "platform_files"},
           description=f"Asset check {check.name} of {key.to_user_string()}: Validate, {rule.text}.",
           tags={"kind": "asset_check"})
    def evaluate_check(context: dg.OpExecutionContext, virtual_file_id: str) -> Iterator[Any]:
        with failing_as(f"check {check.name} of {key.to_user_string()}"):
            yield from run_check(context, virtual_file_id)

    def run_check(context: dg.OpExecutionContext, virtual_file_id: str) -> Iterator[Any]:
        ensure_launched_definition(context)
        resources = {"virtual_files": context.resources.virtual_files,
                     "platform_files": context.resources.platform_files}
        try:
            found = evaluate(rule, virtual_file_id, export_name(key, check.name), resources)
        except ConnectorError as exc:
            raise failure(file_gone(exc, key, check.name, virtual_file_id)) from None
        yield dg.AssetCheckEvaluation(asset_key=key, check_name=check.name, passed=found.passed,
                                      metadata=found.metadata, severity=rule.level, description=found.description)
        if check.blocking and not found.passed:  # the data breaks the rules: a 422 with the check's own message
            raise failure(ConnectorError(BLOCKED_STATUS, {"message": found.description},
                                         action=f"blocking check {check.name} of {key.to_user_string()}"))
        yield dg.Output(virtual_file_id)

    return evaluate_check


def asset_checks(pipeline: Pipeline) -> list[dg.AssetChecksDefinition]:
    """The checks the pipeline's steps declare, as the Definitions' asset checks (runnable from the UI)."""
    return [validate_check(list(s.asset.key), s.check.schema, name=s.check.name, max_rejected=s.check.max_rejected,
                           severity=s.check.severity, blocking=s.check.blocking)
            for s in pipeline.steps if s.asset is not None and s.check is not None]
