"""An IPython shell with ``%load_ext connector_ops`` for the magic tests (JupySQL's testing pattern)."""

from __future__ import annotations

import atexit
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

SALES = Path(__file__).resolve().parents[2] / "pipelines" / "data" / "sales.csv"


class RaisingShell(InteractiveShell):
    """IPython swallows cell errors; tests want them raised (JupySQL's TestingShell)."""

    def run_cell(self, *args: Any, **kwargs: Any) -> Any:
        result = super().run_cell(*args, **kwargs)
        if result.error_in_exec is not None:
            raise result.error_in_exec
        return result


def make_shell(cls: type[InteractiveShell] = RaisingShell) -> InteractiveShell:
    config = Config()
    config.HistoryAccessor.enabled = False
    shell = cls(config=config)
    # every shell registers its exit operations (a namespace reset and a gc.collect()), which also keeps it
    # alive to the end: 141 shells held the test process for 33 s after its last test. Ours write no history
    # and no temporary files, so there is nothing for them to do at exit
    atexit.unregister(shell.atexit_operations)
    shell.run_line_magic("load_ext", "connector_ops")
    return shell


@pytest.fixture
def ip(env: dict[str, str]) -> Iterator[Any]:
    shell = make_shell()
    yield shell
    from connector_ops.magic import unload_ipython_extension

    unload_ipython_extension(shell)
    shell.clear_instance()


@pytest.fixture
def sales(ip: Any) -> dict[str, Any]:
    ip.run_line_magic("connectors", f"add-file {SALES} -o sales")
    return ip.user_ns["sales"]


def html_of(ip: Any, value: Any) -> str:
    data, _ = ip.display_formatter.format(value)
    return data.get("text/html", "")


