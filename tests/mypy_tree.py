"""mypy over the package as it installs: ``.venv/bin/python -m tests.mypy_tree [mypy options]``.

``pyproject.toml``'s ``package-dir`` maps the repository's top-level ``resources/`` and ``pipelines/`` into
``connector_ops.resources`` / ``connector_ops.pipelines``. mypy cannot follow that mapping, neither from the
checkout (it would see top-level ``resources`` and ``pipelines`` packages) nor from the editable install (an
import hook, which mypy does not run). So this stages the installed layout as symlinks in a folder of its own,
runs mypy there with the repository's ``[tool.mypy]`` settings, and prints its messages with the repository's
paths (``resources/…`` rather than ``connector_ops/resources/…``), so they point at the files to edit.

The staged tree and mypy's incremental cache stay in one folder between runs (``.mypy_cache/`` by hand,
pytest's cache for tests/test_typing.py): the tree's paths do not change, so the cache holds, and mypy checks
each cached file against its size, time and hash, so a stale cache is never believed.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "connector_ops"


def package_dirs(root: Path = ROOT) -> dict[str, Path]:
    """Installed package name -> repository folder, from ``[tool.setuptools] package-dir``."""
    mapping = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {name: root / folder for name, folder in mapping.items()}


def stage(tree: Path, root: Path = ROOT) -> None:
    """Lay out ``tree/connector_ops`` as the package installs: each entry of ``connector_ops/`` linked, and each
    mapped subpackage (``resources``, ``pipelines``) linked in under its installed name. Laid anew each run, so
    a module added or removed at the top of ``connector_ops/`` is seen; a folder is linked whole."""
    dirs = package_dirs(root)
    top = tree / PACKAGE
    if tree.exists():
        shutil.rmtree(tree)
    top.mkdir(parents=True)
    mapped = {name.removeprefix(PACKAGE + "."): folder for name, folder in dirs.items() if name != PACKAGE}
    for entry in dirs[PACKAGE].iterdir():
        if entry.name not in mapped and entry.name != "__pycache__":
            (top / entry.name).symlink_to(entry)
    for name, folder in mapped.items():
        (top / name.replace(".", os.sep)).symlink_to(folder, target_is_directory=True)


def repository_paths(output: str, root: Path = ROOT) -> str:
    """mypy's messages with the staged paths (``connector_ops/resources/x.py:3:``) as the repository's
    (``resources/x.py:3:``)."""
    dirs = package_dirs(root)
    # the longest installed name first, so connector_ops.resources wins over connector_ops
    staged = sorted(dirs, key=len, reverse=True)
    pattern = re.compile("^(" + "|".join(re.escape(name.replace(".", "/")) + "/" for name in staged) + ")",
                         re.MULTILINE)
    folders = {name.replace(".", "/") + "/": folder.relative_to(root).as_posix() + "/" for name, folder in dirs.items()}
    return pattern.sub(lambda match: folders[match.group(1)], output)


def run_mypy(work: Path, options: Sequence[str] = (), root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """mypy over the staged package in ``work`` (its tree and cache), its output in the repository's paths. One
    run at a time per ``work`` (a lock): another would lay the tree anew under it."""
    work.mkdir(parents=True, exist_ok=True)
    tree = work / "tree"
    command = [sys.executable, "-m", "mypy", "--config-file", str(root / "pyproject.toml"),
               "--cache-dir", str(work / "cache"), *options, "-p", PACKAGE]
    with open(work / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stage(tree, root)
        # cwd: mypy finds the staged package in the current folder (before the editable install's import hook,
        # which it does not run), and prints paths relative to it
        done = subprocess.run(command, cwd=tree, capture_output=True, text=True, timeout=1800)
    return subprocess.CompletedProcess(done.args, done.returncode, repository_paths(done.stdout, root),
                                       repository_paths(done.stderr, root))


def main(argv: Sequence[str] | None = None) -> int:
    done = run_mypy(ROOT / ".mypy_cache" / "connector_ops", sys.argv[1:] if argv is None else argv)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
