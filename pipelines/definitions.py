"""The Definitions object: jobs, schedules, sensors and resources from the environment.

Jobs: ``first_etl`` (a hand-written graph of generated ops, :mod:`.first_etl`) and one job per pipeline file
(``pipelines/*.yaml`` and ``$CONNECTOR_OPS_PIPELINES_DIR``, see :mod:`connector_ops.pipelines.catalog`), among them
the demo ``sales_report``. A pipeline's ``schedule:`` becomes a schedule and its ``on_new_file:`` a
drive-folder sensor (both stopped until turned on in the UI or with ``dagster schedule/sensor start``).
"""

from __future__ import annotations

import logging

import dagster as dg

from connector_ops.environment import pin_paths
from connector_ops.pipelines.broken import broken_pipelines_job
from connector_ops.pipelines.catalog import read_catalog
from connector_ops.pipelines.components.shared import shared_definitions
from connector_ops.pipelines.first_etl import first_etl
from connector_ops.pipelines.stand_ins import stand_ins

logger = logging.getLogger(__name__)


def build_definitions() -> dg.Definitions:
    """Compile the pipeline files now (each load re-reads them, so ``dagster dev`` reloads pick up edits).

    A broken file is logged and listed by the ``broken_pipelines`` job; every other job still loads. The
    resources, ``io_manager`` and executor are the very objects every pipeline component of the same
    environment gets (:func:`shared_definitions`), so a ``dg`` project can merge these Definitions with its
    components: Dagster refuses two different objects under one resource key.
    """
    catalog = read_catalog()
    pipelines = catalog.pipelines
    for problem in catalog.problems:
        logger.error("pipeline file not loaded: %s", problem)
    schedules = [p.schedule for p in pipelines if p.schedule is not None]
    sensors = [*(p.sensor for p in pipelines if p.sensor is not None),
               *(sensor for p in pipelines for sensor in p.notify_sensors)]
    extra = []
    if catalog.problems:
        extra = [broken_pipelines_job(catalog.problems)]
        taken = [*(d.name for d in schedules), *(d.name for d in sensors)]
        standing_schedules, standing_sensors = stand_ins(catalog.problems, extra[0], taken=taken)
        schedules += standing_schedules
        sensors += standing_sensors
    shared = shared_definitions()
    return dg.Definitions(
        jobs=[first_etl, *(p.job for p in pipelines), *extra],
        assets=[spec for p in pipelines for spec in p.assets],
        asset_checks=[check for p in pipelines for check in p.checks],
        schedules=schedules,
        sensors=sensors,
        resources=shared.resources,  # from the environment, and the io_manager of outputs every host reads
        executor=shared.executor,  # CONNECTOR_OPS_EXECUTOR: in_process (default), multiprocess, celery
    )


pin_paths()  # one home (and path settings) for this code location and every run and step process it starts
defs = build_definitions()
