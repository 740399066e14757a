"""Validate as a Dagster asset check, with the rejected rows kept (dead-letter rows).

``validate_check("sales/raw", schema, max_rejected=0.02)`` runs Validate on the virtual file of the
asset's latest materialisation and answers with an ``AssetCheckResult``: passed when the rejected rows
stay within ``max_rejected`` (a whole number: at most that many rows; a fraction below 1: at most that
share of the rows), the ``severity`` given, and as metadata the rejected count and share, a
``MetadataValue.table`` sample of the rejected rows with their error texts (exactly Validate's
``rejected`` rows, in order), and the full rejects file exported as CSV (its path on this machine; a
link while the file server answers) next to the ids of the ``validated``/``rejected`` virtual files.
Dagster's own checks report pass/fail without the failing rows; here they are one click away.
"""


from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

from connector_ops.kernel.errors import ConnectorError
from connector_ops.ops.assets import asset_key, latest_location
from connector_ops.ops.factory import failure
from connector_ops.ops.metadata import platform_file_metadata, table_preview
from connector_ops.registry import get_action, run_action

SAMPLE_ROWS = 20
SEVERITIES = {"ERROR": dg.AssetCheckSeverity.ERROR, "WARN": dg.AssetCheckSeverity.WARN}


def within(rejected: int, total: int, max_rejected: int | float) -> bool:
    """``max_rejected``: a whole number is a count of rows, a fraction below 1 a share of ``total``."""
    if isinstance(max_rejected, int) or max_rejected >= 1:
        return rejected <= max_rejected
    return rejected <= max_rejected * total


def check_max_rejected(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"max_rejected must be a count (0, 1, 2, …) or a fraction below 1, got {value!r}")
    return value


def validate_check(
    asset: str | Sequence[str] | dg.AssetKey,
    schema: Mapping[str, Any],
    *,
    name: str = "validate",
    max_rejected: int | float = 0,
    severity: str = "ERROR",
    blocking: bool = False,
    sample_rows: int = SAMPLE_ROWS,
    description: str | None = None,
) -> dg.AssetChecksDefinition:
    """An asset check running Validate with ``schema`` (spec 2.7) on the asset's virtual file."""
    key = asset_key(asset)
    limit = check_max_rejected(max_rejected)
    level = SEVERITIES.get(severity.upper())
    if level is None:
        raise ValueError(f"severity must be ERROR or WARN, got {severity!r}")
    validate, pull = get_action("etl.validate"), get_action("etl.pull")
    rule = f"at most {limit:g} rejected rows" if isinstance(limit, int) or limit >= 1 else \
        f"at most {limit:.2%} of the rows rejected"

    @dg.asset_check(asset=key, name=name, blocking=blocking, required_resource_keys={"virtual_files", "platform_files"},
                    description=description or f"Validate against a schema of {len(schema)} columns; {rule}.")
    def check(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        store, files = context.resources.virtual_files, context.resources.platform_files
        resources = {"virtual_files": store, "platform_files": files}
        try:
            source = latest_location(context.instance, key)
            out = run_action(validate, {"content": source, "schema": dict(schema)}, resources)
            rejects = run_action(pull, {"virtualFileId": out["rejected"], "exportType": "csv",
                                        "exportName": f"{key.to_python_identifier()}_{name}_rejects.csv"}, resources)
        except ConnectorError as exc:
            raise failure(exc) from None
        total = store.summary(source, 0)[0]
        rejected, _columns, sample = store.summary(out["rejected"], sample_rows)
        passed = within(rejected, total, limit)
        metadata: dict[str, Any] = {
            "rejected_count": dg.MetadataValue.int(rejected),
            "rejected_share": dg.MetadataValue.float(round(rejected / total, 6) if total else 0.0),
            "dagster/row_count": dg.MetadataValue.int(total),
            "rejected_sample": table_preview(sample, ["error", "content"], limit=sample_rows),
            "rejects_virtual_file_id": dg.MetadataValue.text(out["rejected"]),
            "validated_virtual_file_id": dg.MetadataValue.text(out["validated"]),
            **{f"rejects_{k}": v for k, v in platform_file_metadata(rejects["platformFile"], files).items()},
        }
        return dg.AssetCheckResult(passed=passed, severity=level, metadata=metadata,
                                   description=f"{rejected} of {total} rows rejected ({rule})")

    return check
