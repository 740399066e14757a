"""A throwaway PostgreSQL server for the tests.

``pgserver`` (PostgreSQL in a wheel) where it installs: it has wheels for CPython 3.11 and 3.12 only and no
sdist, so ``pyproject.toml`` asks for it there alone. Elsewhere (Python 3.13, or pgserver removed) the server
is started from the PostgreSQL binaries on ``PATH`` or in ``pg_config --bindir``. ``initdb`` and ``postgres``
refuse to run as root, so as root they run as the system's ``nobody`` (pgserver makes a user of its own for
the same reason); without such a user the error says to set ``CONNECTOR_OPS_TEST_DATABASE_URL`` instead.
Whoever calls it decides between skipping and failing.
"""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

START_TIMEOUT = 60.0  # seconds for the server to accept connections (two shared cores, many xdist workers)
ROOT_MESSAGE = (
    "initdb refuses to run as root, this system has no user 'nobody' to run it as, and pgserver is not "
    "installed (it has wheels for Python 3.11 and 3.12 only): set CONNECTOR_OPS_TEST_DATABASE_URL to a "
    "PostgreSQL server the tests may create and drop databases on "
    "(postgresql+psycopg://user:password@host/database), or run the tests as another user")


@dataclass
class Server:
    """A running server: its SQLAlchemy URL and how to stop it (and remove its data)."""

    url: str
    stop: Callable[[], None]


def start(prefix: str = "connector-ops-pg-", settings: dict[str, str] | None = None) -> Server:
    """A new server in a new temporary folder, with ``settings`` (``postgresql.conf`` names) applied."""
    try:
        import pgserver  # noqa: F401
    except ImportError:
        return start_from_binaries(prefix, settings)
    return _start_with_pgserver(prefix, settings or {})


def _start_with_pgserver(prefix: str, settings: dict[str, str]) -> Server:
    import pgserver

    folder = tempfile.mkdtemp(prefix=prefix)
    if settings:
        server = pgserver.get_server(folder, cleanup_mode="stop")
        for name, value in settings.items():
            server.psql(f"ALTER SYSTEM SET {name} = {value};")
        server.cleanup()  # settings such as max_connections take a restart
    server = pgserver.get_server(folder, cleanup_mode="delete")
    return Server(server.get_uri().replace("postgresql://", "postgresql+psycopg://", 1), server.cleanup)


def binaries_folder() -> Path:
    """The folder holding ``initdb`` and ``postgres``: ``PATH``'s, else ``pg_config --bindir``'s (Debian keeps
    them in /usr/lib/postgresql/N/bin, off PATH)."""
    found = shutil.which("initdb")
    if found and shutil.which("postgres", path=str(Path(found).parent)):
        return Path(found).parent
    pg_config = shutil.which("pg_config")
    if pg_config:
        folder = Path(subprocess.run([pg_config, "--bindir"], capture_output=True, text=True,
                                     check=True).stdout.strip())
        if (folder / "initdb").exists() and (folder / "postgres").exists():
            return folder
    raise RuntimeError("no PostgreSQL binaries: pgserver is not installed (it has wheels for Python 3.11 and "
                       "3.12 only) and neither PATH nor pg_config --bindir has initdb and postgres; install "
                       "PostgreSQL or set CONNECTOR_OPS_TEST_DATABASE_URL")


def start_from_binaries(prefix: str = "connector-ops-pg-", settings: dict[str, str] | None = None) -> Server:
    """``initdb`` a cluster in a new temporary folder and run ``postgres`` on a Unix socket there only (no TCP
    port to collide with another run's), as this process's child; the data folder goes when it stops."""
    binaries = binaries_folder()
    runner = _runner()
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    if runner:  # the server's folder (data, socket, log) is its user's
        os.chown(folder, runner["user"], runner["group"])
    data = folder / "data"
    # C collation (bytewise order), as pgserver's C.UTF-8 database: tests/test_etl_filters.py relies on it
    subprocess.run([str(binaries / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                    "--no-locale", "--no-sync"], capture_output=True, text=True, check=True, **runner)
    options = {"listen_addresses": "", "unix_socket_directories": str(folder), "fsync": "off", **(settings or {})}
    command = [str(binaries / "postgres"), "-D", str(data)]
    for name, value in options.items():
        command += ["-c", f"{name}={value}"]
    with open(folder / "log", "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   **runner)

    def stop() -> None:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown: sessions ended, no waiting for them
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(folder, ignore_errors=True)

    atexit.register(stop)  # a run stopped before the fixture's teardown leaves no server behind
    url = f"postgresql+psycopg://postgres@/postgres?host={folder}"
    try:
        _wait_until_ready(f"postgresql://postgres@/postgres?host={folder}", process, folder / "log")
    except BaseException:
        stop()
        raise
    return Server(url, stop)


def _runner() -> dict[str, Any]:
    """How ``subprocess`` runs ``initdb`` and ``postgres``: as this process, or as root as ``nobody`` (both
    refuse root); the error of :data:`ROOT_MESSAGE` where there is no such user."""
    if os.geteuid() != 0:
        return {}
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        raise RuntimeError(ROOT_MESSAGE) from None
    return {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}  # none of root's groups


def _wait_until_ready(dsn: str, process: subprocess.Popen[bytes], log: Path) -> None:
    import psycopg

    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"postgres exited {process.returncode}: {log.read_text(errors='replace')[-2000:]}")
        try:
            psycopg.connect(dsn, connect_timeout=5).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
