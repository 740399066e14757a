"""Validate as an asset check (both databases): pass/fail by threshold, severity, the rejected rows kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from connector_ops.ops.assets import action_asset
from connector_ops.ops.checks import validate_check, within
from connector_ops.pipelines.samples import sample_path

SCHEMA = {
    "order_id": {"type": "string", "required": True, "minLength": 4},
    "customer_id": {"type": "string", "required": True},
    "quantity": {"type": "integer", "required": True},
    "unit_price": {"type": "float", "maxLength": "8,2"},
    "status": {"type": "string", "required": True},
}


def evaluation(result: dg.ExecuteInProcessResult) -> Any:
    [event] = [e for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    return event.event_specific_data


@pytest.fixture
def sales(files: Any) -> dg.AssetsDefinition:
    pf = files.add_file(Path(sample_path("sales.csv"))).to_json()
    return action_asset("sales/raw", "etl.push", {"platformFile": pf, "parameters": {"useFirstRowAsSchema": True}})


def test_the_check_fails_over_the_threshold_and_keeps_every_rejected_row(resources: dict, files: Any, store: Any,
                                                                         sales: dg.AssetsDefinition) -> None:
    check = validate_check("sales/raw", SCHEMA, max_rejected=0, severity="WARN", sample_rows=3)
    result = dg.materialize([sales, check], resources=resources, instance=dg.DagsterInstance.ephemeral())
    assert result.success  # a failed check is a finding, not a failed run
    found = evaluation(result)
    assert found.passed is False and found.severity == dg.AssetCheckSeverity.WARN
    meta = found.metadata
    rejected = store.rows(meta["rejects_virtual_file_id"].value)
    assert rejected and meta["rejected_count"].value == len(rejected)
    assert meta["dagster/row_count"].value == 204
    # the sample is exactly what Validate wrote: its first rows, error texts and lines
    assert [r.data for r in meta["rejected_sample"].value.records] == [
        {"error": r["error"], "content": r["content"]} for r in rejected[:3]]
    assert all(r["error"] for r in rejected)
    csv_text = Path(meta["rejects_path"].value).read_text()
    assert csv_text.splitlines()[0] == "error,content" and len(csv_text.splitlines()) > len(rejected)
    assert "rejects_link" not in meta  # no file server runs here
    assert store.count(meta["validated_virtual_file_id"].value) == 204 - len(rejected)


def test_a_share_threshold_passes_when_few_rows_are_rejected(resources: dict, sales: dg.AssetsDefinition) -> None:
    check = validate_check("sales/raw", SCHEMA, max_rejected=0.5)
    result = dg.materialize([sales, check], resources=resources, instance=dg.DagsterInstance.ephemeral())
    found = evaluation(result)
    assert found.passed is True and found.severity == dg.AssetCheckSeverity.ERROR
    assert 0 < found.metadata["rejected_share"].value <= 0.5


def test_thresholds_and_bad_arguments() -> None:
    assert within(3, 100, 3) and not within(4, 100, 3)
    assert within(5, 100, 0.05) and not within(6, 100, 0.05)
    assert within(0, 0, 0.1)
    assert within(2, 100, 2.0) and not within(3, 100, 2.0)  # YAML's 2.0: a count
    for bad in (-1, 1.5, float("nan"), float("inf"), "0.1", True):
        with pytest.raises(ValueError, match="max_rejected must be a count"):
            validate_check("a", SCHEMA, max_rejected=bad)
    with pytest.raises(ValueError, match="severity must be ERROR or WARN"):
        validate_check("a", SCHEMA, severity="fatal")


def test_a_check_whose_asset_file_is_gone_names_it_and_how_to_make_it_again(resources: dict, store: Any,
                                                                            sales: dg.AssetsDefinition) -> None:
    """Before, the check failed with Validate's bare ``etl.validate failed (404): not found``."""
    from connector_ops import invoke

    check = validate_check("sales/raw", SCHEMA, max_rejected=0.5)
    instance = dg.DagsterInstance.ephemeral()
    assert dg.materialize([sales, check], resources=resources, instance=instance).success
    invoke("etl.clean", {"virtualFileId": "asset:sales/raw"}, resources=resources)  # the file is gone
    job = dg.Definitions(assets=[sales], asset_checks=[check], resources=resources
                         ).resolve_implicit_global_asset_job_def()
    alone = job.get_subset(asset_selection=set(), asset_check_selection={dg.AssetCheckKey(
        dg.AssetKey(["sales", "raw"]), "validate")}).execute_in_process(instance=instance, raise_on_error=False)
    [failed] = [e for e in alone.all_events if e.event_type_value == "STEP_FAILURE"]
    data = failed.step_failure_data.user_failure_data
    assert data.metadata["status"].value == 404  # Validate's status for a missing file, as the spec says
    assert data.description == (
        "check validate of sales/raw failed (404): virtual file 'asset:sales/raw' of asset sales/raw not found "
        "(removed since it was materialised); materialize the asset again (run the job that makes it), then run "
        "the check")
