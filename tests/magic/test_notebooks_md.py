"""The examples of docs/notebooks.md, run as a user copies them into a fresh notebook."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

DOC = Path(__file__).resolve().parents[2] / "docs" / "notebooks.md"


def record_example() -> list[str]:
    """The cells of the ``%pipeline record`` example, each without its explanation column."""
    section = DOC.read_text().split("## From notebook to scheduled pipeline", 1)[1]
    block = section.split("```\n", 1)[1].split("```", 1)[0]
    return [re.split(r"\s{3,}", line, maxsplit=1)[0] for line in block.splitlines()]


def test_the_record_example_runs_as_copied_in_a_new_folder(ip: Any, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """It read ``data/sales.csv`` from the current folder, which a new user does not have."""
    monkeypatch.chdir(tmp_path)
    cells = record_example()
    for cell in cells[:cells.index("%pipeline show") + 1]:
        ip.run_cell(cell)
    ip.run_cell("%pipeline export north.yaml")
    north = ip.user_ns["north"]["result"]
    assert north and {row["region"] for row in north} == {"North"}
    steps = yaml.safe_load((tmp_path / "north.yaml").read_text())["steps"]
    assert [step["action"] for step in steps] == ["etl.push", "etl.query"]
