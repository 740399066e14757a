"""The YAML pipeline DSL: references, validation errors (with lines), compilation, foreach, schedules, CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from connector_ops.cli import main
from connector_ops.environment import resources_for
from connector_ops.kernel.errors import InvalidInput
from connector_ops.kernel.limits import MAX_BATCHES
from connector_ops.ops.io_manager import StepOutputIOManager
from connector_ops.pipelines.dsl import CompiledPipeline, PipelineError, compile_pipeline, load_pipeline
from connector_ops.pipelines.dsl import references as r
from connector_ops.pipelines.runner import run_compiled
from connector_ops.registry import get_action
from tests.pipeline_files import write

DATA = Path(__file__).resolve().parents[1] / "pipelines" / "data"


# -- references ------------------------------------------------------------------------------------
def test_every_reference_form_resolves() -> None:
    scope = r.Scope(
        steps={"load": {"virtualFileId": "vf1", "platformFile": {"name": "a.csv", "size": 3}},
               "q": {"result": [{"region": "North"}, {"region": "South"}]}, "done": "ok"},
        environ={"N": "42", "OBJ": '{"a": [1, 2]}', "WORD": "plain"},
        batch={"index": 2, "rows": [{"x": "1"}], "virtualFileId": "vf1"},
        trigger={"fileId": "f9", "name": "in.csv", "folderId": "root"},
    )
    assert r.resolve("${load.virtualFileId}", scope) == "vf1"
    assert r.resolve("${load.platformFile}", scope) == {"name": "a.csv", "size": 3}  # exact: JSON type kept
    assert r.resolve("${load.platformFile.size}", scope) == 3
    assert r.resolve("${q.result.1.region}", scope) == "South"  # list index
    assert r.resolve("${done}", scope) == "ok"  # a bare output / the whole output
    assert r.resolve("${load}", scope)["virtualFileId"] == "vf1"
    assert r.resolve("${env.N}", scope) == 42  # environment parsed as JSON when it is JSON
    assert r.resolve("${env.OBJ}", scope) == {"a": [1, 2]}
    assert r.resolve("${env.WORD}", scope) == "plain"
    assert r.resolve("${env.MISSING:-root}", scope) == "root"
    assert r.resolve("n=${env.N} f=${load.platformFile.name}", scope) == "n=42 f=a.csv"  # interpolation
    assert r.resolve("obj=${env.OBJ}", scope) == 'obj={"a": [1, 2]}'  # raw env text inside a string
    assert r.resolve("size ${load.platformFile}", scope) == 'size {"name":"a.csv","size":3}'
    assert r.resolve("$${load.virtualFileId} stays", scope) == "${load.virtualFileId} stays"  # escape
    assert r.resolve({"k": ["${batch.index}", "${trigger.name}"]}, scope) == {"k": [2, "in.csv"]}
    assert r.resolve("${batch.rows}", scope) == [{"x": "1"}]
    with pytest.raises(InvalidInput, match="environment variable NOPE is not set"):
        r.resolve("${env.NOPE}", scope)
    with pytest.raises(InvalidInput, match=r"q\.result has no '7'"):
        r.resolve("${q.result.7}", scope)
    with pytest.raises(r.ReferenceSyntaxError):
        r.parse_template("${not a ref}")


def test_an_env_default_stands_in_for_a_variable_set_but_empty_as_in_the_shell() -> None:
    """``${NAME:-default}`` in the shell covers ``NAME=`` too (an env file's blank line, a ConfigMap key left
    empty); the empty value used to win, so ``csvDelimiter: "${env.DELIM:-,}"`` got no delimiter at all."""
    scope = r.Scope(environ={"DELIM": "", "NAME": "x.csv"})
    assert r.resolve("${env.DELIM:-,}", scope) == ","
    assert r.resolve("d=${env.DELIM:-;}", scope) == "d=;"  # interpolated alike
    assert r.resolve("${env.NAME:-report.csv}", scope) == "x.csv"
    assert r.resolve("${env.DELIM}", scope) == ""  # no default: the empty text, as the shell's ${DELIM}
    assert r.resolve_text("${env.DELIM:-root}", scope) == "root"
    deferred = r.resolve_deferring_env({"csvDelimiter": "${env.DELIM:-,}"}, scope)
    assert deferred.value({"DELIM": ""}) == {"csvDelimiter": ","}  # where the action op reads it


# -- validation ------------------------------------------------------------------------------------
BAD = """
name: bad pipeline
schedule: "61 * * * *"
timezone: Mars/Olympus
colour: blue
steps:
  - id: load
    action: etl.pushh
    input:
      platformFile: "${file:nope.csv}"
  - id: q
    action: etl.query
    input:
      virtualFileId: "${load.virtualFileId}"
      query: {region: North}
      bogus: 1
  - id: a
    action: etl.pull
    input:
      virtualFileId: "${b.virtualFileId}"
      exportType: xml
      exportName: a.csv
  - id: b
    action: etl.push
    after: [a, zzz]
    input:
      platformFile: "${a.platformFile.lnk}"
  - id: c
    action: etl.query
    input:
      virtualFileId: "${q.rows}"
      query: "${batch.rows}"
  - id: d
    action: etl.pull
    input: {exportType: csv, exportName: "${trigger.name}", virtualFileId: "${nowhere.x}"}
  - id: d
    action: etl.clean
    foreach: {maxBatchSize: 0}
    input: {virtualFileId: "${f.missing}"}
  - id: f
    action: etl.push
    input: {platformFile: "${file:missing.csv}", parameters: {csvDelimiter: ";;"}}
"""


def test_validation_reports_every_error_with_file_line_and_step(tmp_path: Path) -> None:
    path = write(tmp_path, BAD)
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path)
    found = [(p.line, p.step, p.message) for p in caught.value.problems]
    text = "\n".join(str(p) for p in caught.value.problems)
    assert all(str(p).startswith(f"{path}:{p.line}: ") for p in caught.value.problems)
    expected = [
        (1, None, "`name` 'bad pipeline' is not a valid job name: it contains ' ' — use letters, digits and _; "
                  "e.g. 'bad_pipeline'"),
        (2, None, "not a valid cron string"),
        (3, None, "`timezone` 'Mars/Olympus' is not an IANA time zone name"),
        (4, None, "unknown key 'colour'"),
        (7, "load", "unknown action 'etl.pushh'; did you mean etl.push"),
        (15, "q", "unknown field 'bogus' in etl.query input"),
        (16, "a", "steps a -> b -> a form a cycle"),
        (20, "a", "exportType: Input should be 'json', 'csv' or 'parquet'"),
        (24, "b", "`after` names 'zzz', which is not a step"),
        (26, "b", "${a.platformFile.lnk}: platformFile has no field 'lnk'"),
        (30, "c", "${q.rows}: etl.query has no output field 'rows' (outputs: result)"),
        (31, "c", "${batch…} is only available in the input of a foreach step"),
        (34, "d", "${trigger.name}: ${trigger…} needs `on_new_file`"),
        (34, "d", "${nowhere.x}: there is no step 'nowhere'"),
        (35, "d", "duplicate step id 'd'"),
        (37, "d", "`maxBatchSize` must be a whole number"),
        (37, "d", "`foreach` needs `virtualFileId`"),
        (41, "f", "${file:missing.csv}: no file 'missing.csv' next to the pipeline file"),
        (41, "f", "parameters.csvDelimiter: must be a single character"),
    ]
    for line, step, fragment in expected:
        assert any(ln == line and st == step and fragment in msg for ln, st, msg in found), (fragment, text)


def test_a_foreach_step_whose_input_takes_no_batch_is_a_located_problem(tmp_path: Path) -> None:
    """A foreach step whose input used no ${batch…} passed nothing to map: `pipeline validate` and the code
    location failed with a 500, Dagster's 'Unexpected dynamic fan in dep' CheckError."""
    path = write(tmp_path, """
        name: same_work
        steps:
          - {id: load, action: etl.push, input: {platformFile: "${file:p.yaml}"}}
          - id: each
            foreach: {virtualFileId: "${load.virtualFileId}", maxBatchSize: 1}
            action: etl.query
            input: {virtualFileId: "${load.virtualFileId}", query: {}}
        """)
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path)
    (problem,) = caught.value.problems
    assert (problem.line, problem.step) == (5, "each")
    assert problem.message.startswith("a foreach step's input must use its batch (${batch.rows}")


@pytest.mark.parametrize(("name", "bad", "suggested"), [
    ("ventes_\u00e9t\u00e9", "'\u00e9'", "ventes_ete"),  # accented letters: str.isalnum() takes them, Dagster not
    ("stra\u00dfe", "'\u00df'", "strasse"),
    ("donn\u00e9es-2024", "'-', '\u00e9'", "donnees_2024"),
    ("a - b", "' ', '-'", "a_b"),  # one _ for a run of refused characters
])
def test_a_name_with_letters_dagster_refuses_names_them_and_suggests_an_ascii_name(
        tmp_path: Path, name: str, bad: str, suggested: str) -> None:
    path = write(tmp_path, f'name: "{name}"\nsteps:\n  - id: q\n    action: etl.query\n'
                           '    input: {virtualFileId: x, query: {}}\n')
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path)
    [problem] = caught.value.problems
    assert problem.message == (f"`name` {name!r} is not a valid job name: it contains {bad} — use letters, "
                               f"digits and _; e.g. {suggested!r}")
    load_pipeline(write(tmp_path, path.read_text(encoding="utf-8").replace(name, suggested)))  # it is valid


@pytest.mark.parametrize(("top", "problem"), [
    ("tags: {1: one}", "`tags` must map names to strings"),  # Dagster's CheckError while building the job
    (f"timezone: {'x' * 300}", "`timezone` 'xxx"),  # once zoneinfo's OSError: the name is too long a path
])
def test_top_level_values_only_dagster_or_the_library_refused_are_located(tmp_path: Path, top: str,
                                                                          problem: str) -> None:
    """Two values that passed the checks and failed while the job was built, with another exception than a
    file's problem (a 500 in ``pipeline validate``): each is a problem of its line."""
    path = write(tmp_path, f"name: odd\n{top}\nsteps:\n  - id: a\n    action: etl.clean\n"
                           "    input: {virtualFileId: x}\n")
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path)
    (found,) = caught.value.problems
    assert found.line == 2 and found.message.startswith(problem), found


def test_missing_required_field_and_invalid_yaml_are_located(tmp_path: Path) -> None:
    path = write(tmp_path, """
        name: p
        steps:
          - id: out
            action: etl.pull
            input: {exportType: csv}
        """)
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path)
    messages = {(p.line, p.message) for p in caught.value.problems}
    assert (5, "virtualFileId: is required by etl.pull") in messages
    assert (5, "exportName: is required by etl.pull") in messages

    broken = write(tmp_path, "name: p\nsteps:\n  - id: [unclosed\n", "broken.yaml")
    with pytest.raises(PipelineError) as caught:
        load_pipeline(broken)
    (problem,) = caught.value.problems
    assert problem.line >= 3 and "invalid YAML" in problem.message


def test_a_misspelled_field_holding_a_reference_is_unknown_with_the_field_meant(tmp_path: Path) -> None:
    """The value's reference (checked when the step runs) does not hide that the field itself is unknown; a
    field differing only in case is suggested (difflib alone would not)."""
    path = write(tmp_path, """
        name: typo_ref
        steps:
          - id: load
            action: etl.push
            input: {platformFile: {name: a.csv, contentType: text/csv, link: "file:///a.csv", size: 1}}
          - id: q
            action: etl.query
            input: {virtualFileID: "${load.virtualFileId}", query: {}}
          - id: q2
            action: etl.query
            input: {virtualFileId: "${load.virtualFileId}", qeury: "${load.virtualFileId}", query: {}}
        """)
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path)
    messages = {(p.line, p.step, p.message) for p in caught.value.problems}
    assert (8, "q", "unknown field 'virtualFileID' in etl.query input; did you mean 'virtualFileId'? "
                    "(fields: virtualFileId, query, extractOnlyOneResult)") in messages
    assert any(line == 11 and step == "q2" and "unknown field 'qeury'" in message and "did you mean 'query'?" in
               message for line, step, message in messages), messages


def test_a_step_id_dagster_refuses_says_why_and_suggests_one(tmp_path: Path) -> None:
    """``load-step`` is given: "`id` is required" said otherwise. As the job-name check: what is wrong, a name
    that works."""
    path = write(tmp_path, """
        name: p
        steps:
          - id: load-step
            action: etl.clean
            input: {virtualFileId: x}
          - id: a__b
            action: etl.clean
            input: {virtualFileId: x}
          - action: etl.clean
            input: {virtualFileId: x}
        """)
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path)
    assert [(p.line, p.message) for p in caught.value.problems] == [
        (3, "`id` 'load-step' is not a valid step id: it contains '-' — use letters, digits and single _ "
            "(it becomes the op name); e.g. 'load_step'"),
        (6, "`id` 'a__b' is not a valid step id: it contains __ — use letters, digits and single _ "
            "(it becomes the op name); e.g. 'a_b'"),
        (9, "`id` is required: letters, digits and single _ (it becomes the op name)")]


def test_a_name_ending_in_a_line_break_is_no_name(tmp_path: Path) -> None:
    """YAML's ``name: |`` (or ``id: "mk\\n"``) ends the name with a line break, which Python's ``$`` let through:
    the file validated, and Dagster then refused the whole pipeline when it was built. Refused here, named, on
    one line, like any other character Dagster refuses; an asset key and group likewise."""
    path = write(tmp_path, """
        name: |
          newline_job
        steps:
          - id: "mk\\n"
            action: etl.clean
            input: {virtualFileId: x}
            asset: "sales/clean\\n"
            group: "g\\n"
        """)
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path)
    problems = [(p.line, p.message) for p in caught.value.problems]
    assert problems[:2] == [
        (1, "`name` 'newline_job\\n' is not a valid job name: it contains '\\n' — use letters, digits and _; "
            "e.g. 'newline_job'"),
        (4, "`id` 'mk\\n' is not a valid step id: it contains '\\n' — use letters, digits and single _ "
            "(it becomes the op name); e.g. 'mk'")]
    assert (7, "`asset` must be a key like `sales/raw`: parts of letters, digits, _ and -, separated by /") in problems
    assert (8, "`group` must be a name of letters, digits and _") in problems
    assert "step 'mk\\n': " in str(caught.value.problems[1])  # the location, on one line


def test_an_unknown_field_with_a_hint_of_its_action_says_where_the_value_goes(tmp_path: Path) -> None:
    path = write(tmp_path, """
        name: p
        steps:
          - id: each
            action: etl.iterate
            input: {virtualFileId: abc, maxBatchSize: 10}
        """)
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path)
    assert (5, "unknown field 'virtualFileId' in etl.iterate input; etl.iterate takes the virtual file id in "
               "`content` (fields: content, maxBatchSize)") in {(p.line, p.message) for p in caught.value.problems}


def test_cli_validate_prints_problems_and_exits_non_zero(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    good = write(tmp_path, """
        name: fine
        schedule: "*/5 * * * *"
        steps:
          - id: only
            action: etl.query
            input: {virtualFileId: abc, query: {a: "1"}}
        """, "good.yaml")
    bad = write(tmp_path, BAD, "bad.yaml")
    with pytest.raises(SystemExit) as exited:
        main(["pipeline", "validate", str(good), str(bad)])
    assert exited.value.code == 1
    out = capsys.readouterr().out
    assert f"{good}: ok — job fine, 1 steps, schedule '*/5 * * * *'" in out
    assert f"{bad}:7: step load: unknown action 'etl.pushh'" in out
    assert main(["pipeline", "validate", str(good)]) == 0


# -- compilation -------------------------------------------------------------------------------------
PIPELINE = """
name: customers_demo
description: push, query, fan out, export
schedule: "0 6 * * *"
timezone: Europe/Berlin
steps:
  - id: load
    action: etl.push
    input:
      platformFile: "${file:customers.csv}"
      parameters: {useFirstRowAsSchema: true, csvDelimiter: ","}
  - id: region
    action: etl.query
    input:
      virtualFileId: "${load.virtualFileId}"
      query: {region: "${env.DSL_TEST_REGION}"}
  - id: batches
    foreach: {virtualFileId: "${load.virtualFileId}", maxBatchSize: 15}
    action: etl.iterate
    input:
      content: "${batch.rows}"
      maxBatchSize: 100
  - id: export
    action: etl.pull
    after: [region, batches]
    input:
      virtualFileId: "${load.virtualFileId}"
      exportType: csv
      exportName: "customers-${env.DSL_TEST_REGION}.csv"
"""


@pytest.fixture
def demo_file(tmp_path: Path) -> Path:
    (tmp_path / "customers.csv").write_bytes((DATA / "customers.csv").read_bytes())
    return write(tmp_path, PIPELINE)


def test_compiled_job_wires_references_as_edges(demo_file: Path) -> None:
    compiled = compile_pipeline(load_pipeline(demo_file))
    job = compiled.job
    nodes = set(job.graph.node_dict)
    # load has a ${file:…} -> a resolver; export's virtualFileId is wired straight (no resolver for it,
    # but its exportName interpolates the environment -> export__input)
    assert {"load", "load__input", "region", "region__input", "export", "export__input",
            "batches__batches", "batches__rows", "batches__input", "batches", "batches__gather"} <= nodes
    deps = job.graph.dependency_structure
    export_inputs = {h.input_name: [o.node_name for o in deps.get_deps_list(h)]
                     for h in deps.inputs() if h.node_name == "export"}
    assert export_inputs["virtual_file_id"] == ["load"]
    assert sorted(export_inputs["after"]) == ["batches__gather", "region"]
    assert export_inputs["fields"] == ["export__input"]
    # literal inputs are the job's default config (editable in the launchpad) and validate
    resolved = dg.validate_run_config(job, {})["ops"]
    assert resolved["export"]["config"]["exportType"] == "csv"
    assert resolved["batches__batches"]["config"]["maxBatchSize"] == 15
    assert "exportName" not in resolved["export"]["config"]  # it holds a reference: resolved at run time
    assert compiled.schedule is not None
    assert compiled.schedule.cron_schedule == "0 6 * * *"
    assert compiled.schedule.execution_timezone == "Europe/Berlin"
    assert compiled.schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    request = compiled.schedule.evaluate_tick(dg.build_schedule_context()).run_requests[0]
    dg.validate_run_config(job, request.run_config)


def test_pipeline_runs_with_foreach_env_and_file_references(demo_file: Path, env: dict[str, str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSL_TEST_REGION", "North")
    resources = resources_for(environ=env)
    compiled = compile_pipeline(load_pipeline(demo_file))
    outcome = run_compiled(compiled, resources)
    assert outcome.success, outcome.failure()
    rows = outcome.steps["region"]["result"]
    assert rows and {row["region"] for row in rows} == {"North"}
    # foreach: 40 customers in batches of 15 -> 3 batches, each step output collected in batch order
    batches = outcome.steps["batches"]
    assert [len(b) for b in batches["content"]] == [15, 15, 10]
    assert batches["hasNext"] == [False, False, False]
    assert [row["customer_id"] for b in batches["content"] for row in b][:2] == ["C001", "C002"]
    exported = outcome.steps["export"]["platformFile"]
    assert exported["name"] == "customers-North.csv"
    text = resources["platform_files"].read_bytes(exported).decode()
    assert len(text.splitlines()) == 41


def test_a_file_reference_is_relative_to_the_pipeline_folder_and_may_leave_it(
        tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """As docs/pipelines.md says: a relative path from the pipeline file's folder (not the current one), an
    absolute path as it is, ``..`` allowed — nothing confines it, so a pipeline file is code to review."""
    folder = tmp_path / "pipes" / "team_a"
    folder.mkdir(parents=True)
    (folder / "here.csv").write_text("v\nhere\n")
    (tmp_path / "outside.csv").write_text("v\noutside\n")
    absolute = tmp_path / "elsewhere" / "abs.csv"
    absolute.parent.mkdir()
    absolute.write_text("v\nabsolute\n")
    (tmp_path / "here.csv").write_text("v\nthe current folder\n")
    monkeypatch.chdir(tmp_path)
    path = write(folder, f"""
        name: file_paths
        steps:
          - {{id: here, action: etl.push, input: {{platformFile: "${{file:here.csv}}"}}}}
          - {{id: up, action: etl.push, input: {{platformFile: "${{file:../../outside.csv}}"}}}}
          - {{id: abs, action: etl.push, input: {{platformFile: "${{file:{absolute}}}"}}}}
    """)
    resources = resources_for(environ=env)
    outcome = run_compiled(compile_pipeline(load_pipeline(path)), resources)
    assert outcome.success, outcome.failure()
    store = resources["virtual_files"]
    assert {step: store.next_batch(outcome.steps[step]["virtualFileId"], 10)[0] for step in ("here", "up", "abs")} \
        == {"here": [{"v": "here"}], "up": [{"v": "outside"}], "abs": [{"v": "absolute"}]}


def test_cli_run_with_set_prints_each_step(demo_file: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("DSL_TEST_REGION", "West")
    assert main(["pipeline", "run", str(demo_file), "--set", 'region.query={"segment": "online"}',
                 "--set", "export.exportName=all.csv", "--full"]) == 0
    out = capsys.readouterr().out
    lines = {line.split(" ", 1)[0]: line for line in out.splitlines() if " (etl." in line}
    assert set(lines) == {"load", "region", "batches", "export"}
    region = json.loads(lines["region"].split(": ", 1)[1])
    assert region["result"] and {row["segment"] for row in region["result"]} == {"online"}
    assert '"name": "all.csv"' in lines["export"]
    assert "where the outputs went:" in out and "export: platform file all.csv" in out


def test_failed_step_reports_the_error_and_exits_non_zero(demo_file: Path, env: dict[str, str],
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture) -> None:
    monkeypatch.delenv("DSL_TEST_REGION", raising=False)
    with pytest.raises(SystemExit) as exited:
        main(["pipeline", "run", str(demo_file)])
    assert exited.value.code == 1
    captured = capsys.readouterr()
    missing = "${env.DSL_TEST_REGION}: environment variable DSL_TEST_REGION is not set"
    # stdout: the outputs of the steps that ran (load, batches), then each failed step's error body
    load, batches, *bodies = captured.out.splitlines()
    assert re.fullmatch(r'load \(etl\.push\): \{"virtualFileId": "[0-9a-f]{32}"\}', load), load
    step, _, value = batches.partition(": ")
    assert step == "batches (etl.iterate)" and json.loads(value)["hasNext"] == [False, False, False]
    assert bodies == [json.dumps({"message": missing})] * 2
    # stderr: both steps that read the unset variable failed, each named with its action and status (after
    # the lines the run printed as it went: each step's start and end, its progress)
    assert "region: failed in " in captured.err and "(status 400)" in captured.err
    summary = [line for line in captured.err.splitlines() if line and not PROGRESS_LINE.match(line)]
    assert sorted(summary) == sorted([
        f"running customers_demo ({demo_file}) in process …",
        f"step region failed: etl.query failed (400): {missing}",
        f"step export failed: etl.pull failed (400): {missing}",
    ])


#: a line ``pipeline run`` prints while the run goes: ``step: started …``, ``step: <progress>``, ``step: … in 1.2s``
PROGRESS_LINE = re.compile(r"^[\w\[\]]+: (?!etl\.)")


def test_cli_run_shows_each_step_as_it_starts_and_ends_with_its_progress(
        tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """``pipeline run`` said nothing between "running …" and the summary (22 s for a 1M-row job): Dagster's
    console log, where the ops' progress lines go, is silenced. Now stderr has a line when each step starts
    and ends (its duration; a failure's status) and the ops' INFO progress lines at their pace (here every
    update: CONNECTOR_OPS_PROGRESS_INTERVAL=0) — none of Dagster's own messages; stdout is unchanged."""
    monkeypatch.setenv("CONNECTOR_OPS_PROGRESS_INTERVAL", "0")
    monkeypatch.delenv("PROGRESS_TEST_UNSET", raising=False)
    (tmp_path / "rows.csv").write_text("id,name\n" + "".join(f"{i}, n{i} \n" for i in range(30_000)))
    path = write(tmp_path, """
        name: progress_shown
        steps:
          - {id: load, action: etl.push, input: {platformFile: "${file:rows.csv}"}}
          - {id: tidy, action: etl.map, input: {virtualFileId: "${load.virtualFileId}", action: trim}}
          - {id: lost, action: etl.pull, input: {virtualFileId: "${tidy.virtualFileId}", exportType: csv,
                                                   exportName: "${env.PROGRESS_TEST_UNSET}"}}
    """)
    with pytest.raises(SystemExit) as exited:
        main(["pipeline", "run", str(path)])
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert exited.value.code == 1, captured
    assert err[0] == f"running progress_shown ({path}) in process …"
    shown = [line for line in err if PROGRESS_LINE.match(line)]
    of = {step: [line.split(": ", 1)[1] for line in shown if line.startswith(f"{step}: ")] for step in ("load", "tidy")}
    assert of["load"][0] == "started (etl.push)" and of["tidy"][0] == "started (etl.map)"
    assert re.fullmatch(r"push rows\.csv: \d+% \([\d.]+ K?i?B of 417\.8 KiB\)", of["load"][1]), of["load"]
    assert any(re.fullmatch(r"map trim: \d+% \(10k rows of 30k rows\)", line) for line in of["tidy"]), of["tidy"]
    assert all(re.fullmatch(r"succeeded in \d+\.\ds", lines[-1]) for lines in of.values()), of
    assert shown.index("load: " + of["load"][-1]) < shown.index("tidy: started (etl.map)")
    lost = [line for line in shown if line.startswith("lost: ")]  # its input is resolved (and fails) early
    assert lost[0] == "lost: started (etl.pull)" and re.fullmatch(r"lost: failed in \d+\.\ds \(status 400\)", lost[1])
    assert all(line.split(":", 1)[0] in ("load", "tidy", "lost") for line in shown)  # no Dagster step noise
    assert "DEBUG" not in captured.err and "STEP_START" not in captured.err
    assert err.index(lost[1]) < err.index("step lost failed: etl.pull failed (400): "
                                            + json.loads(captured.out.splitlines()[-1])["message"])
    # stdout: the outputs and the failure's body only, as before
    assert [line.split(" ", 1)[0] for line in captured.out.splitlines()] == ["load", "tidy", "{\"message\":"]
    # -v: Dagster's whole log instead, not these lines too
    with pytest.raises(SystemExit):
        main(["pipeline", "run", str(path), "-v"])
    assert "load: started (etl.push)" not in capsys.readouterr().err


def test_a_run_leaves_no_listener_in_the_instance(demo_file: Path, env: dict[str, str]) -> None:
    """The progress lines come from a listener on the instance, which Dagster keeps for good (no call removes
    one): a notebook's instance kept every ``%pipeline run``'s listener and the compiled pipeline it holds."""
    instance = dg.DagsterInstance.ephemeral()
    compiled = compile_pipeline(load_pipeline(demo_file))
    shown: list[str] = []
    for _ in range(2):
        run_compiled(compiled, resources_for(environ=env), instance=instance, progress=shown.append)
    assert "load: started (etl.push)" in shown
    assert not any(instance._subscribers.values())  # what Dagster keeps them in


def test_an_unquoted_date_stays_text_and_a_clean_failure_says_why(tmp_path: Path, env: dict[str, str],
                                                                  capsys: pytest.CaptureFixture) -> None:
    """YAML's implicit dates (``2024-01-01``) are no JSON value: such a step validated, then the run failed in
    Dagster's serialisation with a traceback. Clean answers every error with ``null``: its reason (the
    error's detail) reaches the step's failure line too."""
    path = write(tmp_path, """
        name: dated
        steps:
          - id: rows
            action: etl.iterate
            input: {content: [{day: 2024-01-01, at: 2024-01-01 10:00:00}], maxBatchSize: 5}
          - id: gone
            action: etl.clean
            input: {virtualFileId: nope}
    """)
    with pytest.raises(SystemExit) as exited:
        main(["pipeline", "run", str(path)])
    assert exited.value.code == 1
    captured = capsys.readouterr()
    assert 'rows (etl.iterate): {"content": [{"day": "2024-01-01", "at": "2024-01-01 10:00:00"}]' in captured.out
    assert "step gone failed: etl.clean failed (500): virtual file 'nope' not found" in captured.err
    assert "Traceback" not in captured.out + captured.err


def test_an_unquoted_time_of_day_stays_text(tmp_path: Path, env: dict[str, str],
                                            capsys: pytest.CaptureFixture) -> None:
    """YAML 1.1 reads ``17:45`` as the base-60 integer 1065 and ``12:00:00`` as 43200 (``09:30``, with its
    leading zero, as text): a Validate of opening hours refused rows as "not a string" and the run succeeded.
    The file passes ``pipeline validate`` and its rows arrive as written."""
    path = write(tmp_path, """
        name: slots
        steps:
          - id: check
            action: etl.validate
            input:
              content: [{opens: 09:30, closes: 17:45, lunch: 12:00:00, cutoff: 23:59.5, took: 190:20:30}]
              schema:
                closes: {type: string, required: true}
                lunch: {type: string, required: true}
    """)
    assert main(["pipeline", "validate", str(path)]) == 0
    assert main(["pipeline", "run", str(path)]) == 0
    row = {"opens": "09:30", "closes": "17:45", "lunch": "12:00:00", "cutoff": "23:59.5", "took": "190:20:30"}
    assert f"check (etl.validate): {json.dumps({'validated': [row], 'rejected': []})}" in capsys.readouterr().out


def test_literals_the_input_model_takes_run_as_they_validate(tmp_path: Path, env: dict[str, str]) -> None:
    """A step's literal input becomes its op's default config, which Dagster checks strictly, at run time
    only: ``pipeline validate`` passed a whole number written as text, a platform file carrying a field spec
    2.1 does not show, and ``"false"``, and the run then failed before any step with a 500
    ``DagsterInvalidConfigError``. They now run as ``invoke`` runs them."""
    resources = resources_for(environ=env)
    pf = resources["platform_files"].add_bytes(b"id,name\n1,a\n2,b\n3,c\n", "s.csv", "text/csv").to_json()
    path = write(tmp_path, f"""
        name: lax
        steps:
          - id: load
            action: etl.push
            input:
              platformFile: {json.dumps({**pf, "folder": "inbox", "owner": {"team": "sales"}})}
              parameters: {{linesToIgnore: "0", useFirstRowAsSchema: "true"}}
          - id: rows
            action: etl.iterate
            input: {{content: "${{load.virtualFileId}}", maxBatchSize: "2"}}
          - id: first
            action: etl.query
            input: {{virtualFileId: "${{load.virtualFileId}}", query: {{id: "1"}}, extractOnlyOneResult: "false"}}
    """)
    outcome = run_compiled(compile_pipeline(load_pipeline(path)), resources)
    assert outcome.success, outcome.failure()
    assert outcome.steps["rows"]["content"] == [{"id": "1", "name": "a"}, {"id": "2", "name": "b"}]
    assert outcome.steps["first"]["result"] == [{"id": "1", "name": "a"}]


def test_the_readme_pipeline_runs_as_written_on_the_shipped_data(tmp_path: Path, resources: dict) -> None:
    """README's YAML example is the shipped ``retail_customers.yaml`` and does what the README says."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("## YAML pipelines", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    shipped = load_pipeline(DATA.parent / "retail_customers.yaml")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "customers.csv").write_bytes((DATA / "customers.csv").read_bytes())
    path = write(tmp_path, block, "readme.yaml")
    pipeline = load_pipeline(path)
    assert [(s.id, s.action) for s in pipeline.steps] == [(s.id, s.action) for s in shipped.steps]
    outcome = run_compiled(compile_pipeline(pipeline), resources)
    assert outcome.success, outcome.failure()
    assert outcome.steps["drop_others"] == {"deletedCount": 27}
    exported = resources["platform_files"].read_bytes(outcome.steps["export"]["platformFile"]).decode()
    rows = exported.splitlines()[1:]
    assert len(rows) == 13 and all(",retail" in row for row in rows)


WHOLE_NUMBERS = """
    name: whole
    on_new_file: {{folderId: root, minimumIntervalSeconds: {n}}}
    retry: {{max_retries: {n}}}
    steps:
      - id: each
        action: etl.clean
        foreach: {{virtualFileId: vf, maxBatchSize: {n}}}
        input: {{virtualFileId: "${{batch.virtualFileId}}"}}
"""


def test_whole_number_keys_take_an_integral_float_as_action_inputs_do(tmp_path: Path) -> None:
    """``2.0`` is the whole number 2 to an action's integer input and to the editor's schema (JSON Schema has
    one number 2); the loader refused it. ``2.5``, booleans, NaN and infinities are still no whole number."""
    pipeline = load_pipeline(write(tmp_path, WHOLE_NUMBERS.format(n="40.0")))
    assert pipeline.retry.max_retries == 40 and pipeline.step("each").foreach.max_batch_size == 40
    assert pipeline.on_new_file.minimum_interval_seconds == 40
    assert all(type(n) is int for n in (pipeline.retry.max_retries, pipeline.on_new_file.minimum_interval_seconds))
    for bad in ("2.5", "true", ".nan", ".inf", "'2'"):
        with pytest.raises(PipelineError) as caught:
            load_pipeline(write(tmp_path, WHOLE_NUMBERS.format(n=bad)))
        found = {p.line for p in caught.value.problems if "a whole number" in p.message}
        assert found == {2, 3, 7}, (bad, caught.value.problems)  # minimumIntervalSeconds, max_retries, maxBatchSize


def foreach_pipeline(tmp_path: Path, env: dict[str, str], rows: int) -> tuple[CompiledPipeline, dict[str, Any]]:
    """A Push of ``rows`` ids, then a foreach step validating them one row per batch, and its resources (the
    deployment's step-output IO manager)."""
    resources = {**resources_for(environ=env), "io_manager": StepOutputIOManager()}
    pf = resources["platform_files"].add_bytes(
        ("id\n" + "".join(f"{i}\n" for i in range(rows))).encode(), "ids.csv", "text/csv").to_json()
    path = write(tmp_path, f"""
        name: fan
        steps:
          - id: load
            action: etl.push
            input: {{platformFile: {json.dumps(pf)}}}
          - id: check
            foreach: {{virtualFileId: "${{load.virtualFileId}}", maxBatchSize: 1}}
            action: etl.validate
            input: {{content: "${{batch.rows}}", schema: {{id: {{type: integer, required: true}}}}}}
    """)
    return compile_pipeline(load_pipeline(path)), resources


def test_a_foreach_of_too_many_batches_is_refused_before_any_runs(tmp_path: Path, env: dict[str, str]) -> None:
    """A foreach's cost grows faster than its batch count (2,000 batches: 4–5 minutes, 600 MiB) and nothing
    capped it: a 1M-row file at maxBatchSize 1 would have run for days. More than MAX_BATCHES is a 400
    before any batch, giving the rows, the batches and the smallest maxBatchSize that fits."""
    rows = MAX_BATCHES + 1
    outcome = run_compiled(*foreach_pipeline(tmp_path, env, rows))
    assert not outcome.success
    assert list(outcome.errors) == ["check"]
    error = outcome.errors["check"]
    assert error.status == 400 and error.action == "etl.iterate"
    assert error.message == (f"maxBatchSize: {rows:,} rows in batches of 1 are {rows:,} batches, more than the "
                             f"{MAX_BATCHES:,} a foreach step may run (CONNECTOR_OPS_MAX_FOREACH_BATCHES); use a "
                             "maxBatchSize of at least 2")
    assert not any(event.is_successful_output for event in outcome.result.all_events
                   if event.step_key == "check__batches")  # refused before yielding any batch


def test_the_foreach_batch_limit_is_a_setting(tmp_path: Path, env: dict[str, str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A team mailing each customer on its own (maxBatchSize 1) may raise the limit, knowingly."""
    compiled, resources = foreach_pipeline(tmp_path, env, 3)
    monkeypatch.setenv("CONNECTOR_OPS_MAX_FOREACH_BATCHES", "2")
    refused = run_compiled(compiled, resources)
    assert refused.errors["check"].message.endswith(
        "more than the 2 a foreach step may run (CONNECTOR_OPS_MAX_FOREACH_BATCHES); use a maxBatchSize of at least 2")
    monkeypatch.setenv("CONNECTOR_OPS_MAX_FOREACH_BATCHES", "3")
    assert run_compiled(compiled, resources).success
    monkeypatch.setenv("CONNECTOR_OPS_MAX_FOREACH_BATCHES", "many")
    bad = run_compiled(compiled, resources).errors["check"]
    assert bad.status == 400 and "CONNECTOR_OPS_MAX_FOREACH_BATCHES: must be a whole number" in bad.message


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_numeric_env_value_into_a_text_field_stays_text(env: dict[str, str], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``REPORT_NAME=2024`` was read as JSON, the number 2024, and ``exportName`` refused it ("Input should be a
    valid string", naming neither variable nor reading): a field that takes text gets the variable's text; without
    the model (a field of another type) the value is still read as JSON."""
    (tmp_path / "x.csv").write_text("a,b\n1,2\n3,4\n", encoding="utf-8")
    monkeypatch.setenv("REPORT_NAME", "2024")
    path = write(tmp_path, """
        name: envjson
        steps:
          - id: load
            action: etl.push
            input: {platformFile: "${file:x.csv}"}
          - id: export
            action: etl.pull
            input: {virtualFileId: "${load.virtualFileId}", exportType: csv, exportName: "${env.REPORT_NAME}"}
        """)
    resources = resources_for(environ=env)
    outcome = run_compiled(compile_pipeline(load_pipeline(path)), resources)
    assert outcome.success, outcome.failure()
    assert outcome.steps["export"]["platformFile"]["name"] == "2024"
    from connector_ops.etl.models import PullInput  # the model the action op passes
    deferred = r.resolve_deferring_env({"exportName": "${env.REPORT_NAME}", "exportType": "${env.KIND:-csv}"},
                                       r.Scope(environ={"REPORT_NAME": "2024"}))
    assert deferred.value({"REPORT_NAME": "2024"}, PullInput) == {"exportName": "2024", "exportType": "csv"}
    assert deferred.value({"REPORT_NAME": "2024"}) == {"exportName": 2024, "exportType": "csv"}  # no model: JSON



def test_a_steps_description_is_its_ops_in_dagster(tmp_path: Path) -> None:
    """A step's ``description:`` was used for an asset step only (the asset's) and silently dropped elsewhere;
    now it is the op's description (the step gets an op of its own), shown first in the UI, a foreach step's
    per-batch op's too. A step without one keeps the shared op and its action's summary."""
    (tmp_path / "x.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    compiled = compile_pipeline(load_pipeline(write(tmp_path, """
        name: described
        steps:
          - id: load
            action: etl.push
            description: The sales CSV, loaded
            input: {platformFile: "${file:x.csv}"}
          - id: clean
            action: etl.clean
            description: Tidy each batch
            foreach: {virtualFileId: "${load.virtualFileId}"}
            input: {virtualFileId: "${batch.virtualFileId}"}
          - id: plain
            action: etl.clean
            input: {virtualFileId: "${load.virtualFileId}"}
    """)))
    ops = {d.name: d for d in compiled.job.all_node_defs}
    assert ops["described__load"].description.split("\n\n")[0] == "The sales CSV, loaded"
    assert ops["described__clean"].description.split("\n\n")[0] == "Tidy each batch"
    assert compiled.job.graph.node_named("plain").definition is ops["etl_clean"]  # the shared op, unchanged
    assert ops["etl_clean"].description.startswith(get_action("etl.clean").summary)
