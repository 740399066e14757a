"""The JSON Schema of the pipeline DSL (issue 12, item 6): current, complete, and right about real files."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from connector_ops.pipelines.dsl import PipelineError, load_pipeline
from connector_ops.pipelines.dsl import validate as dsl
from connector_ops.pipelines.dsl.checks import CHECK_KEYS
from connector_ops.pipelines.dsl.json_schema import pipeline_schema
from connector_ops.pipelines.dsl.notify import NOTIFY_KEYS
from connector_ops.pipelines.dsl.retries import RETRY_KEYS
from tests.pipeline_files import write

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "pipelines" / "pipeline.schema.json"


@pytest.fixture(scope="module")
def schema() -> dict:
    return pipeline_schema()


def check(schema: dict, document: dict) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    return sorted(e.message for e in validator.iter_errors(document))


def test_the_shipped_file_is_current(schema):
    """Regenerate with `connector-ops pipeline schema > pipelines/pipeline.schema.json`."""
    assert json.loads(SHIPPED.read_text(encoding="utf-8")) == schema
    jsonschema.Draft202012Validator.check_schema(schema)


def test_it_knows_every_key_the_validator_knows(schema):
    assert set(schema["properties"]) == set(dsl.TOP_KEYS)
    assert set(schema["$defs"]["step"]["properties"]) == set(dsl.STEP_KEYS)
    assert set(schema["$defs"]["step"]["properties"]["foreach"]["properties"]) == set(dsl.FOREACH_KEYS)
    assert set(schema["properties"]["on_new_file"]["properties"]) == set(dsl.TRIGGER_KEYS)
    assert set(schema["$defs"]["retry"]["properties"]) == set(RETRY_KEYS)
    assert set(schema["$defs"]["check"]["properties"]) == set(CHECK_KEYS)
    assert set(schema["$defs"]["notification"]["properties"]) == set(NOTIFY_KEYS)


@pytest.mark.parametrize("path", sorted((ROOT / "pipelines").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_pipeline_is_valid(schema, path):
    assert check(schema, yaml.safe_load(path.read_text(encoding="utf-8"))) == []


def test_mistakes_an_editor_should_underline(schema):
    base = {"name": "p", "steps": [{"id": "q", "action": "etl.query",
                                    "input": {"virtualFileId": "${load.virtualFileId}", "query": {}}}]}
    assert check(schema, base) == []
    assert check(schema, {**base, "colour": "red"})  # an unknown top-level key
    assert check(schema, {"name": "p", "steps": [{"id": "q", "action": "etl.qery", "input": {}}]})
    wrong_field = {"name": "p", "steps": [{"id": "q", "action": "etl.query",
                                           "input": {"virtualFileId": "x", "query": {}, "limit": 3}}]}
    assert any("limit" in m for m in check(schema, wrong_field))
    size = {"name": "p", "steps": [{"id": "i", "action": "etl.iterate",
                                    "input": {"content": "x", "maxBatchSize": "ten"}}]}
    assert check(schema, size)  # a literal of the wrong type
    size["steps"][0]["input"]["maxBatchSize"] = "${env.BATCH}"  # a reference may stand for a number
    assert check(schema, size) == []


AGREE_BASE = {"name": "t", "steps": [
    {"id": "load", "action": "etl.push", "input": {"platformFile": "${file:customers.csv}"}},
    {"id": "out", "action": "etl.pull",
     "input": {"virtualFileId": "${load.virtualFileId}", "exportType": "csv", "exportName": "x.csv"}}]}


def _edited(path: tuple, value: object) -> dict:
    document = copy.deepcopy(AGREE_BASE)
    node = document
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return document


@pytest.mark.parametrize(("path", "value"), [
    (("steps", 1, "after"), "load"),  # one id without a list
    (("tags",), None),
    (("schedule",), "@daily"),
    (("steps", 0, "asset"), "a/" + "x" * 56),  # the longest key whose virtual file can be named
], ids=str)
def test_schema_accepts_what_the_loader_accepts(schema, tmp_path, path, value):
    document = _edited(path, value)
    if path[-1] == "asset":
        document["steps"][0]["group"] = "1abc"  # Dagster's group names may start with a digit
        document["steps"][0]["check"] = {"schema": {"a": {"type": "string"}}, "severity": "Warn"}
    (tmp_path / "customers.csv").write_text("a\n1\n")
    load_pipeline(write(tmp_path, yaml.safe_dump(document)))
    assert check(schema, document) == []


@pytest.mark.parametrize(("path", "value"), [
    (("steps", 1, "id"), "a__b"),
    (("steps", 1, "id"), "env"),
    (("steps", 1, "id"), "trigger"),
    (("steps", 1, "description"), 5),
    (("schedule",), "every day"),
    (("schedule",), "0 0 6 * * *"),  # seconds: Dagster refuses them
    (("steps", 0, "asset"), "a/" + "x" * 57),
], ids=str)
def test_schema_refuses_what_the_loader_refuses(schema, tmp_path, path, value):
    document = _edited(path, value)
    (tmp_path / "customers.csv").write_text("a\n1\n")
    with pytest.raises(PipelineError):
        load_pipeline(write(tmp_path, yaml.safe_dump(document)))
    assert check(schema, document)


def test_the_cli_prints_it(schema):
    script = Path(sys.executable).parent / "connector-ops"
    done = subprocess.run([str(script), "pipeline", "schema"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == schema
