"""Dagster Definitions for connector-ops: ``dagster dev -m connector_ops.pipelines`` loads ``defs``.

Resources come from the environment (secrets as ``EnvVar``, so they are read inside runs and never
stored in run config or events); jobs run on embedded defaults (SQLite, local folders) out of the box.

``defs`` is built on first access (PEP 562), not when the package is imported: ``connector-ops
pipeline validate`` (``connector_ops.pipelines.cli``) must keep working, and report the problems, when a pipeline
file is broken — building the Definitions would fail on exactly that file.
"""

from __future__ import annotations

from typing import Any

__all__ = ["defs"]


def __getattr__(name: str) -> Any:
    if name == "defs":
        from connector_ops.pipelines.definitions import defs

        return defs
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "defs"})
