"""IPython magics: ``%load_ext connector_ops`` gives ``%etl``, ``%drive``, ``%mail``, ``%connectors``, ``%pipeline``.

    %etl ACTION [-o NAME] {JSON or YAML flow input}        one action, input on the line
    %%etl ACTION [-o NAME]                                  the cell body holds the input (JSON or YAML)
    %etl push --df FRAME / %etl pull --df {…}               pandas DataFrames in and out of virtual files
    %etl                                                    the connector's actions and their input fields
    %connectors [use MODULE:DEFS | use env | set NAME=VALUE … | reset | add-file PATH [-o NAME]]
    %pipeline [run NAME_OR_FILE [-o NAME]]

A magic is a thin entry point (JupySQL is the model): it reads the input (``connector_ops.magic_input``),
takes the session's resources (``connector_ops.magic_session``) and calls the registry's
:func:`~connector_ops.registry.run_action` — the same code the Dagster ops run — with a progress bar
(:func:`~connector_ops.kernel.progress.tqdm_reporter`). It returns the output as an
:class:`~connector_ops.display.ActionOutput` (equal to the spec's JSON, displayed as tables and file links).
A failure prints one line, ``etl.push failed (404): not found``, and stops "Run all" without a traceback.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import shlex
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class, needs_local_scope, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import Integer, observe

from connector_ops.display import OPTIONS, ActionOutput, StatusTable
from connector_ops.etl.models import PullParameters
from connector_ops.kernel.errors import ConnectorError
from connector_ops.kernel.notices import warnings_to
from connector_ops.kernel.progress import reporting_to, tqdm_reporter
from connector_ops.magic_frames import file_preview, pull_frame, push_frame
from connector_ops.magic_input import InputError, WordsParser, python_name, read_input
from connector_ops.magic_session import NotebookSession, SessionError
from connector_ops.registry import ACTIONS, ActionSpec, load_all, run_action

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

CONNECTORS = ("etl", "drive", "mail")
#: the line's input starts at the first token opening a JSON/YAML flow object or array
_INPUT_START = re.compile(r"(?:^|\s)([{\[])")


@dataclass(frozen=True)
class MagicCall:
    """One successful magic call, as listeners (``%pipeline record``) see it.

    ``payload`` is the input after ``{{…}}`` substitution, ``output`` the action's output (a DataFrame for
    ``pull --df``), ``out`` the ``-o`` name, ``placeholders`` each ``{{expr}}`` of the input with its value.
    ``%connectors add-file`` is ``action="files.add"`` with the local ``path`` and the stored descriptor as
    ``output``."""

    action: str
    payload: Any
    output: Any
    out: str | None = None
    df: Any = None
    path: str | None = None
    placeholders: tuple[tuple[str, Any], ...] = ()


class NotebookError(ConnectorError):
    """A failed magic: IPython shows only its one-line summary, and "Run all" stops at the cell."""

    @classmethod
    def from_error(cls, exc: ConnectorError) -> NotebookError:
        return cls(exc.status, exc.body, action=exc.action, detail=exc.detail, retryable=exc.retryable)

    def _render_traceback_(self) -> list[str]:  # IPython's hook for custom tracebacks
        return [self.summary()]


def stopped(message: str) -> KeyboardInterrupt:
    """What a cell stopped by Jupyter's Stop (or Ctrl-C) ends with: still a ``KeyboardInterrupt`` (the
    kernel's ``ename``; "Run all" stops), shown as one line through IPython's traceback hook instead of
    a traceback through connector-ops' internals."""
    interrupt = KeyboardInterrupt(message)
    interrupt._render_traceback_ = lambda: [message]  # type: ignore[attr-defined]  # IPython's hook, looked up
    return interrupt


def split_line(line: str) -> tuple[str, str]:
    """``'query -o r {"a": 1}'`` -> ``('query -o r', '{"a": 1}')``: options, then the input."""
    match = _INPUT_START.search(line)
    if match is None:
        return line.strip(), ""
    return line[:match.start(1)].strip(), line[match.start(1):].strip()


def hiding_semicolon(line: str) -> tuple[str, bool]:
    """``'iterate -o q {…};'`` -> ``('iterate -o q {…}', True)``: IPython's ``;`` that hides a cell's result.

    IPython cannot see it (the magic's line is a string to Python), so the magic removes it and returns
    nothing to display. It is taken only after the options or after the input's closing bracket, where it
    is never valid JSON or YAML today: in ``{a: 1} # note;`` it belongs to the comment and stays."""
    text = line.rstrip()
    if not text.endswith(";"):
        return line, False
    _, inline = split_line(text)
    if inline and not text[:-1].rstrip().endswith("}" if inline[0] == "{" else "]"):
        return line, False
    return text[:-1], True


def line_words(line: str) -> tuple[list[str], bool]:
    """A command magic's line (``%connectors``, ``%pipeline``) as shell words, and whether it ended with the
    ``;`` that hides the result (:func:`hiding_semicolon`): without this, ``-o big;`` named the variable
    ``big;`` and ``--name x.csv;`` stored ``x.csv;``."""
    line, hidden = hiding_semicolon(line)
    return shlex.split(line), hidden


def connector_actions(connector: str) -> dict[str, ActionSpec]:
    load_all()
    return {spec.short_name: spec for name, spec in sorted(ACTIONS.items()) if spec.connector == connector}


def find_action(connector: str, action: str) -> ActionSpec:
    actions = connector_actions(connector)
    short = action.replace("-", "_")
    if short in actions:
        return actions[short]
    known = ", ".join(actions) or "none registered"
    raise InputError(f"unknown action {action!r}; {connector} actions: {known}", action=f"{connector}.{short}")


def actions_table(connector: str) -> StatusTable:
    rows = []
    for short, spec in connector_actions(connector).items():
        fields = [
            (info.alias or name) + ("" if info.is_required() else "?")
            for name, info in spec.input_model.model_fields.items()
        ]
        rows.append({"action": short, "does": spec.summary, "input (? = optional)": ", ".join(fields)})
    return StatusTable(f"%{connector} actions", rows, [f"usage: %{connector} ACTION {{JSON or YAML input}}"])


def magic_help(connector: str, magic: Any, action: str | None) -> str:
    """What ``%etl --help`` shows: what ``%etl?`` shows (the docstring and the options); ``%etl query --help``
    (or ``-h``): the action's input fields, as ``connector-ops actions etl.query`` prints them."""
    if action is None:
        return inspect.cleandoc(magic.__doc__ or "")
    from connector_ops.action_docs import describe_text

    usage = f"usage: %{connector} {action} [-o NAME] {{JSON or YAML input}}  (or %%{connector} {action} + input)"
    return f"{usage}\n\n{describe_text(find_action(connector, action).name)}"


def _keys_for(spec: ActionSpec, frames: Any) -> tuple[str, ...]:
    """The resources a cell needs: the action's, and platform files where DataFrames become files."""
    return (*spec.resource_keys, "platform_files") if frames else spec.resource_keys


def displayable(action: str, output: Any, resources: Mapping[str, Any], payload: Any = None) -> Any:
    """Dict outputs get notebook displays; ``"ok"``, ``None`` … are returned as they are. A Pull's file is
    previewed with the Pull's own parameters (``payload``'s): its delimiter, encoding and header row."""
    if not isinstance(output, Mapping):
        return output
    store = resources.get("platform_files")
    if store is None:
        return ActionOutput(action, output, None)
    parameters = None
    if action == "etl.pull" and isinstance(payload, Mapping):
        with contextlib.suppress(ValueError):  # the Pull took them: only a preview would go without
            parameters = PullParameters.model_validate(payload.get("parameters") or {})
    return ActionOutput(action, output, file_preview(store, parameters))


def _connector_magic(connector: str) -> Callable[..., Any]:
    """The ``%connector`` / ``%%connector`` magic (one definition for every connector)."""

    def magic(self: ConnectorMagics, line: str = "", cell: str | None = None,
              local_ns: dict[str, Any] | None = None) -> Any:
        return self.run_connector(connector, magic, line, cell, local_ns)

    magic.__name__ = connector
    magic.__doc__ = f"""Run a {connector} action: ``%{connector} ACTION {{input}}`` or ``%%{connector} ACTION`` + input.

    The input is the action's JSON input (YAML accepted). ``{{{{name}}}}`` inserts a Python value: as
    text inside a quoted string, as its JSON value elsewhere. ``%{connector}`` alone lists the actions.
    """
    magic = argument("--df", nargs="?", const=True, default=None, metavar="NAME", type=python_name,
                     help="etl push: the DataFrame variable to push; etl pull: return a DataFrame "
                          "(stored in NAME when given)")(magic)
    magic = argument("-o", "--out", metavar="NAME", type=python_name,
                     help="store the output in this variable")(magic)
    magic = argument("-h", "--help", action="store_true",
                     help="show this help; after ACTION, the action's input fields")(magic)
    magic = argument("action", nargs="?", help="the action, snake_case (push, query, create_shared_link…)")(magic)
    magic = magic_arguments()(magic)
    return no_var_expand(needs_local_scope(line_cell_magic(magic)))


def warning_line(message: str) -> None:
    """A warning below the cell, one line, like the CLI's (the cell's result still displays)."""
    print(f"warning: {message}", file=sys.stderr)


@magics_class
class ConnectorMagics(Magics):
    """The magics of one IPython session, holding the session's resources.

    Display settings are traitlets, set like JupySQL's: ``%config ConnectorMagics.displaylimit = 50``."""

    #: always given (IPython types it optional for magics made without a shell; these never are)
    shell: InteractiveShell

    displaylimit = Integer(OPTIONS.rows, allow_none=True, config=True,
                           help="rows shown in a table (0 or None: all of them)")
    displaywidth = Integer(OPTIONS.width, config=True,
                           help="widest line of a text/plain table; wider tables wrap their columns")

    @observe("displaylimit", "displaywidth")
    def _display_changed(self, change: Any) -> None:
        if change["name"] == "displaylimit":
            if change["new"] is not None and change["new"] < 0:
                raise ValueError("displaylimit must be 0 (all rows) or more")
            OPTIONS.rows = change["new"]
        else:
            OPTIONS.width = max(20, int(change["new"]))

    def __init__(self, shell: Any) -> None:
        super().__init__(shell)  # also lists it in shell.configurables: %config ConnectorMagics.displaylimit = N
        OPTIONS.rows, OPTIONS.width = self.displaylimit, max(20, self.displaywidth)
        self.session = NotebookSession()
        #: called after every successful call (``%pipeline record`` listens); never breaks a cell
        self.listeners: list[Callable[[MagicCall], None]] = []

    def notify(self, call: MagicCall) -> None:
        for listener in list(self.listeners):
            try:
                listener(call)
            except Exception as exc:  # a listener's bug must not fail the user's cell
                print(f"connector-ops: {getattr(listener, '__qualname__', listener)}: {exc}", file=sys.stderr)

    @classmethod
    def instance_in(cls, ipython: Any) -> ConnectorMagics | None:
        """The instance registered in ``ipython`` (``%pipeline`` runs with its session), if any."""
        return next((m for m in ipython.magics_manager.registry.values() if isinstance(m, cls)), None)

    etl = _connector_magic("etl")
    drive = _connector_magic("drive")
    mail = _connector_magic("mail")

    # -- running actions -----------------------------------------------------------------------------
    def namespace(self, local_ns: Mapping[str, Any] | None) -> Mapping[str, Any]:
        user_ns = self.shell.user_ns
        return user_ns if not local_ns or local_ns is user_ns else {**user_ns, **local_ns}

    def run_connector(self, connector: str, magic: Any, line: str, cell: str | None,
                      local_ns: Mapping[str, Any] | None) -> Any:
        args_action = None
        line, hidden = hiding_semicolon(line)
        try:
            options, inline = split_line(line)
            try:
                args = parse_argstring(magic, options)
            except Exception as exc:  # argparse's UsageError: one line like any other input error
                raise InputError(str(exc), action=connector) from None
            args_action = args.action
            if args.help:  # argparse's own -h would print and exit: the magic's help, or the action's
                print(magic_help(connector, magic, args.action))
                return None
            body = cell if cell is not None and cell.strip() else None
            if args.action is None:
                if body or inline or args.out or args.df:
                    raise InputError(f"name the action: %{connector} ACTION …", action=connector)
                return actions_table(connector)
            spec = find_action(connector, args.action)
            if body is not None and inline:
                raise InputError("give the input on the magic's line or in the cell body, not both", action=spec.name)
            namespace = self.namespace(local_ns)
            placeholders: list[tuple[str, Any]] = []
            payload = read_input(body if body is not None else inline, namespace, placeholders)
            resources = self.session.resources(_keys_for(spec, args.df))
            with reporting_to(tqdm_reporter), warnings_to(warning_line):
                output = self._call(spec, args, payload, resources, namespace)
        except ConnectorError as exc:
            if exc.action is None and args_action:
                exc.action = f"{connector}.{args_action}"
            raise NotebookError.from_error(exc) from None
        except KeyboardInterrupt:  # the action's transaction rolled back, its partial file removed
            action = f"{connector}.{args_action.replace('-', '_')}" if args_action else connector
            raise stopped(f"{action} stopped: what it was writing was not kept") from None
        result = output if args.df and spec.name == "etl.pull" else displayable(spec.name, output, resources, payload)
        for name in (args.out, args.df if isinstance(args.df, str) and spec.name == "etl.pull" else None):
            if name:
                self.shell.user_ns[name] = result
        out = args.out or (args.df if isinstance(args.df, str) and spec.name == "etl.pull" else None)
        self.notify(MagicCall(spec.name, payload, output, out, args.df, placeholders=tuple(placeholders)))
        return None if hidden else result

    def _call(self, spec: ActionSpec, args: Any, payload: Any, resources: Mapping[str, Any],
              namespace: Mapping[str, Any]) -> Any:
        if not args.df:
            return run_action(spec, payload, resources)
        if not isinstance(payload, Mapping):
            raise InputError(f"input must be a JSON object, got {type(payload).__name__}", action=spec.name)

        if spec.name == "etl.push":
            if not isinstance(args.df, str):
                raise InputError("--df needs the DataFrame's variable name: %etl push --df NAME", action=spec.name)
            if args.df not in namespace:
                raise InputError(f"--df: no variable named {args.df!r}", action=spec.name)
            return push_frame(namespace[args.df], resources, payload)
        if spec.name == "etl.pull":
            return pull_frame(payload, resources)
        raise InputError("--df works with %etl push and %etl pull only", action=spec.name)

    # -- %connectors ---------------------------------------------------------------------------------
    @line_magic
    def connectors(self, line: str = "") -> Any:
        """Show or change the resources the magics use.

        %connectors                         what is in use (secrets masked)
        %connectors use MODULE:defs         the resources of a dagster Definitions (``use env``: environment),
                                            e.g. ``connector_ops.pipelines:defs``
        %connectors set database_url=…      session settings: resource fields or environment variables
        %connectors reset                   back to the environment, no session settings
        %connectors add-file PATH [--name NAME] [-o VAR]   store a local file as a platform file
        """
        try:
            words, hidden = line_words(line)
            result = self._connectors_command(line, words)
        except ConnectorError as exc:
            raise NotebookError.from_error(exc) from None
        return None if hidden else result

    def _connectors_command(self, line: str, words: list[str]) -> Any:
        command, rest = (words[0], words[1:]) if words else ("", [])
        if command == "":
            return self.session.status()
        if command == "use" and len(rest) == 1:
            self.session.use(rest[0])
            return self.session.status()
        if command == "set":
            self.session.set(rest)
            return self.session.status()
        if command == "reset" and not rest:
            self.session.reset()
            return self.session.status()
        if command == "add-file":
            return self._add_file(rest)
        raise SessionError(f"unknown %connectors command {line.strip()!r}; "
                           "use: (nothing), use TARGET, set NAME=VALUE…, reset, add-file PATH")

    def _add_file(self, words: list[str]) -> Any:
        parser = WordsParser("%connectors add-file", action="connectors")
        parser.add_argument("path")
        parser.add_argument("--name")
        parser.add_argument("--content-type")
        parser.add_argument("-o", "--out", type=python_name)
        args = parser.parse_args(words)
        resources = self.session.resources(["platform_files"])
        try:
            descriptor = resources["platform_files"].add_file(args.path, name=args.name,
                                                              content_type=args.content_type)
        except Exception as exc:
            from connector_ops.kernel.errors import ConnectorOpsError

            status = exc.status if isinstance(exc, ConnectorOpsError) else 500
            raise ConnectorError(status, {"message": str(exc)}, action="files.add") from None
        result = displayable("files.add", descriptor.to_json(), resources)
        if args.out:
            self.shell.user_ns[args.out] = result
        self.notify(MagicCall("files.add", {"name": args.name, "contentType": args.content_type},
                              descriptor.to_json(), args.out, path=str(os.path.abspath(args.path))))
        return result


def load_ipython_extension(ipython: Any) -> None:
    """The action magics (``%load_ext connector_ops`` loads these and ``%pipeline``)."""
    import atexit

    magics = ConnectorMagics(ipython)
    ipython.register_magics(magics)
    atexit.register(magics.session.close)  # tear resources down before the interpreter does


def unload_ipython_extension(ipython: Any) -> None:
    instance = ConnectorMagics.instance_in(ipython)
    if instance is not None:
        instance.session.close()
