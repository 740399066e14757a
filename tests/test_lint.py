"""The repository stays ruff-clean: the README's test command (what CI runs) fails on a lint finding, so a
change cannot land with one — it is a team standard, and nothing else ran ruff in CI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUFF = [sys.executable, "-m", "ruff", "check", "--no-cache", "--config", str(ROOT / "pyproject.toml")]


def ruff(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RUFF, *map(str, paths)], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_repository_is_ruff_clean():
    checked = ruff(ROOT)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_finding_fails_the_check(tmp_path):
    """The gate above can fail: the same command and settings find an unused import and a line too long."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\nVALUE = " + repr("x" * 130) + "\n")
    checked = ruff(bad)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "F401" in checked.stdout and "E501" in checked.stdout, checked.stdout
