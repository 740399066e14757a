"""``connector-ops`` and its standard streams: a console that cannot show a character, closed or failing
stdin/stdout/stderr, a reader that stops early, interrupts. Run as the installed console script in a
subprocess, with the streams a shell would give it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = str(Path(sys.executable).parent / "connector-ops")
EURO_AND_EMOJI = {"content": [{"a": "€ 😀"}], "maxBatchSize": 1}


def run_cli(*args: str, env: dict[str, str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs}
    return subprocess.run([SCRIPT, *args], timeout=120, env={**os.environ, **env}, **streams)  # type: ignore


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("encoding", ["ascii", "latin-1", "cp1252"])
def test_an_answer_the_console_cannot_show_is_printed_whole_as_json_escapes(env: dict[str, str],
                                                                             encoding: str) -> None:
    """It was half a JSON document, then a 500 about UnicodeEncodeError and exit 1, after the action had run."""
    run = run_cli("invoke", "etl.iterate", json.dumps(EURO_AND_EMOJI), env={**env, "PYTHONIOENCODING": encoding})
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads(run.stdout.decode("ascii")) == {"content": [{"a": "€ 😀"}], "hasNext": False}
    assert run.stderr == b""


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_console_that_can_show_it_gets_the_characters_themselves(env: dict[str, str]) -> None:
    run = run_cli("invoke", "etl.iterate", json.dumps(EURO_AND_EMOJI), env={**env, "PYTHONIOENCODING": "utf-8"})
    assert run.returncode == 0 and "€ 😀" in run.stdout.decode()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_human_lines_the_console_cannot_show_are_escaped_not_a_failure(env: dict[str, str]) -> None:
    """``pipeline validate``'s "ok — job" on an ASCII console."""
    shipped = Path(__file__).parents[1] / "pipelines" / "retail_customers.yaml"
    run = run_cli("pipeline", "validate", str(shipped), env={**env, "PYTHONIOENCODING": "ascii"})
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.decode("ascii").startswith(f"{shipped}: ok \\u2014 job retail_customers, ")


def closing(*fds: int) -> object:
    """A ``preexec_fn`` that closes the child's ``fds`` (``<&-``, ``>&-``, ``2>&-``)."""
    def close() -> None:
        for fd in fds:
            os.close(fd)
    return close


ITERATE = ("invoke", "etl.iterate", '{"content": [{"a": "1"}], "maxBatchSize": 1}')


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_closed_stderr_runs_the_action_and_keeps_stdout_json(env: dict[str, str]) -> None:
    """``invoke … 2>&-`` was a 500 (``'NoneType' object has no attribute 'isatty'``) before the action ran;
    ``gc --json 2>&-`` printed its DAGSTER_HOME warning into stdout, before the JSON."""
    invoked = run_cli(*ITERATE, env=env, preexec_fn=closing(2))
    assert (invoked.returncode, json.loads(invoked.stdout)) == (0, {"content": [{"a": "1"}], "hasNext": False})
    no_history = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    gc = subprocess.run([SCRIPT, "gc", "--json", "--dry-run"], capture_output=True, timeout=120,
                        env={**no_history, **env}, preexec_fn=closing(2))
    assert gc.returncode == 0 and "virtualFiles" in json.loads(gc.stdout), gc.stdout


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_closed_or_unreadable_stdin_is_a_400_naming_the_action(env: dict[str, str]) -> None:
    """``invoke NAME - <&-`` was a 500 (``'NoneType' object has no attribute 'read'``) naming no action."""
    closed = run_cli("invoke", "etl.iterate", "-", env=env, preexec_fn=closing(0))
    assert closed.returncode == 2, closed.stdout + closed.stderr
    assert json.loads(closed.stdout) == {"message": "input: stdin is closed, so '-' has no input to read"}
    assert closed.stderr.decode().startswith("connector-ops: etl.iterate failed (400): input: stdin is closed")
    write_only = os.open(os.devnull, os.O_WRONLY)  # (a folder Python itself refuses before any code runs)
    try:
        unreadable = run_cli("invoke", "etl.iterate", "-", env=env, stdin=write_only)
    finally:
        os.close(write_only)
    assert unreadable.returncode == 2
    assert json.loads(unreadable.stdout) == {"message": "input: cannot read stdin: Bad file descriptor"}


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_stdout_that_cannot_be_written_is_one_line_and_exit_1(env: dict[str, str]) -> None:
    """``>/dev/full`` ran the action, then gave two chained tracebacks (the error report wrote to the same
    full stdout)."""
    with open("/dev/full", "wb") as full:
        run = run_cli(*ITERATE, env=env, stdout=full)
    assert (run.returncode, run.stderr.decode()) == (1, "connector-ops: cannot write the output: No space left "
                                                        "on device\n")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_closed_stdout_is_dev_null_not_the_next_file_opened(env: dict[str, str]) -> None:
    """With descriptor 1 closed, the first file opened (the SQLite database) took number 1."""
    run = run_cli(*ITERATE, env=env, preexec_fn=closing(1), stdout=None)
    assert (run.returncode, run.stderr) == (0, b"")
    again = run_cli(*ITERATE, env=env)
    assert (again.returncode, json.loads(again.stdout)) == (0, {"content": [{"a": "1"}], "hasNext": False})


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("args", [("actions",), ITERATE, ("pipeline", "schema")])
def test_a_reader_that_stopped_reading_ends_it_silently_with_141(env: dict[str, str], args: tuple[str, ...]) -> None:
    """``connector-ops actions | grep -q …`` (grep gone after its first match) exited 1, click's silent exit
    for a broken pipe, which a ``set -o pipefail`` script could not tell from a failure: now 128 + SIGPIPE,
    as a shell reports ``yes | head -1``. The reader is gone before the first write here, every time."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        run = run_cli(*args, env=env, stdout=write_end)
    finally:
        os.close(write_end)
    assert (run.returncode, run.stderr) == (141, b"")


def signalled_once(args: tuple[str, ...], env: dict[str, str], line: str, signo: int
                   ) -> tuple[int, str]:
    """Run the command, send ``signo`` once it has written a stderr line starting with ``line``; its exit
    code and whole stderr."""
    child = subprocess.Popen([SCRIPT, *args], env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, bufsize=1)
    try:
        assert child.stderr is not None
        seen = []
        for text in child.stderr:
            seen.append(text)
            if text.startswith(line):
                child.send_signal(signo)
                break
        else:
            raise AssertionError(f"no {line!r} line: {''.join(seen)}")
        rest = child.stderr.read()
        return child.wait(timeout=60), "".join(seen) + rest
    finally:
        child.kill()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("signo", "expected"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_pipeline_run_stopped_before_its_steps_run_exits_130_or_143(env: dict[str, str], signo: int,
                                                                       expected: int) -> None:
    """In the seconds while Dagster loaded and the job compiled, Ctrl-C was ``Aborted!`` and exit 1 (a
    failed step's code) and SIGTERM killed the process (-15); then both were 130, so a supervisor could not
    tell its own stop from a Ctrl-C: SIGTERM's is 143, as a shell reports it."""
    code, err = signalled_once(("pipeline", "run", "retail_customers"), env, "running retail_customers", signo)
    assert code == expected, err
    assert "Traceback" not in err and " succeeded" not in err


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("signo", [signal.SIGINT, signal.SIGTERM])
def test_files_serve_stopped_by_ctrl_c_or_sigterm_ends_normally(env: dict[str, str], signo: int) -> None:
    """It shut down cleanly, then said ``Aborted!`` and exited 1."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, err = signalled_once(("files", "serve", "--host", "127.0.0.1", "--port", str(port)), env, "serving",
                               signo)
    assert (code, err.splitlines()[-1]) == (0, "stopped"), err
    assert "Aborted!" not in err and "Traceback" not in err
