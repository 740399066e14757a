"""Dagster Definitions for connector-ops: ``dagster dev -m pipelines`` loads ``defs``.

Resources come from the environment (secrets as ``EnvVar``, so they are read inside runs and never
stored in run config or events); jobs run on embedded defaults (SQLite, local folders) out of the box.
"""

from pipelines.definitions import defs

__all__ = ["defs"]
