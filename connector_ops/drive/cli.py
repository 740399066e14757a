"""``connector-ops drive …``: the drive connector's own commands (not actions).

    connector-ops drive check-token        can the configured credentials get an access token? (spec 6)
    connector-ops drive login [--save F]   sign in with Google in the browser and print/save the refresh token
"""

from __future__ import annotations

import argparse
import json
import sys
import webbrowser
from pathlib import Path
from typing import Any

from connector_ops.environment import Env
from connector_ops.kernel.atomic import atomic_write


def cmd_check_token(_args: argparse.Namespace) -> None:
    from connector_ops.environment import resources_for

    with resources_for(["drive"])["drive"] as drive:
        result = drive.check_token()
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")


def save_env_line(path: Path, name: str, value: str) -> None:
    """Set ``name=value`` in a dotenv file, keeping its other lines; written atomically, mode 0600."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    lines = [line for line in lines if not line.startswith(f"{name}=")] + [f"{name}={value}"]
    with atomic_write(path, file_mode=0o600) as handle:
        handle.write(("\n".join(lines) + "\n").encode())


def cmd_login(args: argparse.Namespace) -> None:
    from connector_ops.resources.drive.google_auth import DEFAULT_TOKEN_URL
    from connector_ops.resources.drive.google_login import DEFAULT_AUTH_URL, require, sign_in

    env = Env()

    def show(url: str) -> None:
        print(f"Open this page to sign in with Google:\n\n  {url}\n", file=sys.stderr)
        if not args.no_browser:
            webbrowser.open(url)

    token = sign_in(
        client_id=require(env.get("GOOGLE_CLIENT_ID"), "GOOGLE_CLIENT_ID"),
        client_secret=require(env.get("GOOGLE_CLIENT_SECRET"), "GOOGLE_CLIENT_SECRET"),
        auth_url=env.get("GOOGLE_OAUTH_AUTH_URL", DEFAULT_AUTH_URL) or DEFAULT_AUTH_URL,
        token_url=env.get("GOOGLE_OAUTH_TOKEN_URL", DEFAULT_TOKEN_URL) or DEFAULT_TOKEN_URL,
        open_url=show, port=args.port, timeout_s=args.timeout,
    )
    if args.save:
        save_env_line(Path(args.save), "GOOGLE_REFRESH_TOKEN", token)
        print(f"Signed in; GOOGLE_REFRESH_TOKEN saved to {args.save}", file=sys.stderr)
    else:
        print(f"GOOGLE_REFRESH_TOKEN={token}")
        print("Signed in; keep this token secret (e.g. append it to your .env file).", file=sys.stderr)


def add_commands(subparsers: Any) -> None:
    drive = subparsers.add_parser("drive", help="cloud drive sign-in and credentials")
    sub = drive.add_subparsers(dest="drive_command", required=True)
    sub.add_parser("check-token", help="check that the drive credentials can obtain an access token") \
        .set_defaults(func=cmd_check_token)
    p = sub.add_parser("login", help="sign in with Google (loopback OAuth flow) and print or save the refresh token")
    p.add_argument("--save", metavar="ENV_FILE", help="write GOOGLE_REFRESH_TOKEN into this dotenv file (mode 0600)")
    p.add_argument("--port", type=int, default=0, help="loopback port for Google's answer (default: any free port)")
    p.add_argument("--no-browser", action="store_true", help="only print the sign-in URL")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the sign-in (default 300)")
    p.set_defaults(func=cmd_login)
