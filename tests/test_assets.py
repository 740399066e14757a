"""Assets: the Python asset factory over any action (both databases) and ``asset:`` steps of a pipeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from connector_ops.ops.assets import action_asset
from connector_ops.pipelines.dsl import PipelineError, compile_pipeline, load_pipeline
from tests.pipeline_files import write

CSV = b"city,n\nParis,1\nRome,2\nParis,3\n"


def materialization(result: dg.ExecuteInProcessResult, key: str) -> Any:
    [event] = [m for m in result.asset_materializations_for_node(dg.AssetKey(key.split("/")).to_python_identifier())]
    return event


def test_factory_assets_feed_each_other_with_lineage_and_standard_metadata(resources: dict, files: Any,
                                                                           store: Any) -> None:
    pf = files.add_bytes(CSV, "cities.csv").to_json()
    raw = action_asset("cities/raw", "etl.push", {"platformFile": pf}, group_name="cities",
                       owners=["team:data"], kinds={"csv"})
    export = action_asset("cities/export", "etl.pull", {"exportType": "json", "exportName": "c.json"},
                          inputs={"virtualFileId": "cities/raw"}, group_name="cities")
    defs = dg.Definitions(assets=[raw, export], resources=resources)
    graph = defs.resolve_asset_graph()
    assert graph.get(dg.AssetKey(["cities", "export"])).parent_keys == {dg.AssetKey(["cities", "raw"])}
    node = graph.get(dg.AssetKey(["cities", "raw"]))
    assert node.group_name == "cities" and node.owners == ["team:data"] and "csv" in node.kinds

    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([raw, export], resources=resources, instance=instance)
    assert result.success
    raw_meta = materialization(result, "cities/raw").metadata
    assert raw_meta["dagster/row_count"].value == 3
    assert [c.name for c in raw_meta["dagster/column_schema"].schema.columns] == ["city", "n"]
    vf = raw_meta["virtual_file_id"].value
    assert [r["city"] for r in store.rows(vf)] == ["Paris", "Rome", "Paris"]
    exported = materialization(result, "cities/export").metadata["platform_file"].value
    assert files.read_bytes(exported).startswith(b'[\n{"city":"Paris","n":"1"}')


def test_an_action_without_data_cannot_be_an_asset() -> None:
    with pytest.raises(ValueError, match=r"etl\.query produces no virtual file or platform file"):
        action_asset("x", "etl.query", {"query": {}})


def test_a_downstream_asset_before_its_upstream_fails_with_a_400(resources: dict) -> None:
    export = action_asset("lonely/export", "etl.pull", {"exportType": "csv", "exportName": "x.csv"},
                          inputs={"virtualFileId": "lonely/raw"})
    result = dg.materialize([export], resources=resources, raise_on_error=False,
                            instance=dg.DagsterInstance.ephemeral(), selection=[dg.AssetKey(["lonely", "export"])])
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    data = failure.step_failure_data.user_failure_data
    assert data.metadata["status"].value == 400
    assert data.description == "etl.pull failed (400): asset lonely/raw has not been materialised yet"


ASSET_PIPELINE = """
    name: cities
    steps:
      - id: load
        action: etl.push
        asset: cities/raw
        group: cities
        owners: [team:data]
        kinds: [csv]
        description: The cities CSV, loaded
        input:
          platformFile: {pf}
      - id: tidy
        action: etl.map
        input: {{virtualFileId: "${{load.virtualFileId}}", action: "upper(city)", overwriteVirtualFile: false}}
      - id: export
        action: etl.pull
        asset: cities/export
        input: {{virtualFileId: "${{tidy.virtualFileId}}", exportType: csv, exportName: cities.csv}}
"""


def test_asset_steps_declare_specs_with_lineage_and_materialise_on_each_run(tmp_path: Path, resources: dict,
                                                                            files: Any) -> None:
    import json

    pf = json.dumps(files.add_bytes(CSV, "cities.csv").to_json())
    compiled = compile_pipeline(load_pipeline(write(tmp_path, ASSET_PIPELINE.format(pf=pf))))
    specs = {s.key: s for s in compiled.assets}
    raw, export = dg.AssetKey(["cities", "raw"]), dg.AssetKey(["cities", "export"])
    assert set(specs) == {raw, export}
    assert [d.asset_key for d in specs[export].deps] == [raw]  # through the Map step, which is no asset
    assert specs[raw].group_name == "cities" and specs[raw].description == "The cities CSV, loaded"
    assert specs[raw].owners == ["team:data"] and specs[raw].kinds == {"csv"}

    defs = dg.Definitions(assets=compiled.assets, jobs=[compiled.job], resources=resources)
    result = defs.resolve_job_def("cities").execute_in_process()
    assert result.success
    [m_raw] = result.asset_materializations_for_node("load")
    assert m_raw.asset_key == raw and m_raw.metadata["dagster/row_count"].value == 3
    assert m_raw.metadata["virtual_file_id"].value == result.output_for_node("load", "virtual_file_id")
    [m_export] = result.asset_materializations_for_node("export")
    assert m_export.metadata["platform_file"].value == result.output_for_node("export", "platform_file")


def test_asset_problems_are_reported_with_lines(tmp_path: Path) -> None:
    path = write(tmp_path, """
        name: bad
        steps:
          - id: q
            action: etl.query
            asset: "no spaces allowed"
            input: {virtualFileId: v, query: {}}
          - id: p
            action: etl.pull
            group: reports
            owners: nobody
            input: {virtualFileId: v, exportType: csv, exportName: a.csv}
    """)
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path)
    text = str(caught.value)
    assert "p.yaml:5: step q: `asset` must be a key like `sales/raw`" in text
    assert "p.yaml:5: step q: etl.query produces no virtual file or platform file to be an asset" in text
    assert "p.yaml:9: step p: `group` describes an asset: add `asset: <key>` to the step" in text
    assert "p.yaml:10: step p: `owners` describes an asset" in text


def step_failure(result: dg.ExecuteInProcessResult) -> Any:
    [event] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    return event.step_failure_data.user_failure_data


def test_a_python_asset_cannot_change_another_assets_file_in_place(resources: dict, files: Any, store: Any) -> None:
    """Before, the Map changed asset:c/raw in place and publishing moved it to asset:c/tidy: c/raw's data was
    gone while its materialisation still claimed its rows."""
    pf = files.add_bytes(CSV, "cities.csv").to_json()
    raw = action_asset("c/raw", "etl.push", {"platformFile": pf})
    tidy = action_asset("c/tidy", "etl.map", {"action": "upper(city)", "overwriteVirtualFile": True},
                        inputs={"virtualFileId": "c/raw"})
    result = dg.materialize([raw, tidy], resources=resources, instance=dg.DagsterInstance.ephemeral(),
                            raise_on_error=False)
    assert not result.success
    data = step_failure(result)
    assert data.metadata["status"].value == 400
    assert data.description.startswith("etl.map failed (400): overwriteVirtualFile: true would change virtual file "
                                       "'asset:c/raw' in place")
    assert [r["city"] for r in store.rows("asset:c/raw")] == ["Paris", "Rome", "Paris"]  # unchanged, still there


INPLACE_PIPELINE = """
    name: inplace
    steps:
      - id: load
        action: etl.push
        asset: cities/raw
        input:
          platformFile: {pf}
      - id: tidy
        action: etl.map
        asset: cities/tidy
        input: {{virtualFileId: "${{{source}.virtualFileId}}", action: "upper(city)", overwriteVirtualFile: true}}
      - id: pick
        action: etl.map
        input: {{virtualFileId: "${{load.virtualFileId}}", action: "trim", overwriteVirtualFile: true}}
"""


def test_pipeline_validate_refuses_an_asset_step_overwriting_another_assets_file(tmp_path: Path) -> None:
    (tmp_path / "c.csv").write_bytes(CSV)
    path = write(tmp_path, INPLACE_PIPELINE.format(pf='"${file:c.csv}"', source="load"))
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path)
    assert str(caught.value) == (
        f"{path}:11: step tidy: overwriteVirtualFile: true would change virtual file 'asset:cities/raw' in place, "
        "the data of asset cities/raw; set overwriteVirtualFile: false so that asset cities/tidy gets a virtual "
        "file of its own")


def test_an_asset_step_overwriting_another_assets_file_fails_before_the_action(tmp_path: Path, resources: dict,
                                                                               files: Any, store: Any) -> None:
    """What the file does not show (the asset's file reaches the step through a step in between) is refused
    when the step runs: a 400 naming the field, the upstream asset's rows untouched."""
    import json

    pf = json.dumps(files.add_bytes(CSV, "cities.csv").to_json())
    compiled = compile_pipeline(load_pipeline(write(tmp_path, INPLACE_PIPELINE.format(pf=pf, source="pick"))))
    defs = dg.Definitions(assets=compiled.assets, jobs=[compiled.job], resources=resources)
    result = defs.resolve_job_def("inplace").execute_in_process(raise_on_error=False)
    assert not result.success
    data = step_failure(result)
    assert data.metadata["status"].value == 400 and "overwriteVirtualFile: false" in data.description
    assert [r["city"] for r in store.rows("asset:cities/raw")] == ["Paris", "Rome", "Paris"]
    assert "asset:cities/tidy" not in {i for i, _ in store.inventory()}


def test_publishing_another_assets_file_is_refused_and_keeps_it(store: Any) -> None:
    """The last guard, whatever the action returned: an asset never takes another asset's named file."""
    from connector_ops.kernel.errors import ConnectorError
    from connector_ops.ops.asset_files import publish

    store.publish("asset:a", store.create_from_rows([{"v": "1"}]))
    with pytest.raises(ConnectorError) as caught:
        publish("virtualFileId", "asset:a", dg.AssetKey("b"), {"virtual_files": store})
    assert caught.value.status == 409 and "the data of asset a" in caught.value.message
    assert store.rows("asset:a") == [{"v": "1"}] and "asset:b" not in {i for i, _ in store.inventory()}


ROWS_ASSET = """
    name: rows_asset
    steps:
      - id: check_rows
        action: etl.validate
        asset: rows/valid
        {check}
        input:
          content: [{{q: "1"}}, {{q: "x"}}]
          schema: {{q: {{type: integer}}}}
"""


@pytest.mark.parametrize("check", ["", "check: {schema: {q: {type: integer}}}"], ids=["asset", "asset_and_check"])
def test_an_asset_of_validate_over_inline_rows_is_a_load_error(tmp_path: Path, check: str) -> None:
    """Before, the materialisation recorded the rows' Python repr as its virtual file id (and a check failed
    the run with a raw DagsterTypeCheckDidNotPass)."""
    path = write(tmp_path, ROWS_ASSET.format(check=check))
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path)
    (problem,) = caught.value.problems
    assert (problem.line, problem.step) == (8, "check_rows")  # content:
    assert problem.message.startswith("`asset` needs a virtual file: content: an asset's data is a virtual file, "
                                      "and `validated` is one only when `content` is a virtual file id")


def test_a_validate_asset_given_rows_at_run_time_fails_with_a_400_naming_content(resources: dict) -> None:
    rows = action_asset("rows/valid", "etl.validate", {"content": [{"q": "1"}], "schema": {"q": {"type": "integer"}}})
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([rows], resources=resources, instance=instance, raise_on_error=False)
    data = step_failure(result)
    assert data.metadata["status"].value == 400 and data.description.startswith("etl.validate failed (400): content:")
    assert instance.get_latest_materialization_event(dg.AssetKey(["rows", "valid"])) is None
