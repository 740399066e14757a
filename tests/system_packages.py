"""Real services the suite needs from the operating system (a browser, a broker), installed on demand.

The README promises that its test command alone sets up a fresh machine, so a test that needs a program
the Python install cannot bring (Debian's ``chromium`` and its ``chromedriver``, ``redis-server``) asks for
it here: if the program is missing and we can install Debian packages (root, ``apt-get`` present), they are
installed from the registries; otherwise the test fails under ``CI=true`` (CI must run these tests, never
pass without them) and is skipped elsewhere with the command that would install them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading

import pytest

_lock = threading.Lock()
_tried: set[tuple[str, ...]] = set()


def _apt_install(packages: tuple[str, ...]) -> str | None:
    """Install ``packages`` with apt-get; ``None`` on success, else why not."""
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        return "apt-get is not available to this user"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "--no-install-recommends",
                                                  *packages]):
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
        if done.returncode != 0:
            return f"`{' '.join(command)}` failed: {done.stderr.strip()[-500:]}"
    return None


def require_programs(programs: dict[str, str], packages: tuple[str, ...]) -> dict[str, str]:
    """Paths of ``programs`` (name -> the first of its ``|``-separated executable names found), installing
    Debian ``packages`` once per session when one is missing."""
    def find() -> dict[str, str | None]:
        return {name: next((p for n in names.split("|") if (p := shutil.which(n))), None)
                for name, names in programs.items()}

    found = find()
    if all(found.values()):
        return found  # type: ignore[return-value]
    with _lock:
        why = None
        if packages not in _tried:
            _tried.add(packages)
            why = _apt_install(packages)
        found = find()
    missing = [name for name, path in found.items() if not path]
    if not missing:
        return found  # type: ignore[return-value]
    message = (f"{' and '.join(missing)} not installed (Debian: apt-get install {' '.join(packages)})"
               + (f"; {why}" if why else ""))
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"these tests must run under CI=true: {message}")
    pytest.skip(message)
