"""The JSON Schema of the pipeline DSL (issue 12, item 6): current, complete, and right about real files."""

from __future__ import annotations

import copy
import functools
import json
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_a_name_ending_in_a_line_break_is_underlined_in_python_as_in_an_editor(schema):
    """Python's ``re`` (the ``jsonschema`` package) reads ``$`` as also before a final line break; an editor's
    ECMA 262 does not. The patterns end so that both refuse ``"job\\n"``."""
    step = {"id": "q", "action": "etl.clean", "input": {"virtualFileId": "x"}}
    assert check(schema, {"name": "p", "steps": [step]}) == []
    assert check(schema, {"name": "p\n", "steps": [step]})
    assert check(schema, {"name": "p", "steps": [{**step, "id": "q\n"}]})
    assert check(schema, {"name": "p", "steps": [{**step, "asset": "a/b\n"}]})
    assert check(schema, {"name": "p", "steps": [{**step, "group": "g\n"}]})
    assert check(schema, {"name": "p", "steps": [{**step, "owners": ["team:x\n"]}]})


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
    (("schedule",), "@DAILY"),  # Dagster reads a macro in any case
    (("schedule",), " 59 23 31 12 7 "),  # each field at its bound; 7 is Sunday too
    (("schedule",), "*/15 0-23/2 1-L jan-MAR,dec mon-fri"),
    (("schedule",), "00 06 ? * sun#1,Sat#5"),
    (("schedule",), "0 6 L,15 */1 ?"),
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
    (("schedule",), "61 25 * * *"),  # each field within its bounds
    (("schedule",), "0 0 32 13 8"),
    (("schedule",), "5-60 * * * *"),
    (("schedule",), "0 24/2 * * *"),
    (("schedule",), "0 6 0 * *"),
    (("schedule",), "*/0 * * * *"),
    (("schedule",), "0 6 * * 1#6"),
    (("schedule",), "0 6 * * monday"),
    (("schedule",), " @daily"),  # a macro without spaces around it
    (("steps", 0, "asset"), "a/" + "x" * 57),
    (("timezone",), "UTC"),  # a time zone only applies to a schedule
], ids=str)
def test_schema_refuses_what_the_loader_refuses(schema, tmp_path, path, value):
    document = _edited(path, value)
    (tmp_path / "customers.csv").write_text("a\n1\n")
    with pytest.raises(PipelineError):
        load_pipeline(write(tmp_path, yaml.safe_dump(document)))
    assert check(schema, document)


#: each cron field's bounds and its words; values one past either bound, and zeros before them, are drawn too
_FIELDS = [(0, 59, []), (0, 23, []), (1, 31, ["L", "l", "?"]), (1, 12, ["jan", "Feb", "DEC"]),
           (0, 7, ["sun", "Mon", "SAT", "?"])]


@st.composite
def _crons(draw: st.DrawFn) -> str:
    def item(low: int, high: int, words: list[str]) -> str:
        value = draw(st.one_of(st.integers(low - 1, high + 1).map(str), st.sampled_from(["*", *words]),
                               st.integers(low, high).map(lambda n: f"0{n}")))
        if draw(st.booleans()) and value != "*":
            value += "-" + draw(st.one_of(st.integers(low - 1, high + 1).map(str), st.sampled_from(words or ["5"])))
        if draw(st.booleans()):
            value += "/" + str(draw(st.sampled_from([0, 1, 2, 15, 60, 100])))
        return value
    return " ".join(",".join(draw(st.lists(st.builds(item, st.just(low), st.just(high), st.just(words)),
                                           min_size=1, max_size=3)))
                    for low, high, words in _FIELDS)


def _out_of_bounds(cron: str) -> bool:
    """A value above its field's bound, or below it outside a range (Dagster's parser takes ``3-0``)."""
    for (low, high, _), field in zip(_FIELDS, cron.split(), strict=True):
        for number in re.finditer(r"(?<![/\d])\d+", field):
            in_range = "-" in (field[number.start() - 1:number.start()], field[number.end():number.end() + 1])
            if int(number[0]) > high or (int(number[0]) < low and not in_range):
                return True
    return False


@functools.cache
def _schedule_pattern() -> re.Pattern[str]:
    return re.compile(pipeline_schema()["properties"]["schedule"]["pattern"])


@settings(max_examples=200, deadline=None)
@given(cron=_crons())
def test_the_schedule_pattern_takes_every_cron_dagster_takes_and_no_value_out_of_bounds(cron):
    """The pattern never underlines a schedule that loads, and refuses one with a value out of bounds. The check
    warns of nothing (Dagster's warning of a step past its field's range, ``*/100``, is caught inside it)."""
    matches = _schedule_pattern().search(cron) is not None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        valid = dsl.valid_cron(cron)
    assert [str(w.message) for w in caught] == [], cron
    if valid:
        assert matches, cron
    if _out_of_bounds(cron):
        assert not matches, cron


#: top-level keys of the docs' YAML blocks that are not pipelines: a component's defs.yaml, Dagster's own files
NOT_PIPELINE_KEYS = {"type", "attributes", "retention", "execution", "run_storage", "run_launcher", "load_from"}


def _docs_pipelines() -> dict[str, dict]:
    """Every YAML block of README.md and docs/*.md that is a pipeline or a part of one (some of its keys, or
    steps), made whole by a stub, by where it is; a component's or Dagster's own file is left out by its keys,
    so that a block with a misspelt key (``schedul:``) is checked, and fails, rather than left out."""
    stub = {"name": "docs", "steps": [{"id": "s", "action": "etl.clean", "input": {"virtualFileId": "x"}}]}
    found = {}
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        for block in re.finditer(r"^( *)```yaml\n(.*?)^\1```", text, re.S | re.M):
            part = yaml.safe_load(textwrap.dedent(block.group(2)))
            part = {"steps": part} if isinstance(part, list) else part
            if isinstance(part, dict) and not set(part) & NOT_PIPELINE_KEYS:
                found[f"{doc.name}:{text.count(chr(10), 0, block.start()) + 1}"] = {**stub, **part}
    return found


DOCS_PIPELINES = _docs_pipelines()


def test_the_docs_pipelines_are_found():
    """An empty list would make the test below vanish (an empty parametrisation) rather than fail."""
    assert len(DOCS_PIPELINES) >= 11, sorted(DOCS_PIPELINES)


@pytest.mark.parametrize("where", DOCS_PIPELINES)
def test_every_pipeline_of_the_docs_is_valid(schema, where):
    assert check(schema, DOCS_PIPELINES[where]) == []


def test_the_cli_prints_it(schema):
    script = Path(sys.executable).parent / "connector-ops"
    done = subprocess.run([str(script), "pipeline", "schema"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == schema


#: a pipeline file with one push step; {top}: top-level keys, {step}: keys of the step, {params}: its parameters,
#: {more}: more steps
_FILE = ("name: p\n{top}steps:\n  - id: load\n    action: etl.push\n{step}"
         "    input: {{platformFile: \"${{file:data/x.csv}}\", parameters: {{{params}}}}}\n{more}")
_MESSAGE = "{from: a@b.co, recipients: [{to: c@d.co}], templateId: 1, templateVariables: {}}"
_JOIN = ("  - id: j\n    action: etl.join\n    input: {{join: {{left: {{virtualFileId: '${{load.virtualFileId}}', "
         "customId: a, key: k}}, right: {{virtualFileId: '${{load.virtualFileId}}', customId: b, key: k}}, "
         "type: {}}}}}\n")
_MAIL = ("  - id: m\n    action: mail.send_transactional_message\n    input: {{from: a@b.co, recipients: "
         "[{{to: c@d.co, type: {}}}], templateId: 1, templateVariables: {{}}}}\n")


_CHECK = "    asset: a\n    check: {{schema: {{c: {{type: string}}}}, {}}}\n"


def _case(top: str = "", step: str = "", params: str = "", more: str = "") -> str:
    return _FILE.format(top=top, step=step, params=params, more=more)


#: (file, whether it loads): each must be accepted by both the loader and the schema, or refused by both
AGREEMENT = {
    "description: (empty)": (_case(top="description:\n"), True),
    "description: 5": (_case(top="description: 5\n"), False),
    "step description: (empty)": (_case(step="    description:\n"), True),
    "schedule: (empty)": (_case(top="schedule:\n"), False),
    "timezone: (empty)": (_case(top="schedule: '@daily'\ntimezone:\n"), False),
    "retry: (empty)": (_case(top="retry:\n"), False),
    "notify: (empty)": (_case(top="notify:\n"), False),
    "on_new_file: (empty)": (_case(top="on_new_file:\n"), False),
    "step retry: (empty)": (_case(step="    retry:\n"), False),
    "step foreach: (empty)": (_case(step="    foreach:\n"), False),
    "on_new_file folderId ''": (_case(top="on_new_file: {folderId: ''}\n"), False),
    "on_new_file folderId 12": (_case(top="on_new_file: {folderId: 12}\n"), False),
    "on_new_file folderId null": (_case(top="on_new_file: {folderId: null}\n"), False),
    "on_new_file folderId text": (_case(top="on_new_file: {folderId: inbox}\n"), True),
    "step foreach virtualFileId ' '": (_case(step="    foreach: {virtualFileId: ' '}\n"), False),
    "step foreach virtualFileId 3": (_case(step="    foreach: {virtualFileId: 3}\n"), False),
    "step check: (empty)": (_case(step="    asset: a\n    check:\n"), False),
    "tags: (empty)": (_case(top="tags:\n"), True),
    "tags: {}": (_case(top="tags: {}\n"), True),
    "tags: []": (_case(top="tags: []\n"), False),
    "tags: ''": (_case(top="tags: ''\n"), False),
    "tags: false": (_case(top="tags: false\n"), False),
    "tags: {a: 1}": (_case(top="tags: {a: 1}\n"), False),
    "join type: inner": (_case(more=_JOIN.format("inner")), True),
    "join type: Left": (_case(more=_JOIN.format("Left")), True),
    "join type: outer": (_case(more=_JOIN.format("outer")), False),
    "recipient type: to": (_case(more=_MAIL.format("to")), True),
    "recipient type: ' To '": (_case(more=_MAIL.format("' To '")), True),
    "recipient type: from": (_case(more=_MAIL.format("from")), False),
    "boolean 'false'": (_case(params="useFirstRowAsSchema: 'false'"), True),
    "boolean 'Yes'": (_case(params="useFirstRowAsSchema: 'Yes'"), True),
    "boolean 0": (_case(params="useFirstRowAsSchema: 0"), True),
    "boolean 1": (_case(params="useFirstRowAsSchema: 1"), True),
    "boolean 2": (_case(params="useFirstRowAsSchema: 2"), False),
    "boolean 'nope'": (_case(params="useFirstRowAsSchema: 'nope'"), False),
    "integer '2'": (_case(params="linesToIgnore: '2'"), True),
    "integer ' 2 '": (_case(params="linesToIgnore: ' 2 '"), True),
    "integer '2.0'": (_case(params="linesToIgnore: '2.0'"), True),
    "integer 2.0": (_case(params="linesToIgnore: 2.0"), True),
    "integer true": (_case(params="linesToIgnore: true"), True),
    "integer '-1' (minimum 0)": (_case(params="linesToIgnore: '-1'"), False),
    "integer '2.5'": (_case(params="linesToIgnore: '2.5'"), False),
    "integer 'two'": (_case(params="linesToIgnore: two"), False),
    "integer from a reference": (_case(params="linesToIgnore: '${env.LINES}'"), True),
    "escaped $${x} for an enum": (_case(params="onRowError: '$${x}'"), False),
    "escaped $${x} for a boolean": (_case(params="useFirstRowAsSchema: '$${x}'"), False),
    "escaped $${x} then a reference": (_case(params="onRowError: '$${x}${env.X}'"), True),
    "notify when: success": (_case(top=f"notify: {{when: success, message: {_MESSAGE}}}\n"), True),
    "notify when: [success, failure]": (_case(top=f"notify: {{when: [success, failure], message: {_MESSAGE}}}\n"),
                                        True),
    "notify when: []": (_case(top=f"notify: {{when: [], message: {_MESSAGE}}}\n"), False),
    "notify when: sucess": (_case(top=f"notify: {{when: sucess, message: {_MESSAGE}}}\n"), False),
    "timezone: UTC": (_case(top="schedule: '@daily'\ntimezone: UTC\n"), True),
    "timezone: Europe/Paris": (_case(top="schedule: '@daily'\ntimezone: Europe/Paris\n"), True),
    "timezone: utc": (_case(top="schedule: '@daily'\ntimezone: utc\n"), False),
    "timezone: Z": (_case(top="schedule: '@daily'\ntimezone: Z\n"), False),
    "timezone: Etc/GMT+5": (_case(top="schedule: '@daily'\ntimezone: Etc/GMT+5\n"), True),
    "retry backoff without delay": (_case(top="retry: {max_retries: 1, backoff: linear}\n"), False),
    "retry backoff with delay": (_case(top="retry: {max_retries: 1, delay: 2, backoff: linear}\n"), True),
    "check max_rejected: 1.5": (_case(step=_CHECK.format("max_rejected: 1.5")), False),
    "check max_rejected: 0.5": (_case(step=_CHECK.format("max_rejected: 0.5")), True),
    "check max_rejected: 2.0": (_case(step=_CHECK.format("max_rejected: 2.0")), True),
    "kinds: ['']": (_case(step="    asset: a\n    kinds: ['']\n"), False),
    "kinds: [' ']": (_case(step="    asset: a\n    kinds: [' ']\n"), False),
    "kinds: [csv]": (_case(step="    asset: a\n    kinds: [csv]\n"), True),
}


@pytest.fixture(scope="module")
def agreement_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("agreement")
    (folder / "data").mkdir()
    (folder / "data" / "x.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    return folder


@pytest.mark.parametrize("label", AGREEMENT)
def test_the_schema_and_the_loader_agree(schema, agreement_folder, label):
    """docs/pipelines.md: the schema refuses what the loader refuses where JSON Schema can say it, and accepts
    what it accepts. Each file goes through both (``pipeline validate``'s loader, the schema as an
    editor reads it; the shipped file is the same, see above) and both must give the verdict of the table."""
    text, loads = AGREEMENT[label]
    path = write(agreement_folder, text)
    try:
        load_pipeline(path)
        loader = []
    except PipelineError as exc:
        loader = [p.message for p in exc.problems]
    underlined = check(schema, yaml.safe_load(text))
    assert (not loader, not underlined) == (loads, loads), (loader, underlined)
