"""The virtual-file store's facade stays light: SQLAlchemy loads on the first row-table operation only."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path


def _modules_after(code: str, tmp_path: Path) -> set[str]:
    env = {**os.environ, "CONNECTOR_OPS_HOME": str(tmp_path / "home"),
           "CONNECTOR_OPS_DATABASE_URL": f"sqlite:///{tmp_path / 'vf.db'}"}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code) + "\nimport sys; print(*sys.modules)"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return set(proc.stdout.split())


def test_iterate_over_an_inline_array_loads_no_sqlalchemy(tmp_path: Path) -> None:
    """On a store that exists at this layout: the first call on a new (or older) store creates (upgrades) it
    through SQLAlchemy, as the driver path never creates or changes a table."""
    first = _modules_after("""
        from connector_ops import invoke
        assert invoke("etl.iterate", {"content": [0], "maxBatchSize": 1}) == {"content": [0], "hasNext": False}
    """, tmp_path)
    assert "sqlalchemy" in first
    modules = _modules_after("""
        from connector_ops import invoke
        assert invoke("etl.iterate", {"content": [1, 2, 3], "maxBatchSize": 2}) == {"content": [1, 2], "hasNext": True}
        assert invoke("etl.iterate", {"content": [1, 2, 3], "maxBatchSize": 2}) == {"content": [3], "hasNext": False}
    """, tmp_path)
    assert "connector_ops.resources.virtual_files.store" in modules
    assert not [m for m in modules if m.split(".")[0] == "sqlalchemy"]


def test_a_row_table_operation_loads_the_sql_jobs(tmp_path: Path) -> None:
    modules = _modules_after("""
        from connector_ops import ConnectorError, invoke
        try:
            invoke("etl.iterate", {"content": "no-such-file", "maxBatchSize": 5})
        except ConnectorError as exc:
            assert exc.status == 404
    """, tmp_path)
    assert {"sqlalchemy", "connector_ops.resources.virtual_files.sql_store"} <= modules
