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
from dataclasses import dataclass
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
    """A count (an integer, or a float with no fraction: YAML's ``2.0``) or a fraction in [0, 1). Not NaN,
    infinity or ``1.5``: none of them says a count or a share, and :func:`within` would read each somehow."""
    if (isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0
            or (isinstance(value, float) and value >= 1 and not value.is_integer())):
        raise ValueError(f"max_rejected must be a count (0, 1, 2, …) or a fraction below 1, got {value!r}")
    return value


@dataclass(frozen=True)
class ValidateRule:
    """What a Validate check asks: the schema, the threshold and how bad a failure is."""

    schema: Mapping[str, Any]
    max_rejected: int | float = 0
    severity: str = "ERROR"
    sample_rows: int = SAMPLE_ROWS

    def __post_init__(self) -> None:
        check_max_rejected(self.max_rejected)
        if self.severity.upper() not in SEVERITIES:
            raise ValueError(f"severity must be ERROR or WARN, got {self.severity!r}")

    @property
    def level(self) -> dg.AssetCheckSeverity:
        return SEVERITIES[self.severity.upper()]

    @property
    def text(self) -> str:
        """The threshold in words (``at most 3 rejected rows``, ``at most 5.00% of the rows rejected``)."""
        limit = self.max_rejected
        if isinstance(limit, int) or limit >= 1:
            return f"at most {limit:g} rejected rows"
        return f"at most {limit:.2%} of the rows rejected"


@dataclass(frozen=True)
class Finding:
    """One evaluation: passed or not, its description and metadata (the rejected rows among them)."""

    passed: bool
    description: str
    metadata: dict[str, Any]


def evaluate(rule: ValidateRule, source: str, export_name: str, resources: Mapping[str, Any]) -> Finding:
    """Validate virtual file ``source`` by ``rule``; the rejects are exported as CSV ``export_name``.

    Raises :class:`ConnectorError` as the actions do (a missing file: 404; a bad schema: 400).
    """
    store, files = resources["virtual_files"], resources["platform_files"]
    out = run_action(get_action("etl.validate"), {"content": source, "schema": dict(rule.schema)}, resources)
    rejects = run_action(get_action("etl.pull"), {"virtualFileId": out["rejected"], "exportType": "csv",
                                                  "exportName": export_name}, resources)
    total = store.summary(source, 0)[0]
    rejected, _columns, sample = store.summary(out["rejected"], rule.sample_rows)
    metadata: dict[str, Any] = {
        "rejected_count": dg.MetadataValue.int(rejected),
        "rejected_share": dg.MetadataValue.float(round(rejected / total, 6) if total else 0.0),
        "dagster/row_count": dg.MetadataValue.int(total),
        "rejected_sample": table_preview(sample, ["error", "content"], limit=rule.sample_rows),
        "rejects_virtual_file_id": dg.MetadataValue.text(out["rejected"]),
        "validated_virtual_file_id": dg.MetadataValue.text(out["validated"]),
        **{f"rejects_{k}": v for k, v in platform_file_metadata(rejects["platformFile"], files).items()},
    }
    return Finding(passed=within(rejected, total, rule.max_rejected), metadata=metadata,
                   description=f"{rejected} of {total} rows rejected ({rule.text})")


def export_name(key: dg.AssetKey, name: str) -> str:
    """The rejects CSV's name for check ``name`` of asset ``key``."""
    return f"{key.to_python_identifier()}_{name}_rejects.csv"


def file_gone(exc: ConnectorError, key: dg.AssetKey, name: str, source: Any) -> ConnectorError:
    """A check's failure in its own words: Validate answers a missing file with the spec's bare 404 ``not
    found``, which names neither the file nor the asset; the check's failure (still a 404) names both and
    how to make the file again. Any other error stays as the action said it."""
    if exc.status != 404 or not isinstance(source, str):
        return exc
    return ConnectorError(404, {"message": f"virtual file {source!r} of asset {key.to_user_string()} not found "
                                           "(removed since it was materialised); materialize the asset again "
                                           "(run the job that makes it), then run the check"},
                          action=f"check {name} of {key.to_user_string()}")


def check_description(rule: ValidateRule) -> str:
    return f"Validate against a schema of {len(rule.schema)} columns; {rule.text}."


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
    rule = ValidateRule(schema=dict(schema), max_rejected=max_rejected, severity=severity, sample_rows=sample_rows)

    @dg.asset_check(asset=key, name=name, blocking=blocking, required_resource_keys={"virtual_files", "platform_files"},
                    description=description or check_description(rule))
    def check(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        resources = {"virtual_files": context.resources.virtual_files,
                     "platform_files": context.resources.platform_files}
        source = None
        try:
            source = latest_location(context.instance, key)
            found = evaluate(rule, source, export_name(key, name), resources)
        except ConnectorError as exc:
            raise failure(file_gone(exc, key, name, source)) from None
        return dg.AssetCheckResult(passed=found.passed, severity=rule.level, metadata=found.metadata,
                                   description=found.description)

    return check
