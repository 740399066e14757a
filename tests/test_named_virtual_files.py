"""Named virtual files (issue 12, item 1): an asset's data keeps its id, ``asset:<key>``, and each
materialisation replaces its rows in one transaction. Both databases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import sqlalchemy as sa

from connector_ops import invoke
from connector_ops.ops.assets import action_asset
from connector_ops.pipelines.dsl import PipelineError, compile_pipeline, load_pipeline
from tests.pipeline_files import write

PIPELINE = """
    name: cities
    steps:
      - id: load
        action: etl.push
        asset: cities/raw
        input: {{platformFile: {pf}}}
      - id: big
        action: etl.query
        input: {{virtualFileId: "${{load.virtualFileId}}", query: {{n: {{$gt: "1"}}}}}}
"""


def tables(store: Any) -> set[str]:
    return {name for name in sa.inspect(store.engine).get_table_names() if name.startswith("vf_")}


def test_publish_replaces_the_rows_of_a_name_in_one_step(store: Any) -> None:
    first = store.create_from_rows([{"a": "1"}, {"a": "2"}])
    assert store.publish("asset:t", first) == "asset:t"
    assert store.rows("asset:t") == [{"a": "1"}, {"a": "2"}] and not store.exists(first)
    page = invoke("etl.iterate", {"content": "asset:t", "maxBatchSize": 1})
    assert page["content"] == [{"a": "1"}]
    before = tables(store)
    second = store.create_from_rows([{"b": "x"}])
    store.publish("asset:t", second)
    assert store.rows("asset:t") == [{"b": "x"}] and store.columns("asset:t") == ["b"]
    assert len(tables(store)) == len(before)  # the old rows' table went with them
    # a new generation: an iteration of the name starts over on the new rows
    assert invoke("etl.iterate", {"content": "asset:t", "maxBatchSize": 1})["content"] == [{"b": "x"}]


def test_a_pipeline_rerun_replaces_its_asset_and_readers_follow(tmp_path: Path, resources: dict, files: Any,
                                                                store: Any) -> None:
    instance = dg.DagsterInstance.ephemeral()
    counts = []
    for csv in (b"city,n\nParis,1\nRome,2\n", b"city,n\nOslo,3\nLima,4\nRiga,5\n"):
        pf = json.dumps(files.add_bytes(csv, "cities.csv").to_json())
        job = compile_pipeline(load_pipeline(write(tmp_path, PIPELINE.format(pf=pf)))).job
        result = job.execute_in_process(resources=resources, instance=instance)
        assert result.success
        assert result.output_for_node("load", "virtual_file_id") == "asset:cities/raw"
        counts.append(len(result.output_for_node("big", "result")))
        event = instance.get_latest_materialization_event(dg.AssetKey(["cities", "raw"]))
        assert event.asset_materialization.metadata["virtual_file_id"].value == "asset:cities/raw"
    assert counts == [1, 3]  # the query read the rows of its own run
    assert [r["city"] for r in store.rows("asset:cities/raw")] == ["Oslo", "Lima", "Riga"]
    # anyone reads the asset by its name: a notebook, the CLI
    found = invoke("etl.query", {"virtualFileId": "asset:cities/raw", "query": {"city": "Lima"}}, resources)
    assert found["result"] == [{"city": "Lima", "n": "4"}]


def test_python_assets_replace_too(resources: dict, files: Any, store: Any) -> None:
    pf = files.add_bytes(b"a\n1\n", "a.csv").to_json()
    raw = action_asset("py/raw", "etl.push", {"platformFile": pf})
    instance = dg.DagsterInstance.ephemeral()
    sizes = []
    for _ in range(3):
        assert dg.materialize([raw], resources=resources, instance=instance).success
        sizes.append((len(store.inventory()), len(tables(store))))
        assert store.rows("asset:py/raw") == [{"a": "1"}]
    assert sizes[0] == sizes[1] == sizes[2], sizes


def test_a_key_too_long_to_name_a_file_is_refused_at_load(tmp_path: Path) -> None:
    key = "/".join(["segment"] * 9)
    path = write(tmp_path, f"""
        name: long
        steps:
          - id: load
            action: etl.push
            asset: {key}
            input: {{platformFile: "${{file:x.csv}}"}}
    """)
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path)
    assert f"p.yaml:5: step load: asset key '{key}' is too long to name its virtual file" in str(caught.value)
    with pytest.raises(ValueError, match="too long"):
        action_asset(key, "etl.push")


def test_a_reader_in_progress_keeps_its_rows_while_another_run_replaces_them(store: Any) -> None:
    """Two runs of one pipeline: one reads the asset's file while the other publishes a new version. The
    reader's transaction reads the rows it started on (PostgreSQL: the replacement waits for it; SQLite:
    its snapshot) — never "relation does not exist" (seen with 4 concurrent sales_report runs)."""
    import threading

    store.publish("asset:shared", store.create_from_rows([{"v": "old"}]))
    newer = store.create_from_rows([{"v": "new"}])
    published = threading.Event()
    with store.reading() as conn:
        info = store.info(conn, "asset:shared")
        worker = threading.Thread(target=lambda: (store.publish("asset:shared", newer), published.set()))
        worker.start()
        published.wait(timeout=2)  # PostgreSQL: still waiting for this reader; SQLite: done already
        rows = conn.execute(sa.select(*info.column_map().values())).all()
        assert [tuple(r) for r in rows] == [("old",)]
    worker.join(timeout=30)
    assert published.is_set() and store.rows("asset:shared") == [{"v": "new"}]


def test_a_notebook_reads_an_asset_by_its_name_as_docs_pipelines_shows(store: Any) -> None:
    """docs/pipelines.md once wrote ``%etl query asset:sales/orders``, which the magic refuses: the name goes
    where an id goes in the action's input. The line the docs give now is run here as written."""
    from connector_ops.magic import unload_ipython_extension
    from tests.magic.conftest import make_shell

    store.publish("asset:sales/orders", store.create_from_rows([{"region": "North"}, {"region": "South"}]))
    doc = (Path(__file__).resolve().parents[1] / "docs" / "pipelines.md").read_text()
    line = doc.split("`%etl query ", 1)[1].split("`", 1)[0]
    shell = make_shell()
    try:
        assert shell.run_line_magic("etl", f"query {line}")["result"] == [{"region": "North"}, {"region": "South"}]
    finally:
        unload_ipython_extension(shell)
        shell.clear_instance()
