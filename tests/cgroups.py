"""Real cgroups for the tests: a container's CPU quota and memory limit, made by the kernel, not pretended.

:func:`cgroup` makes a child of the test process's own cgroup in the hierarchy holding a controller (v1 here:
``/sys/fs/cgroup/memory``, ``/sys/fs/cgroup/cpu``; v2 where the machine mounts it unified), writes its limit
files, and removes it afterwards; :func:`command_in` starts a command that joins such cgroups before it
runs, so the command and every child it starts live under those limits, as in a container. Where no
hierarchy can be written the test is skipped, and fails under ``CI=true`` (:func:`tests.deployment.missing`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.deployment import missing

#: v1 files whose v2 spelling differs (the tests write the v1 names; :func:`cgroup` translates)
V2_NAMES = {"memory.limit_in_bytes": "memory.max", "memory.memsw.limit_in_bytes": "memory.swap.max"}


def own_folder(controller: str) -> Path | None:
    """The folder of this process's cgroup in the hierarchy holding ``controller``, if one is mounted here."""
    mounts: dict[str, tuple[str, Path]] = {}  # controller ("" for v2) -> (root, mount point)
    with open("/proc/self/mountinfo", encoding="utf-8") as lines:
        for line in lines:
            head, _, tail = line.partition(" - ")
            fields, kind = head.split(), tail.split()
            if kind and kind[0] == "cgroup":
                for name in kind[2].split(","):
                    mounts.setdefault(name, (fields[3], Path(fields[4])))
            elif kind and kind[0] == "cgroup2":
                mounts.setdefault("", (fields[3], Path(fields[4])))
    with open("/proc/self/cgroup", encoding="utf-8") as lines:
        for line in lines:
            number, names, path = line.rstrip("\n").split(":", 2)
            key = controller if controller in names.split(",") else "" if number == "0" and not names else None
            if key is None or key not in mounts:
                continue
            root, point = mounts[key]
            folder = point / path.removeprefix(root).strip("/")
            if key or controller in (folder / "cgroup.controllers").read_text().split():
                return folder
    return None


@contextlib.contextmanager
def cgroup(controller: str, files: Mapping[str, str | int], parent: Path | None = None) -> Iterator[Path]:
    """A new cgroup (under ``parent``, else under this process's own) with ``files`` written into it."""
    base = parent or own_folder(controller)
    if base is None:
        missing(f"no cgroup hierarchy with the {controller} controller is mounted")
    folder = base / f"connector-ops-test-{uuid.uuid4().hex[:8]}"
    try:
        folder.mkdir()
        if folder.parent == own_folder(controller) and not (folder / "cgroup.procs").exists():
            raise OSError("not a cgroup file system")
        for name, value in files.items():
            target = folder / (name if (folder / name).exists() else V2_NAMES.get(name, name))
            target.write_text(str(value))
    except OSError as exc:
        with contextlib.suppress(OSError):
            folder.rmdir()
        missing(f"cannot make a {controller} cgroup under {base}: {exc}")
    try:
        yield folder
    finally:
        _remove(folder)


def command_in(folders: Sequence[Path], argv: Sequence[str]) -> list[str]:
    """``argv`` as a command that first moves itself into each of ``folders`` (one per hierarchy)."""
    joins = "; ".join(f"echo $$ > '{folder}/cgroup.procs'" for folder in folders)
    return ["sh", "-c", f'{joins}; exec "$@"', "sh", *argv]


def memory_limited(limit: int) -> dict[str, int]:
    """The memory cgroup files of a container limited to ``limit`` bytes, swap included (none is used)."""
    return {"memory.limit_in_bytes": limit, "memory.memsw.limit_in_bytes": limit}


def run_limited(argv: Sequence[str], limit: int, **options: Any) -> tuple[subprocess.CompletedProcess, int]:
    """``subprocess.run(argv, **options)`` inside a fresh memory cgroup of ``limit`` bytes, and the OOM kills
    counted there (a process so ended exits by ``SIGKILL``)."""
    with cgroup("memory", memory_limited(limit)) as folder:
        return subprocess.run(command_in([folder], argv), **options), oom_kills(folder)


def oom_kills(folder: Path) -> int:
    """How many processes the kernel's OOM killer ended in this memory cgroup (v1 ``memory.oom_control``,
    v2 ``memory.events``)."""
    for name in ("memory.oom_control", "memory.events"):
        with contextlib.suppress(OSError):
            for line in (folder / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    raise AssertionError(f"{folder} counts no OOM kills (not a memory cgroup?)")


def _remove(folder: Path) -> None:
    """Kill what still runs in ``folder`` and its children, then remove them (the kernel refuses a busy one)."""
    for child in (p for p in folder.iterdir() if p.is_dir()):
        _remove(child)
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(OSError):
            pids = [int(pid) for pid in (folder / "cgroup.procs").read_text().split()]
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
