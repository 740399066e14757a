"""``connector-ops drive …``: the drive connector's own commands (not actions).

    connector-ops drive check-token        can the configured credentials get an access token? (spec 6)
    connector-ops drive login [--save F]   sign in with Google in the browser and print/save the refresh token
    connector-ops drive put PATH [--folder ID] [--name N]   put a local file into the drive in one step
"""

from __future__ import annotations

import re
import sys
import webbrowser
from pathlib import Path

import click

from connector_ops.cli import no_progress_option
from connector_ops.environment import Env
from connector_ops.kernel.atomic import atomic_write


@click.group()
def drive() -> None:
    """Cloud drive: put a local file in, sign-in and credentials."""


@drive.command("check-token")
def check_token() -> None:
    """Check that the drive credentials can obtain an access token."""
    from connector_ops.cli import print_json
    from connector_ops.environment import resources_for

    with resources_for(["drive"])["drive"] as backend:
        print_json(backend.check_token())


@drive.command()
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--folder", "folder_id", metavar="FOLDER_ID", help="the drive folder (default: the root)")
@click.option("--name", help="the file's name in the drive (default: the path's)")
@click.option("--content-type", help="default: guessed from the name")
@no_progress_option
def put(path: str, folder_id: str | None, name: str | None, content_type: str | None, no_progress: bool) -> None:
    """Put the local file PATH into the drive in one step and print its fileId.

    The same as `files add` followed by `invoke drive.upload_file` (and the same action code): on the local
    drive a file copied into its folder by hand is not an item of the drive, so this is how files get in.
    A drive sensor watching the folder sees it on its next tick. Progress goes to stderr as invoke's does."""
    from connector_ops.cli import answered, print_json, running_actions
    from connector_ops.kernel.errors import ConnectorError, ConnectorOpsError
    from connector_ops.session import Session

    with Session() as session, running_actions(not no_progress):
        store = session.resources_for(["platform_files"])["platform_files"]
        try:
            descriptor = store.add_file(path, name=name, content_type=content_type)
        except ConnectorOpsError as exc:
            raise ConnectorError(exc.status, {"message": str(exc)}, action="drive put") from None
        try:
            payload = {"platformFile": descriptor.to_json(), **({"folderId": folder_id} if folder_id else {})}
            uploaded = session.invoke("drive.upload_file", payload)
            answered()  # in the drive: a Ctrl-C while it is printed and the staging copy goes changes nothing
            print_json(uploaded)
        finally:
            store.delete(descriptor.id)  # the drive holds the file now; the staging copy is not needed


def save_env_line(path: Path, name: str, value: str) -> None:
    """Set ``name=value`` in a dotenv file, keeping its other lines; written atomically, mode 0600.

    Earlier settings of ``name`` (also ``export name=…``) are replaced, not left to compete with the new
    one. A symlinked file is written where the link points, so the link (e.g. to a shared secrets file)
    stays a link."""
    target = path.resolve()
    setting = re.compile(rf"^\s*(?:export\s+)?{re.escape(name)}\s*=")
    lines = target.read_text(encoding="utf-8").splitlines() if target.exists() else []
    lines = [line for line in lines if not setting.match(line)] + [f"{name}={value}"]
    with atomic_write(target, file_mode=0o600) as handle:
        handle.write(("\n".join(lines) + "\n").encode())


@drive.command()
@click.option("--save", metavar="ENV_FILE", type=click.Path(dir_okay=False, path_type=Path),
              help="write GOOGLE_REFRESH_TOKEN into this dotenv file (mode 0600)")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="loopback port for Google's answer (0: any free port)")
@click.option("--no-browser", is_flag=True, help="only print the sign-in URL")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=300.0, show_default=True,
              help="seconds to wait for the sign-in")
def login(save: Path | None, port: int, no_browser: bool, timeout: float) -> None:
    """Sign in with Google (loopback OAuth flow) and print or save the refresh token."""
    from connector_ops.resources.drive.google_auth import DEFAULT_TOKEN_URL
    from connector_ops.resources.drive.google_login import DEFAULT_AUTH_URL, require, sign_in

    env = Env()

    def show(url: str) -> None:
        print(f"Open this page to sign in with Google:\n\n  {url}\n", file=sys.stderr)
        if not no_browser:
            webbrowser.open(url)

    token = sign_in(
        client_id=require(env.get("GOOGLE_CLIENT_ID"), "GOOGLE_CLIENT_ID"),
        client_secret=require(env.get("GOOGLE_CLIENT_SECRET"), "GOOGLE_CLIENT_SECRET"),
        auth_url=env.get("GOOGLE_OAUTH_AUTH_URL", DEFAULT_AUTH_URL) or DEFAULT_AUTH_URL,
        token_url=env.get("GOOGLE_OAUTH_TOKEN_URL", DEFAULT_TOKEN_URL) or DEFAULT_TOKEN_URL,
        open_url=show, port=port, timeout_s=timeout,
    )
    if save:
        save_env_line(save, "GOOGLE_REFRESH_TOKEN", token)
        print(f"Signed in; GOOGLE_REFRESH_TOKEN saved to {save}", file=sys.stderr)
    else:
        print(f"GOOGLE_REFRESH_TOKEN={token}")
        print("Signed in; keep this token secret (e.g. append it to your .env file).", file=sys.stderr)
