"""Load-time problems a pipeline file used to slip past validation with: names Dagster reserves, job names of
code-defined jobs, ``--set`` into a non-mapping, unterminated references, a foreach list wired as one id; bytes
that are not UTF-8, brackets nested thousands deep, aliases that repeat a million values.

Each must be a problem of its file (file:line, step), and in the catalog cost only that file's job."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import dagster as dg
import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from connector_ops.pipelines.catalog import CODE_JOBS, find_pipeline, read_catalog
from connector_ops.pipelines.cli import pipeline
from connector_ops.pipelines.definitions import build_definitions
from connector_ops.pipelines.dsl import PipelineError, compile_pipeline, load_pipeline
from connector_ops.pipelines.dsl.json_schema import pipeline_schema
from tests.pipeline_files import write

PUSH = 'action: etl.push\n    input: {platformFile: "${file:customers.csv}"}'


def problems(path: Path) -> list[tuple[int, str | None, str]]:
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path)
    return [(p.line, p.step, p.message) for p in caught.value.problems]


def with_csv(folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "customers.csv").write_text("id,name\n1,a\n", encoding="utf-8")
    return folder


KEYWORD_STEPS = f"""
name: kw
steps:
  - id: input
    {PUSH}
  - id: type
    action: etl.pull
    input: {{virtualFileId: "${{input.virtualFileId}}", exportType: csv, exportName: x.csv}}
"""
BAD_OWNER = f"""
name: owners_p
steps:
  - id: load
    {PUSH}
    asset: x/owners
    owners: [team:sales, sales]
"""


def test_names_dagster_reserves_are_located_problems(tmp_path: Path) -> None:
    folder = with_csv(tmp_path)
    found = problems(write(folder, KEYWORD_STEPS))
    assert [(line, step) for line, step, _ in found] == [(3, "input"), (6, "type")]
    assert all("reserved by Dagster" in message for _, _, message in found)
    (line, step, message), = problems(write(folder, f"name: class\nsteps:\n  - id: load\n    {PUSH}\n"))
    assert (line, step) == (1, None) and "`name` 'class' is reserved by Dagster" in message
    (line, step, message), = problems(write(folder, BAD_OWNER))
    assert (line, step) == (7, "load") and "owner 'sales' is neither an e-mail address nor team:NAME" in message


def test_what_dagster_refuses_at_compile_time_is_a_problem_of_the_file(tmp_path: Path) -> None:
    """Whatever the validator misses, compiling raises a PipelineError naming the file, not a Dagster error."""
    valid = load_pipeline(write(with_csv(tmp_path), f"name: fine\nsteps:\n  - id: load\n    {PUSH}\n"))
    with pytest.raises(PipelineError) as caught:
        compile_pipeline(dataclasses.replace(valid, name="class"))
    (problem,) = caught.value.problems
    assert problem.file == valid.file and "Dagster refuses the pipeline" in problem.message


DEEP = "name: deep\nsteps:\n  - id: load\n    action: etl.push\n    input: " + "[" * 3000 + "]" * 3000 + "\n"
LAUGHS = ("a: &a [" + ", ".join(['"lol"'] * 10) + "]\n"  # "billion laughs": each anchor ten of the one before
          + "".join(f"{b}: &{b} [{', '.join([f'*{a}'] * 10)}]\n" for a, b in zip("abcdef", "bcdefg", strict=True))
          + "name: laughs\nsteps: *g\n")


@pytest.mark.parametrize("text", [KEYWORD_STEPS, BAD_OWNER, DEEP, LAUGHS],
                         ids=["keyword_steps", "owner", "deep", "billion_laughs"])
def test_a_broken_file_costs_only_its_own_job(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                           text: str) -> None:
    folder = with_csv(tmp_path / "more")
    bad = write(folder, text, "bad.yaml")
    monkeypatch.setenv("CONNECTOR_OPS_PIPELINES_DIR", str(folder))
    catalog = read_catalog()
    assert "sales_report" in {c.pipeline.name for c in catalog.pipelines}
    assert catalog.problems and all(p.file == str(bad) for p in catalog.problems)
    jobs = {j.name for j in build_definitions().jobs}
    assert {"sales_report", "first_etl", "broken_pipelines"} <= jobs
    listed = CliRunner().invoke(pipeline, ["list"])
    assert listed.exit_code == 1 and "sales_report" in listed.stdout and str(bad) in listed.stderr


def test_an_unexpected_exception_costs_only_its_own_job(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                       env: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    """What no check of ours foresees (the last two were a tag key that is no string, which made Dagster's
    argument check raise ``CheckError``, and a 300-character time zone, ``OSError`` from zoneinfo; both are
    now refused where they are written): here Dagster itself fails while one file's job is built. That file
    is a problem at line 1 naming the exception, its traceback is logged, and the location loads the rest."""
    to_job = dg.GraphDefinition.to_job

    def failing_for_odd(graph: dg.GraphDefinition, *args: Any, **kwargs: Any) -> dg.JobDefinition:
        if kwargs.get("name", graph.name) == "odd_tags":
            raise RuntimeError("a failure inside Dagster")
        return to_job(graph, *args, **kwargs)

    monkeypatch.setattr(dg.GraphDefinition, "to_job", failing_for_odd)
    folder = with_csv(tmp_path / "more")
    write(folder, f"name: fine\nsteps:\n  - id: load\n    {PUSH}\n", "fine.yaml")
    bad = write(folder, f"name: odd_tags\nsteps:\n  - id: load\n    {PUSH}\n", "odd.yaml")
    monkeypatch.setenv("CONNECTOR_OPS_PIPELINES_DIR", str(folder))
    monkeypatch.setenv("GOOGLE_CLIENT_SECRET", "never-show-this-secret")
    catalog = read_catalog()
    assert {"fine", "sales_report"} <= {c.pipeline.name for c in catalog.pipelines}
    (problem,) = catalog.problems
    assert (problem.file, problem.line, problem.step) == (str(bad), 1, None)
    assert problem.message.startswith("internal error while loading the file: RuntimeError: a failure inside Dagster")
    assert problem.message.endswith("a bug of connector-ops, please report it with the traceback from the log")
    (record,) = [r for r in caplog.records if r.name == "connector_ops.pipelines.catalog"]
    assert record.exc_info and record.exc_info[0] is RuntimeError and str(bad) in record.getMessage()
    assert "never-show-this-secret" not in caplog.text + problem.message
    defs = build_definitions()
    assert {"fine", "sales_report", "first_etl", "broken_pipelines"} <= {j.name for j in defs.jobs}
    assert str(problem) in defs.get_job_def("broken_pipelines").description
    ran = defs.get_job_def("fine").execute_in_process()
    assert ran.success and len(ran.output_for_node("load", "virtual_file_id")) == 32
    listed = CliRunner().invoke(pipeline, ["list"])
    assert listed.exit_code == 1 and "fine" in listed.stdout and str(problem) in listed.stderr


def test_the_schema_refuses_the_names_the_loader_refuses() -> None:
    validator = jsonschema.Draft202012Validator(pipeline_schema())
    for text in (KEYWORD_STEPS, BAD_OWNER, f"name: class\nsteps:\n  - id: load\n    {PUSH}\n"):
        assert list(validator.iter_errors(yaml.safe_load(text)))
    good = yaml.safe_load(BAD_OWNER.replace(", sales]", ", ana@example.com]"))
    assert list(validator.iter_errors(good)) == []


SCHEDULED = f"name: daily\nschedule: \"0 6 * * *\"\nZONE\nsteps:\n  - id: load\n    {PUSH}\n"


@pytest.mark.parametrize(("zone", "problem"), [
    ("timezone: localtime", "`timezone` 'localtime' is not an IANA time zone name (e.g. UTC or Europe/Berlin)"),
    ("timezone: posix/Europe/Berlin", "`timezone` 'posix/Europe/Berlin' is not an IANA time zone name"),
    ("timezone: [Europe/Berlin]", "`timezone` ['Europe/Berlin'] is not an IANA time zone name"),
])
def test_a_time_zone_must_be_an_iana_name(tmp_path: Path, zone: str, problem: str) -> None:
    """``localtime`` is the zone of whichever host runs the schedule, not a zone the file names."""
    ((line, step, message),) = problems(write(with_csv(tmp_path), SCHEDULED.replace("ZONE", zone)))
    assert (line, step) == (3, None) and message.startswith(problem)


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/New_York"])
def test_iana_time_zones_are_taken(tmp_path: Path, zone: str) -> None:
    path = write(with_csv(tmp_path), SCHEDULED.replace("ZONE", f"timezone: {zone}"))
    schedule = compile_pipeline(load_pipeline(path)).schedule
    assert schedule is not None and schedule.execution_timezone == zone


def test_a_time_zone_without_a_schedule_is_a_problem_of_its_line(tmp_path: Path) -> None:
    """It used to be ignored: the file's author thinks something runs at 06:00 Berlin time, and nothing does."""
    text = f"name: unscheduled\ntags: {{team: sales}}\ntimezone: Europe/Berlin\nsteps:\n  - id: load\n    {PUSH}\n"
    ((line, step, message),) = problems(write(with_csv(tmp_path), text))
    assert (line, step) == (3, None)
    assert message == "`timezone` only applies to a `schedule`; add one or remove `timezone`"
    assert list(jsonschema.Draft202012Validator(pipeline_schema()).iter_errors(yaml.safe_load(text)))


@pytest.mark.parametrize("name", ["first_etl", "broken_pipelines"])
def test_a_file_cannot_take_the_name_of_a_job_defined_in_code(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                             name: str) -> None:
    folder = with_csv(tmp_path / "more")
    taken = write(folder, f"name: {name}\nsteps:\n  - id: load\n    {PUSH}\n", "taken.yaml")
    monkeypatch.setenv("CONNECTOR_OPS_PIPELINES_DIR", str(folder))
    catalog = read_catalog()
    (problem,) = catalog.problems
    assert problem.file == str(taken) and f"job name {name!r} is already used by" in problem.message
    defs = build_definitions()
    jobs = [j.name for j in defs.jobs]
    assert sorted(jobs) == sorted(set(jobs)) and {"first_etl", "broken_pipelines", "sales_report"} <= set(jobs)
    assert set(jobs) - {c.pipeline.name for c in catalog.pipelines} == CODE_JOBS.keys()  # all reserved
    defs.get_repository_def()  # the code location loads (a duplicate job name fails here)
    listed = CliRunner().invoke(pipeline, ["list"])
    assert listed.exit_code == 1 and str(taken) not in listed.stdout and str(taken) in listed.stderr



def test_validate_refuses_what_the_catalog_refuses_across_the_files_given(tmp_path: Path) -> None:
    """`pipeline validate` said ok for a file named like a job defined in code and for two files sharing a job
    name or an asset key, which the catalog then refused (a CI gate on validate let them through). It now runs
    the catalog's checks over the files it is given, in their order: the later file is the one refused."""
    folder = with_csv(tmp_path)
    def job(name: str, asset: str) -> str:
        return f"name: {name}\nsteps:\n  - id: load\n    {PUSH}\n    asset: shared/{asset}\n"

    code = [write(folder, job(name, name), f"{name}.yaml") for name in CODE_JOBS]
    first = write(folder, job("same", "one"), "same1.yaml")
    second = write(folder, job("same", "two"), "same2.yaml")
    other = write(folder, job("other", "one"), "other.yaml")
    ran = CliRunner().invoke(pipeline, ["validate", *map(str, [*code, first, second, other])])
    assert ran.exit_code == 1
    lines = ran.stdout.splitlines()
    assert lines[:2] == [f"{code[0]}:1: job name {code[0].stem!r} is already used by {CODE_JOBS[code[0].stem]}",
                         f"{code[1]}:1: job name {code[1].stem!r} is already used by {CODE_JOBS[code[1].stem]}"]
    assert lines[2:] == [f"{first}: ok — job same, 1 steps", f"{second}:1: job name 'same' is already used by {first}",
                         f"{other}:3: step load: asset 'shared/one' is already made by {first} (step load)"]
    alone = CliRunner().invoke(pipeline, ["validate", str(second), str(second)])  # a file given twice is one file
    assert alone.exit_code == 0 and alone.stdout == f"{second}: ok — job same, 1 steps\n"


def test_set_into_a_value_that_is_no_mapping_names_the_key(tmp_path: Path) -> None:
    path = write(with_csv(tmp_path), PUSH_AND_QUERY)
    for overrides, message in [
        (["load.platformFile.name=x"], "'load.platformFile.name=x': load.platformFile holds a str, not a mapping "
                                       "of fields; set it whole (--set load.platformFile=…)"),
        (["q.query=[1]", "q.query.0=2"], "'q.query.0=2': q.query holds a list, not a mapping of fields"),
    ]:
        with pytest.raises(PipelineError) as caught:
            load_pipeline(path, overrides)
        (problem,) = caught.value.problems
        assert problem.file == "--set" and problem.message.startswith(message)
    assert load_pipeline(path, ["q.query.region=North"]).step("q").input["query"] == {"region": "North"}


#: a Push and a Query of its file: the pipeline the --set tests edit
PUSH_AND_QUERY = f"""name: p
steps:
  - id: load
    {PUSH}
  - id: q
    action: etl.query
    input: {{virtualFileId: "${{load.virtualFileId}}", query: {{}}}}
"""


def test_a_value_set_with_set_that_the_step_refuses_is_the_set_arguments_problem(tmp_path: Path) -> None:
    """Not the pipeline file's: ``--set:N`` names the N-th ``--set``, whose value the step refuses."""
    path = write(with_csv(tmp_path), PUSH_AND_QUERY)
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path, ["q.query.region=North", "q.bogus=1"])
    (problem,) = caught.value.problems
    assert (problem.file, problem.line, problem.step) == ("--set", 2, "q")
    assert problem.message.startswith("unknown field 'bogus' in etl.query input")



def test_a_literal_the_run_refuses_is_a_problem_of_where_it_was_written(tmp_path: Path) -> None:
    """A NaN in a literal filter passed validate and failed the step (400: not a JSON number): the payload check
    the action runs first is run on the literals too. A filter problem was placed at the field holding the filter
    (the file's line, or the first --set that wrote it); it is placed at the part refused: ``--set:N`` of the
    --set that wrote it (docs/pipelines.md, Running)."""
    path = write(with_csv(tmp_path), PUSH_AND_QUERY.replace("query: {}", "query: {a: .nan, b: 1}"))
    ((line, step, message),) = problems(path)
    assert (line, step, message) == (8, "q", "query.a: NaN is not a JSON number (JSON has no NaN or Infinity)")
    assert load_pipeline(path, ['q.query={"b": 1}']).step("q").input["query"] == {"b": 1}
    for overrides, culprit in [(["q.query.a=1", "q.query.c.d=1"], 2), (["q.query={}", "q.query.c.d=1"], 2),
                               (["q.query.c.d=1", "q.query.a=1"], 1), (['q.query.a=1', 'q.query.c={"d": 1}'], 2)]:
        with pytest.raises(PipelineError) as caught:
            load_pipeline(path, overrides)
        (problem,) = caught.value.problems
        assert (problem.file, problem.line, problem.step) == ("--set", culprit, "q"), overrides
        assert problem.message == "query.c: equality does not accept an embedded document (rows are flat)"


def test_a_field_a_set_makes_on_its_way_is_the_set_arguments_problem(tmp_path: Path) -> None:
    """``--set load.input.x=1`` makes a field ``input`` the action lacks: ``--set:N`` (docs/pipelines.md,
    Running), not the step's line in the file; a field it only goes through stays the file's."""
    path = write(with_csv(tmp_path), PUSH_AND_QUERY)
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path, ["q.query.region=North", "load.input.x=1"])
    (problem,) = caught.value.problems
    assert (problem.file, problem.line, problem.step) == ("--set", 2, "load")
    assert problem.message.startswith("unknown field 'input' in etl.push input")
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path, ["q.query.region=North", "load.bogus.deep.x=1"])
    (problem,) = caught.value.problems
    assert (problem.file, problem.line) == ("--set", 2) and "unknown field 'bogus'" in problem.message


def test_an_unclosed_reference_is_a_load_error_naming_step_and_field(tmp_path: Path) -> None:
    path = write(with_csv(tmp_path), f"""name: p
steps:
  - id: a
    {PUSH}
  - id: b
    action: etl.pull
    input: {{virtualFileId: "${{a.virtualFileId", exportType: "${{env.T", exportName: "$${{literal}}.csv"}}
""")
    found = problems(path)
    assert all((line, step) == (8, "b") for line, step, _ in found), found
    messages = [message for _, _, message in found]
    for field, text in (("virtualFileId", "${a.virtualFileId"), ("exportType", "${env.T")):
        assert f"{field}: {text!r}: a reference opened with ${{ is not closed with }}" in "\n".join(messages)
    assert all("write $${ for a literal ${" in m for m in messages if "not closed" in m)
    # the field no longer passes as a template: its literal check runs too
    assert "exportType: Input should be 'json', 'csv' or 'parquet'" in messages
    assert not any("exportName" in m for m in messages)  # $${ is the literal ${



def test_file_options_the_store_refuses_are_load_errors(tmp_path: Path) -> None:
    """``${file:…?name=…&contentType=…}`` options the store refuses when the step adds the file (a CR/LF in the
    content type, a control character in the name) passed validate and failed the run: now a problem of the
    step and field, in the store's words, and only that (not also "must be a platform file, got str")."""
    text = 'name: p\nsteps:\n  - id: up\n    action: drive.upload_file\n    input: {platformFile: "OPTS"}\n'
    for options, problem in [("contentType=text%2Fcsv%0D%0AX-Evil%3A%201", "contentType must not contain control "
                                                                            "characters (CR, LF, NUL …)"),
                             ("name=a%0Ab.csv", "name must be a non-empty name without control characters"),
                             ("contentType=csv", "contentType must be a media type in ASCII")]:
        ref = "${file:customers.csv?" + options + "}"
        ((line, step, message),) = problems(write(with_csv(tmp_path), text.replace("OPTS", ref)))
        assert (line, step) == (5, "up") and message.startswith(f"platformFile: {ref}: {problem}"), message
    good = "${file:customers.csv?name=rows.csv&contentType=text%2Fcsv%3B%20charset%3Dutf-8}"
    assert load_pipeline(write(tmp_path, text.replace("OPTS", good)))


def test_a_foreach_output_wired_where_one_value_goes_is_a_load_error(tmp_path: Path) -> None:
    text = f"""name: p
steps:
  - id: load
    {PUSH}
  - id: check
    foreach: {{virtualFileId: "${{load.virtualFileId}}", maxBatchSize: 1}}
    action: etl.validate
    input: {{content: "${{batch.virtualFileId}}", schema: {{id: {{type: string}}}}}}
  - id: out
    action: etl.pull
    input: {{virtualFileId: "WIRED", exportType: csv, exportName: v.csv}}
"""
    folder = with_csv(tmp_path)
    (line, step, message), = problems(write(folder, text.replace("WIRED", "${check.validated}")))
    assert (line, step) == (12, "out")
    assert message == ("${check.validated} is a list, one value per batch of foreach step 'check'; `virtualFileId` "
                       "takes one value (pick one batch's, e.g. ${check.validated.0})")
    assert load_pipeline(write(folder, text.replace("WIRED", "${check.validated.0}"), "one.yaml"))


def test_a_file_that_is_not_utf8_is_a_problem_at_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("name: caf\u00e9s\nsteps:\n  - id: r\u00e9sum\u00e9\n".encode("latin-1"))
    assert problems(bad) == [(1, None, "the file is not UTF-8: byte 0xe9 cannot be read (save it as UTF-8)")]


def test_nesting_and_aliases_are_bounded_with_the_line(tmp_path: Path) -> None:
    nested = "name: deep\nsteps:\n  - id: load\n    action: etl.push\n    input: " + "[" * 250 + "]" * 250 + "\n"
    assert problems(write(tmp_path, nested)) == [(5, None, "values are nested more than 200 levels deep")]
    assert problems(write(tmp_path, DEEP)) == [(1, None, "values are nested more than 200 levels deep")]
    ((line, _, message),) = problems(write(tmp_path, LAUGHS))  # 10**7 values if expanded: refused at once
    assert line == 1 and message.startswith("aliases repeat more than 10,000 values")
    shared = """
        name: shared
        common: &common {virtualFileId: "${load.virtualFileId}", exportType: csv}
        steps:
          - id: load
            action: etl.push
            input: {platformFile: "${file:customers.csv}"}
          - id: a
            action: etl.pull
            input: {<<: *common, exportName: a.csv}
    """
    with_csv(tmp_path)
    with pytest.raises(PipelineError, match="unknown key 'common'"):  # aliases still work within the bound
        load_pipeline(write(tmp_path, shared))


MERGED = """
    name: merged
    steps:
      - &base
        id: load
        action: etl.push
        input: &push
          platformFile: "${file:customers.csv}"
          parameters: {csvDelimiter: ",", linesToIgnore: 0}
      - id: semicolons
        action: etl.push
        input:
          <<: *push
          parameters: {csvDelimiter: ";"}
      - <<: *base
        id: again
      - id: listed
        action: etl.push
        input:
          <<: [{parameters: {csvDelimiter: "|"}}, *push]
          platformFile: "${file:customers.csv}"
"""


def test_a_merge_key_is_overridden_by_the_keys_written_beside_it(tmp_path: Path) -> None:
    """YAML's merge key: an explicit key replaces the merged one, as PyYAML's safe_load and the JSON schema read
    the file; it was refused as a "duplicate key". Of a list of mappings the first one listed wins, as the merge
    key's specification says (PyYAML 6.0.4 lets a later one win when the two keys are distinct string objects)."""
    folder = with_csv(tmp_path)
    pipeline_ = load_pipeline(write(folder, MERGED))
    inputs = {step.id: step.input for step in pipeline_.steps}
    read = {step["id"]: step["input"] for step in yaml.safe_load(MERGED.replace("\n    ", "\n"))["steps"]}
    same = ("load", "semicolons", "again")
    assert {k: inputs[k] for k in same} == {k: read[k] for k in same}
    assert inputs["semicolons"]["parameters"] == {"csvDelimiter": ";"}  # replaced whole, not merged into
    assert inputs["again"] == inputs["load"] and inputs["listed"]["parameters"] == {"csvDelimiter": "|"}
    # a problem in an override is at the override's line, one in a merged value at the anchor's
    assert problems(write(folder, MERGED.replace('{csvDelimiter: ";"}', '{csvDelimiter: ";;"}'))) == [
        (13, "semicolons", "parameters.csvDelimiter: must be a single character other than a quote or a line break")]
    wrong = problems(write(folder, MERGED.replace("linesToIgnore: 0", "linesToIgnore: -1")))
    assert [(line, step) for line, step, _ in wrong] == [(8, "load"), (8, "again")]
    # a key written twice beside the merge key is still a duplicate, at its second line
    twice = MERGED.replace("        id: again\n", "        id: again\n        id: again2\n")
    assert problems(write(folder, twice)) == [(16, None, "duplicate key 'id'")]
    assert problems(write(folder, MERGED.replace("<<: *base", "<<: [*base, 3]"))) == [
        (14, None, "a merge key `<<` takes a mapping (`<<: *base`) or a list of them")]


def test_looking_for_a_pipeline_by_name_passes_over_a_file_that_fails_unexpectedly(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``pipeline run NAME`` and ``%pipeline run NAME`` look through every file for NAME: one that raises what
    no check foresaw (here PyYAML itself fails on it) is passed over and logged, as the catalog reports it,
    instead of ending the search with its traceback."""
    compose = yaml.composer.Composer.get_single_node

    def failing_for_odd(loader: yaml.composer.Composer) -> Any:
        if "name: odd" in getattr(loader, "buffer", ""):
            raise RuntimeError("a failure inside PyYAML")
        return compose(loader)

    monkeypatch.setattr(yaml.composer.Composer, "get_single_node", failing_for_odd)
    folder = with_csv(tmp_path / "more")
    bad = write(folder, f"name: odd\nsteps:\n  - id: load\n    {PUSH}\n", "a_odd.yaml")
    fine = write(folder, f"name: zfine\nsteps:\n  - id: load\n    {PUSH}\n", "b_fine.yaml")
    monkeypatch.setenv("CONNECTOR_OPS_PIPELINES_DIR", str(folder))
    assert find_pipeline("zfine") == fine
    assert find_pipeline("nowhere") is None
    records = [r for r in caplog.records if r.name == "connector_ops.pipelines.catalog"]
    assert records and all(r.exc_info and r.exc_info[0] is RuntimeError and str(bad) in r.getMessage()
                           for r in records)


def checked_asset(job: str, key: str, check: str = "validate") -> str:
    return (f"name: {job}\nsteps:\n  - id: load\n    {PUSH}\n    asset: {key}\n"
            f"    check: {{schema: {{id: {{type: string}}}}, name: {check}}}\n")


CHECK_RENAME = "rename the asset key or the check (`check: name:`)"


@pytest.mark.parametrize(("first", "second", "name", "rename"), [
    (checked_asset("job_a", "sales-eu/orders"), checked_asset("job_b", "sales_eu/orders"), "sales_eu__orders_validate",
     CHECK_RENAME),
    (checked_asset("job_a", "a/b"), checked_asset("job_b", "a__b"), "a__b_validate", CHECK_RENAME),
    (checked_asset("job_a", "orders"), f"name: orders_validate\nsteps:\n  - id: load\n    {PUSH}\n", "orders_validate",
     "rename the job (`name:`)"),  # the job's name clashes: nothing of an asset or a check to rename
    (f"name: job_a\nsteps:\n  - id: load_x\n    {PUSH}\n", checked_asset("job_b", "job_a/load_x_", "input"),
     "job_a__load_x__input", CHECK_RENAME),  # the node resolving step load_x's input
], ids=["dash_underscore", "slash_double_underscore", "check_op_vs_job", "check_op_vs_step_op"])
def test_files_whose_dagster_names_collide_cost_the_later_file_only(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, first: str, second: str, name: str, rename: str) -> None:
    """Asset keys that differ only where Dagster's op names do not (``sales-eu`` / ``sales_eu``, ``a/b`` /
    ``a__b``) name their check ops alike, and a check op can take a job's or a step op's name. Dagster then
    refused the whole code location; now the later file is a problem at its step and the rest loads."""
    folder = with_csv(tmp_path / "more")
    write(folder, first, "a.yaml")
    later = write(folder, second, "b.yaml")
    monkeypatch.setenv("CONNECTOR_OPS_PIPELINES_DIR", str(folder))
    catalog = read_catalog()
    (problem,) = catalog.problems
    assert (problem.file, problem.line) == (str(later), 1 if second.startswith("name: orders") else 3)
    assert f"gets the Dagster name {name!r}, which {folder / 'a.yaml'} (" in problem.message
    assert problem.message.endswith(f"): {rename}")
    assert "job_a" in {c.pipeline.name for c in catalog.pipelines}
    defs = build_definitions()
    dg.Definitions.validate_loadable(defs)  # what `dagster definitions validate` does: the location loads
    assert {"job_a", "sales_report", "broken_pipelines"} <= {j.name for j in defs.get_repository_def().get_all_jobs()}


def test_a_check_op_named_like_an_op_of_a_job_in_code_is_a_problem(tmp_path: Path) -> None:
    """``etl`` checked by ``push`` names its op ``etl_push``, an op of ``first_etl``: `pipeline validate` says so."""
    path = write(with_csv(tmp_path), checked_asset("mine", "etl", "push"))
    ran = CliRunner().invoke(pipeline, ["validate", str(path)])
    assert ran.exit_code == 1
    assert f"{path}:3: step load: the op of check push of asset etl gets the Dagster name 'etl_push'" in ran.stdout
    assert ran.stdout.rstrip().endswith(f"): {CHECK_RENAME}")


def test_a_job_named_like_an_op_of_a_job_in_code_is_told_to_rename_the_job(tmp_path: Path) -> None:
    """``name: etl_push`` (an op of ``first_etl``) was told to "rename the asset key, the check or the step", none
    of which it has a hand in: the job's name is what clashes."""
    path = write(with_csv(tmp_path), f"name: etl_push\nsteps:\n  - id: load\n    {PUSH}\n")
    ran = CliRunner().invoke(pipeline, ["validate", str(path)])
    assert ran.exit_code == 1
    assert ran.stdout.strip() == (
        f"{path}:1: job etl_push gets the Dagster name 'etl_push', which the hand-written job first_etl "
        "(connector_ops.pipelines.first_etl) already has (Dagster wants each op or graph name once in a code "
        "location): rename the job (`name:`)")


@pytest.mark.parametrize("name", ["__ASSET_JOB", "__anonymous_asset_job_sales"])
def test_a_job_name_dagster_keeps_for_its_asset_jobs_costs_only_its_file(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str) -> None:
    """Dagster builds such a job and refuses it only in the Definitions: the whole code location went down
    (every job, schedule and sensor) while `pipeline validate` said ok. Now the name is a problem of line 1."""
    folder = with_csv(tmp_path / "more")
    text = f"name: {name}\nsteps:\n  - id: load\n    {PUSH}\n"
    bad = write(folder, text, "bad.yaml")
    ((line, step, message),) = problems(bad)
    assert (line, step) == (1, None) and f"`name` {name!r} is reserved by Dagster for its asset jobs" in message
    assert list(jsonschema.Draft202012Validator(pipeline_schema()).iter_errors(yaml.safe_load(text)))
    ran = CliRunner().invoke(pipeline, ["validate", str(bad)])
    assert ran.exit_code == 1 and f"{bad}:1: `name` {name!r} is reserved by Dagster" in ran.stdout
    monkeypatch.setenv("CONNECTOR_OPS_PIPELINES_DIR", str(folder))
    defs = build_definitions()
    dg.Definitions.validate_loadable(defs)  # the location loads
    assert {"sales_report", "first_etl", "broken_pipelines"} <= {j.name for j in defs.jobs}
    listed = CliRunner().invoke(pipeline, ["list"])
    assert listed.exit_code == 1 and "sales_report" in listed.stdout and str(bad) in listed.stderr


NOTIFY = ("notify:\n  - when: [success, failure]\n    message: {from: r@example.com, recipients: [{to: a@example.com}],"
          " subject: s, templateId: 1, templateVariables: {}}\n")
TRIGGERED = 'on_new_file: {folderId: root}\nsteps:\n  - id: load\n    action: etl.push\n' \
            '    input: {platformFile: "${file:customers.csv}"}\n' \
            '  - id: get\n    action: drive.download_file\n    input: {fileId: "${trigger.fileId}"}\n'


def test_schedule_and_sensor_names_of_files_never_collide(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Schedules and sensors share one namespace in Dagster, and a file derives ``<job>_schedule``,
    ``<job>_on_new_file`` and ``<job>_notify_<status>``. No suffix ends another, so two files derive the same
    one only with the same job name (a problem of the later file): files named to end like another's
    schedule or sensors all load. A new derived name must keep it so, or join the catalog's name check."""
    folder = with_csv(tmp_path / "more")
    for name in ("a", "a_schedule", "a_on_new_file", "a_notify", "a_notify_success", "a_on_new", "a_on"):
        write(folder, f'name: {name}\nschedule: "0 6 * * *"\n{NOTIFY}{TRIGGERED}', f"{name}.yaml")
    monkeypatch.setenv("CONNECTOR_OPS_PIPELINES_DIR", str(folder))
    assert read_catalog().problems == []
    defs = build_definitions()
    dg.Definitions.validate_loadable(defs)
    derived = [s.name for s in defs.schedules] + [s.name for s in defs.sensors]
    assert len(derived) == len(set(derived)) and {"a_schedule_schedule", "a_notify_failure"} <= set(derived)


WATCHED = """
name: watch
on_new_file: {folderId: FOLDER}
steps:
  - id: each
    action: etl.clean
    foreach: {virtualFileId: SOURCE}
    input: {virtualFileId: "${batch.virtualFileId}"}
"""


@pytest.mark.parametrize("bad", ['""', '"  "', "null", "12", "[a]"])
def test_an_empty_or_non_text_folder_or_virtual_file_id_is_refused_at_load(tmp_path: Path, bad: str) -> None:
    """``folderId: ""`` made the sensor list the drive's root (a run for every file of the drive), and null or
    a number got there as text ("None", "12"): each is a problem of its line, in the loader and the schema."""
    found = problems(write(tmp_path, WATCHED.replace("FOLDER", bad).replace("SOURCE", bad)))
    shown = bad.replace("'", '"') if bad != "[a]" else '["a"]'
    assert found == [
        (2, None, f"`folderId` {shown} is not a drive folder id: write the id or ${{env.NAME}} (an empty id would "
                  "watch the whole drive, its root)"),
        (6, "each", f"`virtualFileId` {shown} is not a virtual file id: write the id or a reference such as "
                    "${load.virtualFileId}")]
    validator = jsonschema.Draft202012Validator(pipeline_schema())
    refused = {tuple(e.absolute_path) for e in validator.iter_errors(yaml.safe_load(
        WATCHED.replace("FOLDER", bad).replace("SOURCE", bad)))}
    assert refused == {("on_new_file", "folderId"), ("steps", 0, "foreach", "virtualFileId")}
    load_pipeline(write(tmp_path, WATCHED.replace("FOLDER", '"${env.INBOX:-root}"').replace("SOURCE", "vf1")))


def test_a_problem_of_the_whole_input_names_no_empty_field(tmp_path: Path) -> None:
    """A check of the input model as a whole (pydantic's location ``()``) printed an empty field before its own
    words: ``step m: : recipients: …``; it now reads ``step m: recipients: …``."""
    path = write(with_csv(tmp_path), """name: p
steps:
  - id: m
    action: mail.send_transactional_message
    input: {from: a@b.co, recipients: [{to: c@d.co, type: Cc}], templateId: 1, templateVariables: {}}
""")
    ((line, step, message),) = problems(path)
    assert (line, step) == (5, "m")
    assert message == "recipients: at least one recipient must be of type To (Cc/Bcc-only is refused)"
    ran = CliRunner().invoke(pipeline, ["validate", str(path)])
    assert f"{path}:5: step m: recipients: at least one" in ran.stdout


def test_a_key_yaml_reads_as_no_text_is_named_as_written(tmp_path: Path) -> None:
    """``templateVariables: {1: …}`` was ``templateVariables.str: Input should be a valid string`` (a branch of the
    field's union) and more; ``query: {~: 1}`` was ``request.None.[key]: …``. Now each such key is one problem,
    named as written, saying to quote it; the rest of the input is still checked."""
    path = write(with_csv(tmp_path), f"""name: p
steps:
  - id: load
    {PUSH}
  - id: m
    action: mail.send_transactional_message
    input: {{from: a@b.co, recipients: [{{to: c@d.co}}], templateId: 1, templateVariables: {{1: x, b: y}}}}
  - id: d
    action: etl.delete_rows
    input:
      virtualFileId: "${{load.virtualFileId}}"
      request: {{~: 1}}
      true: x
      wrongField: 1
""")
    assert problems(path) == [
        (8, "m", 'templateVariables.1: a key must be text, and YAML reads this one as a number: quote it ("1": …)'),
        (13, "d", 'request.null: a key must be text, and YAML reads this one as null (no value): quote it '
                  '("null": …)'),
        (14, "d", 'true: a key must be text, and YAML reads this one as a boolean: quote it ("true": …)'),
        (15, "d", "unknown field 'wrongField' in etl.delete_rows input (fields: virtualFileId, request, dryRun)"),
    ]


def test_a_key_yaml_reads_as_no_text_in_a_checks_schema_is_named_as_written(tmp_path: Path) -> None:
    """``check: {schema: {1: …}}`` stopped the loader with "internal error … TypeError: argument of type 'int' is
    not iterable" (the column-name check of Validate's schema parser): a problem at its line, as in an input."""
    path = write(with_csv(tmp_path), f"""name: p
steps:
  - id: load
    {PUSH}
    asset: sales
    check: {{schema: {{1: {{type: string}}, a: {{type: string, true: 1}}}}}}
""")
    assert problems(path) == [
        (7, "load", 'a key must be text, and YAML reads this one as a number: quote it ("1": …)'),
        (7, "load", 'a key must be text, and YAML reads this one as a boolean: quote it ("true": …)'),
    ]


@pytest.mark.parametrize(("text", "line", "hint"), [
    ("name: p\nsteps:\n  - id: load\n\taction: etl.push\n", 4, "indent with spaces, not tabs"),
    ("name: p\nsteps:\n  - id: load\n    input:\n      \tplatformFile: x\n", 5, "indent with spaces, not tabs"),
    ("name: p\nsteps:\n  - id:\tload\n", 3, "write spaces here, not a tab"),
], ids=["indent", "indent_after_spaces", "after_a_key"])
def test_a_tab_pyyaml_stops_at_says_to_write_spaces(tmp_path: Path, text: str, line: int, hint: str) -> None:
    """PyYAML's "found character '\\t' that cannot start any token" did not say that YAML indents with spaces."""
    path = write(tmp_path, text)
    ((found, step, message),) = problems(path)
    assert (found, step) == (line, None)
    assert message == f"invalid YAML: found character '\\t' that cannot start any token; {hint}"
    ran = CliRunner().invoke(pipeline, ["validate", str(path)])
    assert f"{path}:{line}: invalid YAML: found character '\\t' that cannot start any token; {hint}" in ran.stdout


def test_a_closed_reference_written_wrong_is_reported_once(tmp_path: Path) -> None:
    """``${env:DELIM}`` (a colon for the dot) is no reference, and was also checked as a literal delimiter
    ("csvDelimiter: must be a single character …"): only the reference's syntax is the problem."""
    path = write(with_csv(tmp_path), """name: p
steps:
  - id: load
    action: etl.push
    input: {platformFile: "${file:customers.csv}", parameters: {csvDelimiter: "${env:DELIM}"}}
""")
    assert problems(path) == [(5, "load", "parameters.csvDelimiter: ${env:DELIM} is not a reference; write "
                                          "${step.field}, ${env.NAME} or ${file:path}")]
