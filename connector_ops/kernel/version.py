"""The installed connector-ops version: what a store's layout stamp records and what a run is launched with
(every process of a deployment compares its own with them)."""

from __future__ import annotations

import functools
import importlib.metadata


@functools.cache
def package_version() -> str:
    try:
        return importlib.metadata.version("connector-ops")
    except importlib.metadata.PackageNotFoundError:  # a source tree that is not installed
        return "unknown"
