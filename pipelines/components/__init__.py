"""Our Dagster Components: a YAML pipeline in a ``dg`` project's ``defs/`` folder.

This module is the ``dagster_dg_cli.registry_modules`` entry point (pyproject.toml), so ``dg list components``
lists :class:`PipelineComponent` as ``connector_ops.pipelines.components.PipelineComponent`` and a
``defs.yaml`` names it by that type. Importing it builds nothing: it is what ``dg`` imports to list types.
"""

from connector_ops.pipelines.components.pipeline import PipelineComponent

__all__ = ["PipelineComponent"]
