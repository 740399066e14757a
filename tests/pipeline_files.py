"""Pipeline files written by tests: YAML text (indented like the test's code) into a temporary folder."""

from __future__ import annotations

import textwrap
from pathlib import Path


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path
