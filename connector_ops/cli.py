"""``connector-ops``: run actions, manage platform files, and the connectors' own command groups.

Built on click (as dagster and sqlite-utils are). Imports are lazy: ``--help`` loads click only, and
``invoke`` loads just the action it runs and the resources that action uses. The ``drive`` and
``pipeline`` groups live with their connectors and are loaded by name when used (a higher floor's
commands are plugins here, never imports).

Exit codes: 0 success, 2 invalid input (status 400, or a usage error), 3 not found (404), 1 any other
failure, 130 interrupted (Ctrl-C), 143 stopped by SIGTERM, 141 stdout's reader stopped reading; the
``pipeline`` commands report a run or files, not one action, and have their own (their --help).
On an action error the spec's error body is printed as JSON on stdout and one line naming the
action on stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any

import click

from connector_ops.kernel.errors import ConfigurationError, ConnectorError, ConnectorOpsError
from connector_ops.kernel.json_text import read_json
from connector_ops.stdio import OutputError, json_text

PROG = "connector-ops"
#: command group -> ("module:attribute", one-line help shown without importing the module)
LAZY_GROUPS = {
    "drive": ("connector_ops.drive.cli:drive", "Cloud drive: put a local file in, sign-in and credentials."),
    "pipeline": ("connector_ops.pipelines.cli:pipeline", "YAML pipelines: validate, list, run."),
    "gc": ("connector_ops.pipelines.cli:gc", "Remove virtual and platform files nothing refers to any more."),
    "store": ("connector_ops.store_cli:store", "The stores themselves: copy their files into the stores in use."),
}
EXIT_CODES = {400: 2, 404: 3}
#: a command stopped by Ctrl-C: the shell's code for SIGINT
EXIT_INTERRUPTED = 128 + signal.SIGINT
#: a command stopped by SIGTERM, which the console script takes as a Ctrl-C (the work stopped the same way)
#: but reports as the shell would a process SIGTERM ended, so a supervisor tells a stop from an interrupt
EXIT_TERMINATED = 128 + signal.SIGTERM
#: stdout's reader stopped reading (``| head``): what a shell reports for a tool SIGPIPE ended
EXIT_READER_GONE = 128 + signal.SIGPIPE


def exit_code(status: int) -> int:
    """2 for invalid input (400), 3 for not found (404), 1 for every other failure."""
    return EXIT_CODES.get(status, 1)


class LazyGroup(click.Group):
    """A group whose plugin subgroups are imported only when they run (their help text is known up front)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *LAZY_GROUPS])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_GROUPS:
            import importlib

            module, _, attribute = LAZY_GROUPS[name][0].partition(":")
            return getattr(importlib.import_module(module), attribute)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, LAZY_GROUPS[name][1] if name in LAZY_GROUPS else self.commands[name].get_short_help_str(80))
                for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def print_json(value: Any) -> None:
    """Print ``value`` as JSON, whole: written in one piece, ``\\u`` escapes where stdout's encoding lacks a
    character (:func:`connector_ops.stdio.json_text`)."""
    sys.stdout.write(json_text(value, indent=2) + "\n")


def report(exc: ConnectorError) -> int:
    """Print an action's error (body on stdout, one line on stderr) and return the exit code: 2 for a
    configuration error whatever its status (``invoke``'s is the action's 500), as from every other command."""
    print_json(exc.body)
    click.echo(f"{PROG}: {exc.summary()}", err=True)
    return 2 if isinstance(exc.__cause__, ConfigurationError) else exit_code(exc.status)


def _action_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    from connector_ops.registry import ACTION_MODULES

    return [name for name in ACTION_MODULES if name.startswith(incomplete)]


class _NotJson(ValueError):
    pass


def _not_json_number(word: str) -> Any:
    """``NaN``, ``Infinity``, ``-Infinity``: Python's ``json`` reads them; RFC 8259 has no such numbers."""
    raise _NotJson(word)


def argument_bytes(text: str) -> str | bytes:
    """A command-line argument as the bytes the shell passed, for JSON to read as UTF-8 as it reads stdin's.
    Python decodes argv in the locale's encoding: in an ASCII one (``LC_ALL=C``, ``PYTHONUTF8=0``) ``é`` came
    as two surrogate escapes, a 400 "half of a UTF-16 surrogate pair" for input stdin took. Text the
    file-system encoding cannot hold (given by a caller of :func:`main`, not the shell) is left as text."""
    try:
        return os.fsencode(text)
    except UnicodeEncodeError:
        return text


def read_payload(text: str | None, action: str) -> Any:
    """The JSON input: inline text, ``-`` (stdin), ``@file.json``, or nothing (``{}``)."""
    if text is None:
        return {}
    data: str | bytes = text
    if text == "-":  # bytes, which json reads as RFC 8259 says (UTF-8, a BOM tolerated, or UTF-16/32)
        if sys.stdin is None:  # closed (<&-, a daemon): Python's sign of it, kept by prepare_standard_streams
            raise ConnectorError(400, {"message": "input: stdin is closed, so '-' has no input to read"},
                                 action=action)
        try:
            stdin = getattr(sys.stdin, "buffer", None)
            data = stdin.read() if stdin is not None else sys.stdin.read()
        except OSError as exc:  # a descriptor open for writing only (Python itself refuses a folder)
            raise ConnectorError(400, {"message": f"input: cannot read stdin: {exc.strerror or exc}"},
                                 action=action) from None
    elif text.startswith("@"):
        try:
            with open(text[1:], "rb") as handle:
                data = handle.read()
        except OSError as exc:
            raise ConnectorError(400, {"message": f"input: cannot read {text[1:]!r}: {exc.strerror}"},
                                 action=action) from None
    else:
        data = argument_bytes(text)
    try:
        return read_json(data, parse_constant=_not_json_number)
    except _NotJson as exc:
        raise ConnectorError(400, {"message": f"input is not valid JSON: {exc} is no JSON number"},
                             action=action) from None
    except UnicodeDecodeError as exc:
        raise ConnectorError(400, {"message": f"input is not UTF-8 text ({exc.reason} at byte {exc.start})"},
                             action=action) from None
    except json.JSONDecodeError as exc:
        raise ConnectorError(400, {"message": f"input is not valid JSON: {exc}"}, action=action) from None
    except RecursionError:
        raise ConnectorError(400, {"message": "input is nested too deeply"}, action=action) from None
    except ValueError as exc:  # a number past Python's int-string limit
        raise ConnectorError(400, {"message": f"input holds a number Python cannot read: {exc}"},
                             action=action) from None


#: where :func:`cli` keeps the running command's ``answered()`` (in the click context's meta)
_ANSWERED = "connector_ops.answered"


def answered() -> None:
    """Say that the running command's answer is final — its work committed (a file stored, a run ended, gc's
    removals done), only printing it and closing the session left. From then on until the command ends a
    Ctrl-C is ignored, so a script sees the outcome, not an interruption (``Aborted!``, 1, or -2 by SIGINT)
    after the work was kept. The commands that commit then print call it; outside the command line (a
    notebook, a function called directly) it does nothing."""
    ctx = click.get_current_context(silent=True)
    mark = ctx.meta.get(_ANSWERED) if ctx is not None else None
    if mark is not None:
        mark()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="connector-ops", prog_name=PROG)
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Cloud drive, transactional e-mail and ETL connectors: run actions, manage platform files.

    \b
    Shell completion (bash; zsh and fish alike):  eval "$(connector-ops completion bash)"
    Exit codes: 0 ok, 2 invalid input (400), 3 not found (404), 1 other failures, 130
    interrupted (Ctrl-C), 143 stopped by SIGTERM, 141 the reader of stdout stopped reading;
    the pipeline commands have their own (connector-ops pipeline run --help).
    """
    from connector_ops.kernel.deferred import interrupts_ignored_once_answered

    # every command runs inside it (it ends when the root context closes, after the command and its session)
    ctx.meta[_ANSWERED] = ctx.with_resource(interrupts_ignored_once_answered())


#: seconds between two progress lines when stderr is no terminal (``CONNECTOR_OPS_PROGRESS_INTERVAL`` sets it):
#: a command shorter than that prints none, a longer one a line this often and one at the end
LOG_INTERVAL = 30

#: ``--no-progress``, on every command that runs actions (``invoke``, ``drive put``, ``pipeline run``)
no_progress_option = click.option(
    "--no-progress", is_flag=True,
    help=f"show no progress on stderr (default: a bar on a terminal, else a line every {LOG_INTERVAL} s)")


def _stderr_line(line: str) -> None:
    print(f"{PROG}: {line}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def showing_progress(enabled: bool = True) -> Iterator[None]:
    """How a command shows the progress of the actions it runs, on stderr: a ``tqdm`` bar on a terminal;
    elsewhere (cron, CI, systemd, ``2> log``) plain lines every :data:`LOG_INTERVAL` seconds, since a bar's
    carriage returns make a log unreadable and silence leaves a long run looking hung; nothing when not
    ``enabled`` (``--no-progress``)."""
    from connector_ops.kernel.progress import ReporterFactory, log_lines, reporting_to, tqdm_reporter
    from connector_ops.kernel.settings import progress_interval

    factory: ReporterFactory | None = None
    if enabled and sys.stderr is not None:
        factory = tqdm_reporter if sys.stderr.isatty() else log_lines(_stderr_line, progress_interval(LOG_INTERVAL))
    with reporting_to(factory):
        yield


def showing_warnings() -> contextlib.AbstractContextManager[None]:
    """Within this block, the warnings of :mod:`connector_ops.kernel.notices` (an action's, the pipeline
    loader's) are lines on stderr: ``connector-ops: warning: …``."""
    from connector_ops.kernel.notices import warnings_to

    return warnings_to(lambda message: print(f"{PROG}: warning: {message}", file=sys.stderr))


@contextlib.contextmanager
def running_actions(progress: bool = True) -> Iterator[None]:
    """What every command that runs actions shows on stderr while they run, the same from each (``invoke``,
    ``drive put``): their progress (:func:`showing_progress`) and their warnings, one line each."""
    with showing_progress(progress), showing_warnings():
        yield


@cli.command()
@click.argument("name", shell_complete=_action_names)
@click.argument("input", required=False)
@no_progress_option
def invoke(name: str, input: str | None, no_progress: bool) -> None:
    """Run the action NAME (etl.push, etl-push …) on INPUT and print its output as JSON.

    INPUT is JSON text, - to read it from stdin, or @FILE to read it from a file; none means {}.
    Progress goes to stderr: a bar on a terminal, else a line every 30 s (--no-progress: none).
    """
    from connector_ops.registry import canonical_name
    from connector_ops.session import Session

    payload = read_payload(input, canonical_name(name))
    with Session() as session, running_actions(not no_progress):
        output = session.invoke(name, payload)
        answered()  # done and committed: a Ctrl-C while it is printed and the session closes changes nothing
        print_json(output)
        sys.stdout.flush()


@cli.command()
@click.argument("name", required=False, shell_complete=_action_names)
@click.option("--schema", is_flag=True, help="print the input's JSON Schema")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def actions(name: str | None, schema: bool, as_json: bool) -> None:
    """List the actions, or show the input fields of the action NAME."""
    from connector_ops import action_docs

    if name is None:
        listing = action_docs.listing()
        if as_json:
            print_json(listing)
        else:
            for row in listing:
                click.echo(f"{row['name']:34s} {row['summary']}")
        return
    if schema:
        print_json(action_docs.input_schema(name))
    elif as_json:
        print_json(action_docs.describe(name))
    else:
        click.echo(action_docs.describe_text(name))


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell-completion script: eval "$(connector-ops completion bash)"."""
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)
    assert completer is not None
    click.echo(completer(cli, {}, PROG, "_CONNECTOR_OPS_COMPLETE").source())


@cli.group()
def files() -> None:
    """Platform files: store local files, serve them over HTTP."""


def _platform_files() -> Any:
    from connector_ops.environment import resources_for

    return resources_for(["platform_files"])["platform_files"]


@files.command("add")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--name", help="the file's name (default: the path's)")
@click.option("--content-type", help="default: guessed from the name")
def files_add(path: str, name: str | None, content_type: str | None) -> None:
    """Store the local file PATH as a platform file and print its descriptor."""
    with _platform_files() as store:
        try:
            descriptor = store.add_file(path, name=name, content_type=content_type)
        except ConnectorOpsError as exc:
            raise ConnectorError(exc.status, {"message": str(exc)}, action="files add") from None
        except Exception as exc:  # the host's (a read-only files folder): named as the command, not "failed"
            from connector_ops.registry import describe_unexpected

            raise ConnectorError(500, {"message": describe_unexpected(exc)}, action="files add") from None
        answered()  # stored: a Ctrl-C while it is printed and the store closes changes nothing
        print_json(descriptor.to_json())


@files.command("serve")
@click.option("--host", help="default: the host of CONNECTOR_OPS_FILE_SERVER_URL")
@click.option("--port", type=click.IntRange(1, 65535), help="default: the port of CONNECTOR_OPS_FILE_SERVER_URL")
def files_serve(host: str | None, port: int | None) -> None:
    """Serve GET /files/<id> (the links of platform files)."""
    import os
    from urllib.parse import urlsplit

    from connector_ops.resources.file_server import listening_socket, serve

    with _platform_files() as store:
        url = urlsplit(store.file_server_url)
        host = host or url.hostname or "127.0.0.1"
        port = port or url.port or (443 if url.scheme == "https" else 80)
        where = "the files in the database" if store.files_database_url else store.files_dir
        try:
            sock = listening_socket(host, port)
        except OSError as exc:  # in use, or not an address of this host: one line, not uvicorn's exit 3
            why = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else exc.strerror or str(exc)
            raise click.ClickException(f"cannot listen on {host}:{port}: {why}") from None
        try:
            click.echo(f"serving {where} at http://{host}:{port}/files/<id>", err=True)
            serve(store, sock)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM (after uvicorn's clean shutdown): how a server ends, exit 0
            click.echo("stopped", err=True)


def output_failed(exc: OutputError, code: int = 0) -> int:
    """Stdout could not be written: a reader that stopped early (``| head``) ends the command as SIGPIPE ends
    other Unix tools, silently with 141 (128 + SIGPIPE); any other error (a full disk) is one line on stderr
    and exit 1 (or the command's own failure code)."""
    from connector_ops.stdio import silence_stdout

    silence_stdout()
    if exc.reader_gone:
        return EXIT_READER_GONE
    click.echo(f"{PROG}: cannot write the output: {exc.strerror}", err=True)
    return code or 1


def run(command: click.Command, argv: Sequence[str] | None) -> int:
    """Run a click command and turn every outcome into an exit code (errors as one line, no traceback)."""
    try:
        return _run(command, argv)
    except OutputError as exc:  # the answer, or the error report, could not be written
        return output_failed(exc)


def _run(command: click.Command, argv: Sequence[str] | None) -> int:
    try:
        result = command.main(args=list(argv) if argv is not None else None, prog_name=PROG, standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort as exc:  # click's word for a KeyboardInterrupt (or an EOFError at a prompt)
        click.echo("Aborted!", err=True)
        return EXIT_INTERRUPTED if isinstance(exc.__cause__, KeyboardInterrupt) else 1
    except ConnectorError as exc:
        return report(exc)
    except ConfigurationError as exc:  # worded as invoke words it
        return report(ConnectorError(exc.status, {"message": f"configuration error: {exc}"}))
    except ConnectorOpsError as exc:
        return report(ConnectorError(exc.status, {"message": str(exc)}))
    except OutputError:  # printing failed, not the command (run's)
        raise
    except Exception as exc:  # a command besides an action's (gc, files …): worded as an action's 500 would be
        from connector_ops.registry import describe_unexpected

        return report(ConnectorError(500, {"message": describe_unexpected(exc)}))
    return result if isinstance(result, int) else 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(cli, argv)


def _terminate(signo: int, frame: FrameType | None) -> None:
    """SIGTERM (``timeout``, ``kill``, systemd) does what Ctrl-C would do at that moment: stop the work
    cleanly (a transaction rolled back, a run's step reported interrupted) and exit 143 (:func:`stop_code`),
    or nothing once the answer is final. Dagster's runs take SIGTERM as their interrupt too (for
    Kubernetes), so a command stops the same way whichever of the two signals comes, and whenever it comes;
    only its exit status says which."""
    handler = signal.getsignal(signal.SIGINT)
    if handler is signal.SIG_IGN:
        return
    if callable(handler):
        handler(signo, frame)
        return
    raise KeyboardInterrupt


def stop_code(code: int) -> int:
    """An interrupted command's 130 is 143 when SIGTERM stopped it, whichever handler took the signal (the
    command line's :func:`_terminate`, or a Dagster run's own while it executes), as a shell reports a
    process each signal ends; any other code (the command's outcome: SIGTERM is ignored once the answer is
    final) stays."""
    from connector_ops.kernel.signals_seen import signals_seen

    return EXIT_TERMINATED if code == EXIT_INTERRUPTED and signal.SIGTERM in signals_seen() else code


def entry_point() -> None:  # pragma: no cover - the console script
    from connector_ops.kernel.signals_seen import watch_signals
    from connector_ops.stdio import prepare_standard_streams

    prepare_standard_streams()
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not a background job of a script,
        signal.signal(signal.SIGTERM, _terminate)  # which its shell has made ignore Ctrl-C
        watch_signals()
    try:
        code = main()
    except SystemExit as exc:  # a command's own status (pipeline run's 130 for an interrupted run)
        if not isinstance(exc.code, int):
            raise
        code = exc.code
    code = stop_code(code)
    try:
        sys.stdout.flush()
    except OutputError as exc:
        code = output_failed(exc, code)
    # the answer is printed and the exit code decided: a Ctrl-C while the interpreter ends (its atexit
    # handlers close the loader processes) must not make the process end by SIGINT instead
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if signal.getsignal(signal.SIGTERM) is _terminate:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    entry_point()
