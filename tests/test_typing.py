"""The package's annotations hold: mypy over ``connector_ops`` (with ``resources`` and ``pipelines`` where they
install) reports nothing, with the settings of ``[tool.mypy]`` in ``pyproject.toml``.

The package ships ``py.typed``, so users' type checkers read these annotations; this keeps them true. By hand:
``.venv/bin/python -m tests.mypy_tree`` (tests/mypy_tree.py says why the package is staged first).
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

import pytest

from tests.mypy_tree import ROOT, package_dirs, repository_paths, run_mypy, stage


def test_mypy_finds_no_error_in_the_package(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    # in pytest's cache, kept between runs: mypy's incremental cache (a cold run is about 20 s, a warm one 3 s);
    # without the cache plugin (-p no:cacheprovider), or in a checkout it cannot write to, a cold run in the
    # test's own folder
    cache: pytest.Cache | None = getattr(request.config, "cache", None)
    work = tmp_path
    if cache is not None:
        with contextlib.suppress(OSError):  # (a read-only checkout: pytest itself only warns there)
            kept = cache.mkdir("mypy")
            (kept / "lock").touch()
            work = kept
    done = run_mypy(work)
    status = done.returncode
    assert status == 0, f"mypy (python -m tests.mypy_tree):\n{done.stdout[-20000:]}{done.stderr[-3000:]}"
    assert "Success: no issues found" in done.stdout


def test_the_staged_tree_is_the_installed_layout(tmp_path: Path) -> None:
    """Every module of the package folders is staged once, under its installed name, so mypy checks them all."""
    tree = tmp_path / "tree"
    stage(tree)
    staged = {(Path(folder) / name).relative_to(tree).as_posix()
              for folder, _, names in os.walk(tree, followlinks=True) for name in names if name.endswith(".py")}
    expected = {f"{package.replace('.', '/')}/{p.relative_to(folder).as_posix()}"
                for package, folder in package_dirs().items() for p in folder.rglob("*.py")}
    assert "connector_ops/resources/virtual_files/store.py" in staged
    assert "connector_ops/pipelines/dsl/compiler.py" in staged
    assert staged == expected


def test_messages_name_the_repository_files() -> None:
    output = ("connector_ops/resources/virtual_files/store.py:3: error: x  [arg-type]\n"
              "connector_ops/pipelines/gc.py:4:5: note: y\n"
              "connector_ops/registry.py:5: error: z  [union-attr]\n")
    assert repository_paths(output) == ("resources/virtual_files/store.py:3: error: x  [arg-type]\n"
                                        "pipelines/gc.py:4:5: note: y\n"
                                        "connector_ops/registry.py:5: error: z  [union-attr]\n")
    assert (ROOT / "resources/virtual_files/store.py").is_file() and (ROOT / "pipelines/gc.py").is_file()


#: ``# type: ignore[code]`` and what follows it on the line
_IGNORE = re.compile(r"#\s*type:\s*ignore\b(\[[^\]]*\])?(.*)$")


def test_every_type_ignore_names_its_error_and_says_why() -> None:
    """An ignore hides one error, named (mypy's ``ignore-without-code``), for a reason written beside it: after
    it on the line, or in a comment line just above. ``warn_unused_ignores`` drops the ones no longer needed."""
    bare = []
    for folder in package_dirs().values():
        for path in sorted(folder.rglob("*.py")):
            lines = path.read_text().splitlines()
            for number, line in enumerate(lines, start=1):
                found = _IGNORE.search(line)
                if found is None:
                    continue
                after = found.group(2).strip()
                said = after.startswith("#") and not after.lstrip("# ").startswith("noqa")
                above = number > 1 and lines[number - 2].strip().startswith("#")
                if not found.group(1) or not (said or above):
                    bare.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert bare == []
