"""What every pipeline's Definitions share: our resources, the step-output IO manager and the executor.

Dagster merges the Definitions of a ``defs/`` folder's components and refuses two *different* objects under
one resource key (or two executors) — it compares identity. So the components of one load get the very same
objects: built once per environment (resources read ``CONNECTOR_OPS_*`` and the providers' variables when
built), kept for the next component of the same load.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import dagster as dg

from connector_ops.ops.io_manager import step_output_io_manager
from connector_ops.ops.resources import dagster_resources
from connector_ops.pipelines.executors import job_executor


def pipeline_resources() -> dict[str, Any]:
    """Our resources from the environment (secrets as ``EnvVar``) and the IO manager whose step outputs every
    host reads — what ``connector_ops.pipelines.defs`` and every pipeline component provide."""
    return {**dagster_resources(), "io_manager": step_output_io_manager()}


def shared_definitions() -> dg.Definitions:
    """Resources, ``io_manager`` and executor as ``connector_ops.pipelines.defs`` has them, one object each."""
    return _for_environment(frozenset(os.environ.items()))


@functools.lru_cache(maxsize=4)
def _for_environment(environment: frozenset[tuple[str, str]]) -> dg.Definitions:
    del environment  # the cache key: the objects below read os.environ, which it snapshots
    return dg.Definitions(
        resources=pipeline_resources(),
        executor=job_executor(),
    )
