"""``connector-ops``: conventions (version, help, completion), action listings, inputs, errors and exit codes.

Run as the installed console script in a subprocess, as users run it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from connector_ops.kernel.progress import amount

SCRIPT = str(Path(sys.executable).parent / "connector-ops")


def cli(*args: str, env: dict[str, str] | None = None, stdin: str | None = None,
        extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRIPT, *args], input=stdin, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {}), **(extra_env or {})})


def test_the_readme_command_list_names_every_command() -> None:
    """README's "The command line" block once missed ``gc`` and ``pipeline schema``: every command and
    subcommand click knows is named on a line of it (``pipeline validate|list|run`` names three)."""
    import click

    from connector_ops.cli import cli as group

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("### The command line", 1)[1].split("```\n", 1)[1].split("```", 1)[0]
    usages = [re.split(r"\s{2,}", line, maxsplit=1)[0] for line in block.splitlines()]

    def named(*words: str) -> bool:
        return any(all(re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", usage) for w in words) for usage in usages)

    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        subcommands = command.list_commands(ctx) if isinstance(command, click.Group) else [None]
        missing = [sub for sub in subcommands if not named(name, *([sub] if sub else []))]
        assert not missing, f"README's command list lacks {name} {missing}"


def test_action_summaries_are_plain_text_and_query_says_it_filters() -> None:
    """The summaries come from docstrings: their reStructuredText ``x`` is printed as `x`."""
    run = cli("actions")
    assert run.returncode == 0 and "``" not in run.stdout
    lines = {line.split()[0]: line.split(None, 1)[1] for line in run.stdout.splitlines() if line.strip()}
    assert "(default name `<stem>-copy<.ext>`," in lines["drive.copy_file"]
    assert "MongoDB-style filter" in lines["etl.query"]


def test_version() -> None:
    run = cli("--version")
    assert run.returncode == 0
    assert run.stdout.strip() == f"connector-ops, version {version('connector-ops')}"


def test_help_is_plain_text_and_lists_every_command() -> None:
    run = cli("--help")
    assert run.returncode == 0
    for command in ("actions", "completion", "drive", "files", "invoke", "pipeline"):
        assert f"\n  {command} " in run.stdout
    for markup in ("``", ":class:", ":func:", ".. "):
        assert markup not in run.stdout
    said = " ".join(run.stdout.split())
    assert ("Exit codes: 0 ok, 2 invalid input (400), 3 not found (404), 1 other failures, 130 interrupted "
            "(Ctrl-C), 143 stopped by SIGTERM, 141 the reader of stdout stopped reading;") in said
    assert "the pipeline commands have their own (connector-ops pipeline run --help)" in run.stdout


def test_pipeline_run_states_its_own_exit_codes(tmp_path: Path) -> None:
    """``connector-ops --help`` gave 0/2/3/1 for the whole CLI, yet ``pipeline run`` exits 1 for a step's 404
    (a run's outcome, not one action's status) and its own --help said nothing."""
    said = " ".join(cli("pipeline", "run", "--help").stdout.split())
    assert ("Exit codes: 0 every step succeeded; 1 a step failed (whatever its status, 400 and 404 included: "
            "the step's error is printed) or the file does not validate; 2 no such file or pipeline, a configuration "
            "error (a bad setting: the line names the variable) or a usage error (a --set not written "
            "step.field=value); 130 interrupted (Ctrl-C), 143 stopped by SIGTERM.") in said
    missing = tmp_path / "p404.yaml"
    missing.write_text("name: p404\nsteps:\n  - id: count\n    action: etl.iterate\n"
                       "    input: {content: nope, maxBatchSize: 1}\n")
    ran = cli("pipeline", "run", str(missing), extra_env={"CONNECTOR_OPS_HOME": str(tmp_path / "home")})
    assert ran.returncode == 1 and "step count failed: etl.iterate failed (404)" in ran.stderr, ran.stderr
    assert cli("pipeline", "run", str(tmp_path / "none.yaml")).returncode == 2


@pytest.mark.parametrize("args", [
    ["--help"], ["gc", "--help"], ["pipeline", "--help"], ["pipeline", "run", "--help"],
    ["pipeline", "validate", "--help"], ["pipeline", "list", "--help"], ["pipeline", "schema", "--help"],
], ids=" ".join)
def test_help_loads_neither_pydantic_nor_dagster(args: list[str]) -> None:
    """README's claim, of the subcommands too: ``gc --help`` and ``pipeline run --help`` took 3 s (and each TAB
    of a completion as long) importing Dagster, pydantic and SQLAlchemy at the top of ``pipelines/cli.py``."""
    code = (f"import sys\nfrom connector_ops.cli import main\nassert main({args!r}) == 0\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'dagster', 'sqlalchemy'))\n"
            "assert not heavy, heavy")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr


def test_completion_script_and_completing_action_names() -> None:
    run = cli("completion", "bash")
    assert run.returncode == 0 and "_CONNECTOR_OPS_COMPLETE" in run.stdout and "complete " in run.stdout
    done = cli(extra_env={"_CONNECTOR_OPS_COMPLETE": "bash_complete", "COMP_WORDS": "connector-ops invoke etl.qu",
                          "COMP_CWORD": "2"})
    assert done.returncode == 0
    assert done.stdout.split() == ["plain,etl.query"]


def test_actions_listing_and_json() -> None:
    listing = json.loads(cli("actions", "--json").stdout)
    assert len(listing) == 22
    push = next(row for row in listing if row["name"] == "etl.push")
    assert push["resources"] == ["virtual_files", "platform_files"] and push["summary"]
    text = cli("actions").stdout.splitlines()
    assert len(text) == 22 and text[0].startswith("drive.copy_file ")
    # each summary is the docstring's first line: a whole sentence, not one cut where the line wrapped
    assert [row["name"] for row in listing if not row["summary"].endswith(".")] == []


def test_actions_name_shows_the_input_fields_and_schema() -> None:
    run = cli("actions", "etl.iterate")
    assert run.returncode == 0
    assert "  content       required  string | array of any" in run.stdout
    assert "  maxBatchSize  required  integer" in run.stdout
    assert "output: content, hasNext" in run.stdout
    schema = json.loads(cli("actions", "etl-iterate", "--schema").stdout)
    assert schema["required"] == ["content", "maxBatchSize"]
    assert set(schema["properties"]) == {"content", "maxBatchSize"}
    described = json.loads(cli("actions", "mail.send_transactional_message", "--json").stdout)
    fields = {f["name"]: f for f in described["input"]}
    assert fields["templateVariables"]["required"] is True and described["output"] == []


def test_a_mistyped_action_gets_did_you_mean_and_exit_2() -> None:
    for args in (("actions", "etl.qury"), ("invoke", "etl.qury", "{}")):
        run = cli(*args)
        assert run.returncode == 2
        assert json.loads(run.stdout) == {"message": "unknown action 'etl.qury'; did you mean 'etl.query' or "
                                                     "'etl.push' or 'etl.pull'?"}
        assert run.stderr.startswith("connector-ops: etl.qury failed (400): unknown action 'etl.qury'; did you mean")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_inputs_inline_stdin_and_file_and_the_magics_spelling(env: dict[str, str], tmp_path: Path) -> None:
    payload = {"content": [1, 2, 3], "maxBatchSize": 2}
    file = tmp_path / "input.json"
    file.write_text(json.dumps(payload))
    expected = {"content": [1, 2], "hasNext": True}
    assert json.loads(cli("invoke", "etl.iterate", json.dumps({**payload, "content": [4]}), env=env).stdout) \
        == {"content": [4], "hasNext": False}
    assert json.loads(cli("invoke", "etl-iterate", f"@{file}", env=env).stdout) == expected
    assert json.loads(cli("invoke", "etl.iterate", "-", env=env, stdin=json.dumps(payload)).stdout) \
        == {"content": [3], "hasNext": False}  # the same array continues where it stopped
    missing = cli("invoke", "etl.iterate", f"@{tmp_path / 'nope.json'}", env=env)
    assert missing.returncode == 2
    assert "input: cannot read" in json.loads(missing.stdout)["message"]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("word", ["NaN", "Infinity", "-Infinity"])
def test_numbers_json_does_not_have_are_a_400(env: dict[str, str], word: str) -> None:
    run = cli("invoke", "etl.iterate", f'{{"content": [{{"a": {word}}}], "maxBatchSize": 1}}', env=env)
    assert (run.returncode, json.loads(run.stdout)) == (2, {"message": f"input is not valid JSON: {word} is no "
                                                                       "JSON number"})


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_input_that_is_not_utf8_is_a_400_from_a_file_and_from_stdin(env: dict[str, str], tmp_path: Path) -> None:
    """JSON text is UTF-8 (a BOM tolerated): other bytes were a traceback from ``@FILE``, and from stdin a
    400 about half a surrogate pair."""
    latin = tmp_path / "latin.json"
    latin.write_bytes('{"content": ["né"], "maxBatchSize": 1}'.encode("latin-1"))
    message = "input is not UTF-8 text (invalid continuation byte at byte 15)"
    for args, stdin in ((("@" + str(latin),), None), (("-",), latin.read_bytes())):
        run = subprocess.run([SCRIPT, "invoke", "etl.iterate", *args], input=stdin, capture_output=True,
                             timeout=120, env={**os.environ, **env})
        assert (run.returncode, json.loads(run.stdout)) == (2, {"message": message}), run.stderr
        assert b"Traceback" not in run.stderr
    with_bom = subprocess.run([SCRIPT, "invoke", "etl.iterate", "-"], capture_output=True, timeout=120,
                              input=b"\xef\xbb\xbf" + '{"content": ["né"], "maxBatchSize": 1}'.encode(),
                              env={**os.environ, **env})
    assert json.loads(with_bom.stdout) == {"content": ["né"], "hasNext": False}


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_exit_codes_follow_the_status(env: dict[str, str]) -> None:
    bad = cli("invoke", "etl.iterate", '{"content": [1]}', env=env)
    assert bad.returncode == 2
    assert bad.stderr == "connector-ops: etl.iterate failed (400): maxBatchSize: is required\n"
    not_found = cli("invoke", "etl.iterate", '{"content": "no-such-file", "maxBatchSize": 1}', env=env)
    assert not_found.returncode == 3 and json.loads(not_found.stdout) == {"message": "not found"}
    failed = cli("invoke", "etl.query", '{"virtualFileId": "no-such-file", "query": {}}', env=env)  # spec: 500
    assert failed.returncode == 1 and failed.stderr.startswith("connector-ops: etl.query failed (500):")
    clean = cli("invoke", "etl.clean", '{"virtualFileId": "no-such-file"}', env=env)  # body null, as the spec
    assert clean.returncode == 1 and json.loads(clean.stdout) is None


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_files_add_of_a_missing_file_names_it(env: dict[str, str], tmp_path: Path) -> None:
    run = cli("files", "add", str(tmp_path / "absent.csv"), env=env)
    assert run.returncode == 2
    assert run.stderr.startswith("connector-ops: files add failed (400): path: ")


def test_pipeline_list_json() -> None:
    listed = json.loads(cli("pipeline", "list", "--json").stdout)
    report = next(p for p in listed if p["name"] == "sales_report")
    assert report["steps"] == 18 and report["file"].endswith("sales_report.yaml")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_bad_setting_of_another_connector_breaks_no_other_command(env: dict[str, str], tmp_path: Path) -> None:
    bogus = {**env, "CONNECTOR_OPS_MAIL_BACKEND": "bogus"}
    source = tmp_path / "a.csv"
    source.write_text("a\n1\n")
    added = cli("files", "add", str(source), env=bogus)
    assert added.returncode == 0 and json.loads(added.stdout)["name"] == "a.csv"
    checked = cli("drive", "check-token", env=bogus)
    assert checked.returncode == 0 and json.loads(checked.stdout)["valid"] is True
    mailed = cli("invoke", "mail.send_transactional_message", "{}", env=bogus)
    assert mailed.returncode == 2  # a configuration error, as from every command
    assert mailed.stderr == ("connector-ops: mail.send_transactional_message failed (500): configuration error: "
                             "CONNECTOR_OPS_MAIL_BACKEND: must be one of outbox, mailjet, smtp, got 'bogus'\n")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_number_keeps_the_text_a_push_keeps(env: dict[str, str], files: Any, store: Any) -> None:
    """The CLI read JSON numbers as floats: ``1.50`` was stored ``"1.5"``, 20 digits as 17 and ``1E400`` was a
    400 (an infinity), where a Push of the same NDJSON keeps each number's text."""
    from connector_ops import invoke

    numbers = '{"a": 1.50, "b": 1e5, "c": -0.0, "d": 1E400, "e": 12345678901234567890.5, "f": 7}'
    pf = files.add_bytes(numbers.encode() + b"\n", "n.ndjson", "application/x-ndjson").to_json()
    vf = invoke("etl.push", {"platformFile": pf})["virtualFileId"]
    run = cli("invoke", "etl.append_rows", f'{{"rows": [{{"virtualFileId": "{vf}", "content": {numbers}}}]}}', env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    pushed, appended = store.rows(vf)
    assert appended == pushed == {"a": "1.50", "b": "1E+5", "c": "-0.0", "d": "1E+400",
                                  "e": "12345678901234567890.5", "f": "7"}
    huge = cli("invoke", "etl.iterate", '{"content": "x", "maxBatchSize": 1E999999999}', env=env)
    assert (huge.returncode, json.loads(huge.stdout)) == (2, {"message": "maxBatchSize: a number with more than "
                                                                         "4300 digits"})


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_progress_without_a_terminal_is_plain_lines_on_stderr_and_no_progress_silences_it(
        env: dict[str, str], tmp_path: Path) -> None:
    """In cron, CI or systemd (stderr no terminal) a Push printed nothing at all until it ended, however long
    it took. Now stderr gets a plain line every CONNECTOR_OPS_PROGRESS_INTERVAL seconds (default 30: a short
    command prints none) and one at the end; ``--no-progress`` silences it; stdout's JSON is unchanged."""
    source = tmp_path / "rows.csv"
    source.write_text("id\n" + "".join(f"{i}\n" for i in range(60_000)))
    payload = json.dumps({"platformFile": json.loads(cli("files", "add", str(source), env=env).stdout)})
    every_update = {**env, "CONNECTOR_OPS_PROGRESS_INTERVAL": "0"}
    pushed = cli("invoke", "etl.push", payload, env=every_update)
    assert pushed.returncode == 0, pushed.stderr
    assert set(json.loads(pushed.stdout)) == {"virtualFileId"}
    lines, size = pushed.stderr.splitlines(), amount(source.stat().st_size, "B")
    assert lines and all(re.fullmatch(rf"connector-ops: push rows\.csv: \d+% \([\d.]+ K?i?B of {size}\)( in \d+\.\ds)?",
                                      line) for line in lines), lines
    assert "\r" not in pushed.stderr and lines[-1].startswith(f"connector-ops: push rows.csv: 100% ({size} of")
    assert lines[-1].endswith("s") and " in " in lines[-1]  # the line at the end
    quiet = cli("invoke", "etl.push", payload, "--no-progress", env=every_update)
    assert quiet.returncode == 0 and quiet.stderr == "" and set(json.loads(quiet.stdout)) == {"virtualFileId"}
    short = cli("invoke", "etl.push", payload, env=env)  # the default interval: a second-long push says nothing
    assert short.returncode == 0 and short.stderr == ""
    bad = cli("invoke", "etl.push", payload, env={**env, "CONNECTOR_OPS_PROGRESS_INTERVAL": "often"})
    assert bad.returncode == 2 and "CONNECTOR_OPS_PROGRESS_INTERVAL: must be a whole number of seconds" in bad.stderr
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(f"name: quiet_run\nsteps:\n  - {{id: load, action: etl.push, input: {payload}}}\n")
    ran = cli("pipeline", "run", str(pipeline), "--no-progress", env=every_update)
    assert ran.returncode == 0 and "load: " not in ran.stderr and ran.stdout.startswith("load (etl.push): ")
    assert "load: started (etl.push)" in cli("pipeline", "run", str(pipeline), env=every_update).stderr


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_drive_put_shows_the_upload_progress_as_invoke_drive_upload_file_does(env: dict[str, str],
                                                                              tmp_path: Path) -> None:
    """``drive put`` ("the same as files add + invoke drive.upload_file") installed no progress reporter: a
    250 MB put showed nothing where the invoke of the same upload showed a bar (here: lines, stderr being no
    terminal, at every update with CONNECTOR_OPS_PROGRESS_INTERVAL=0). Both now go through one helper."""
    source = tmp_path / "big.csv"
    source.write_bytes(b"id\n" + b"".join(b"%d\n" % i for i in range(200_000)))
    every_update = {**env, "CONNECTOR_OPS_PROGRESS_INTERVAL": "0"}
    put = cli("drive", "put", str(source), env=every_update)
    assert put.returncode == 0, put.stderr
    assert set(json.loads(put.stdout)) >= {"fileId"}
    size = re.escape(amount(source.stat().st_size, "B"))
    pattern = r"connector-ops: upload big\.csv: \d+% \([\d.]+ [KM]?i?B of " + size + r"\)( in .*)?"
    lines = put.stderr.splitlines()
    assert lines and all(re.fullmatch(pattern, line) for line in lines), lines
    descriptor = json.loads(cli("files", "add", str(source), env=env).stdout)
    invoked = cli("invoke", "drive.upload_file", json.dumps({"platformFile": descriptor}), env=every_update)
    assert invoked.returncode == 0 and [re.sub(r" in .*", "", line) for line in invoked.stderr.splitlines()] \
        == [re.sub(r" in .*", "", line) for line in lines]  # the same lines
    quiet = cli("drive", "put", str(source), "--no-progress", env=every_update)
    assert quiet.returncode == 0 and quiet.stderr == ""
