"""The public API as a user's tools see it: ``dir()``, IPython's Tab completion, a type checker's marker."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import connector_ops

ROOT = Path(__file__).resolve().parents[1]
LAZY = ["ConnectorError", "Session", "invoke", "pull_frame", "push_frame"]


def test_dir_lists_the_lazy_public_names_before_their_first_use() -> None:
    """In a fresh interpreter, where nothing has resolved the lazy names yet."""
    code = "import connector_ops, sys; print(' '.join(dir(connector_ops)))"
    names = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert set(connector_ops.__all__) <= set(names)
    assert set(LAZY) <= set(dir(connector_ops))


@pytest.mark.parametrize("use_jedi", [True, False], ids=["jedi", "no-jedi"])
def test_ipython_tab_completes_the_public_api(use_jedi: bool) -> None:
    """Through the completer a kernel calls (``completions``, what Jupyter's Tab asks), jedi on and off."""
    from IPython.core.completer import provisionalcompleter
    from IPython.core.interactiveshell import InteractiveShell

    from tests.magic.conftest import make_shell

    shell = make_shell(InteractiveShell)
    try:
        shell.user_ns["connector_ops"] = connector_ops
        shell.Completer.use_jedi = use_jedi

        def complete(text: str) -> set[str]:
            with provisionalcompleter():
                return {c.text.rpartition(".")[2] for c in shell.Completer.completions(text, len(text))
                        if c.type != "none"}  # jedi's '--jedi/ipython--' marker

        assert complete("connector_ops.inv") == {"invoke"}
        assert complete("connector_ops.pu") == {"pull_frame", "push_frame"}
    finally:
        shell.clear_instance()


def test_the_package_ships_its_py_typed_marker() -> None:
    """PEP 561: without ``py.typed`` in the installed package a user's type checker takes connector_ops as
    untyped (every call ``Any``, ``pull_frame(123)`` unflagged). The marker sits in the package, and the
    package data that puts it in the wheel names it (building a wheel here would be too slow)."""
    assert (Path(connector_ops.__file__).parent / "py.typed").is_file()
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in package_data.get("connector_ops", []) + package_data.get("*", [])
