"""``connector-ops``: run actions, manage platform files, and the connectors' own commands.

    connector-ops invoke NAME [JSON | -]     run an action; prints its output as JSON
    connector-ops actions                    list the actions
    connector-ops files add PATH [--name N] [--content-type T]
    connector-ops files serve [--host H] [--port P]

Connector packages add their own command groups (``drive``, ``pipeline``) through ``COMMAND_GROUPS``.
Errors print the spec's error body as JSON on stdout, the status on stderr, and exit 1.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from connector_ops.kernel.errors import ConnectorError, ConnectorOpsError
from connector_ops.registry import ACTIONS, load_all

#: modules with ``add_commands(subparsers)`` adding a command group (missing ones are skipped)
COMMAND_GROUPS = ("connector_ops.drive.cli", "connector_ops.pipelines.cli")


def _print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


def _read_payload(text: str | None) -> Any:
    if text is None:
        return {}
    if text == "-":
        text = sys.stdin.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConnectorError(400, {"message": f"input is not valid JSON: {exc}"}) from None


def cmd_invoke(args: argparse.Namespace) -> None:
    from connector_ops.kernel.progress import reporting_to, tqdm_reporter
    from connector_ops.session import invoke

    with reporting_to(tqdm_reporter if sys.stderr.isatty() else None):
        _print_json(invoke(args.name, _read_payload(args.input)))


def cmd_actions(_args: argparse.Namespace) -> None:
    load_all()
    for name, spec in sorted(ACTIONS.items()):
        print(f"{name:40s} {spec.summary}")


def _files() -> Any:
    from connector_ops.environment import resources_for

    return resources_for(["platform_files"])["platform_files"]


def cmd_files_add(args: argparse.Namespace) -> None:
    _print_json(_files().add_file(args.path, name=args.name, content_type=args.content_type).to_json())


def cmd_files_serve(args: argparse.Namespace) -> None:
    from connector_ops.resources.file_server import serve

    store = _files()
    url = urlsplit(store.file_server_url)
    host = args.host or url.hostname or "127.0.0.1"
    port = args.port or url.port or (443 if url.scheme == "https" else 80)
    print(f"serving {store.files_dir} at http://{host}:{port}/files/<id>", file=sys.stderr)
    serve(store, host, port)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="connector-ops", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("invoke", help="run an action with a JSON input")
    p.add_argument("name", help="action name, e.g. etl.push")
    p.add_argument("input", nargs="?", help="the JSON input, or - to read it from stdin")
    p.set_defaults(func=cmd_invoke)

    sub.add_parser("actions", help="list the actions").set_defaults(func=cmd_actions)

    files = sub.add_parser("files", help="platform files").add_subparsers(dest="files_command", required=True)
    p = files.add_parser("add", help="store a local file as a platform file and print its descriptor")
    p.add_argument("path")
    p.add_argument("--name")
    p.add_argument("--content-type")
    p.set_defaults(func=cmd_files_add)
    p = files.add_parser("serve", help="serve GET /files/<id>")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.set_defaults(func=cmd_files_serve)

    for module in COMMAND_GROUPS:
        try:
            add_commands: Callable[[Any], None] = importlib.import_module(module).add_commands
        except ModuleNotFoundError as exc:
            if not module.startswith(exc.name or "-"):
                raise
            continue
        add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except ConnectorError as exc:
        _print_json(exc.body)
        print(f"{exc.status}: {exc.summary()}", file=sys.stderr)
        return 1
    except ConnectorOpsError as exc:
        body = {"message": str(exc)}
        _print_json(body)
        print(f"{exc.status}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
