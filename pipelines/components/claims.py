"""Names one load's pipeline components take: job names, asset keys, op and graph names.

Dagster refuses two definitions of one name in a code location, but only when it merges the components'
Definitions, and its message names neither component ("Received conflicting AssetSpecs with the same key").
Each component claims its names here as it builds, so the second one to take a name gets our problem, in its
pipeline file and naming the first one — and, like any broken pipeline, fails ``dg check defs`` while a
running code location keeps every other component. One table per load (per Dagster component tree), so a
reload starts afresh; a component built again in the same load replaces its own claims.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagster.components import ComponentLoadContext

from connector_ops.pipelines.catalog import asset_makers, node_names
from connector_ops.pipelines.dsl import CompiledPipeline, PipelineError, Problem


@dataclass
class _Claims:
    """What one component took: job name, asset key -> maker, node name -> (definition, owner)."""

    job: str
    assets: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, tuple[object, str]] = field(default_factory=dict)


_LOADS: weakref.WeakKeyDictionary[Any, dict[Path, _Claims]] = weakref.WeakKeyDictionary()


def claim_names(context: ComponentLoadContext, compiled: CompiledPipeline) -> None:
    """Take ``compiled``'s names for the component at ``context.path``; :class:`PipelineError` when another
    component of the same load has one of them."""
    try:
        load = _LOADS.setdefault(context.component_tree.state_tracker, {})
    except (AttributeError, TypeError):  # a Dagster without that per-load object: Dagster's own check remains
        return
    others = {path: claims for path, claims in load.items() if path != context.path}
    pipeline = compiled.pipeline
    file = Path(pipeline.file)
    owner = next((path for path, claims in others.items() if claims.job == pipeline.name), None)
    if owner is not None:
        raise PipelineError([Problem(pipeline.file, 1, f"job name {pipeline.name!r} is already used by the "
                                                       f"component {owner}")])
    assets = {key: maker for claims in others.values() for key, maker in claims.assets.items()}
    nodes = {name: node for claims in others.values() for name, node in claims.nodes.items()}
    mine = asset_makers(pipeline, file, assets)
    load[context.path] = _Claims(job=pipeline.name, assets=mine, nodes=node_names(compiled, file, nodes))
