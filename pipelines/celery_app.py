"""The Celery app workers run: ``celery -A connector_ops.pipelines.celery_app worker -Q dagster``.

Deployments do not write a wrapper module of their own: this one builds ``dagster-celery``'s app (its
task names and the ``dagster`` queue) with the broker and result backend of
``CONNECTOR_OPS_CELERY_BROKER_URL`` / ``CONNECTOR_OPS_CELERY_BACKEND_URL`` — the same variables the
``celery`` executor reads in the run worker (:mod:`connector_ops.pipelines.executors`), so both sides
always talk to the same broker. A task names the job by the code location's module
(``connector_ops.pipelines``), which the worker imports by name; pipelines are found the same way as on
the code server (the shipped ones and ``CONNECTOR_OPS_PIPELINES_DIR``), so a worker needs that variable
too when the deployment uses it.
"""

from __future__ import annotations

import os

from dagster_celery.executor import CeleryExecutor
from dagster_celery.make_app import make_app
from dagster_celery.tasks import create_execute_job_task, create_resume_job_task, create_task

from connector_ops.environment import EXECUTOR_VARIABLE, pin_home
from connector_ops.pipelines.executors import BACKEND_VARIABLE, BROKER_VARIABLE, celery_settings

pin_home()  # the worker's home, resolved once for the processes that run its steps
os.environ[EXECUTOR_VARIABLE] = "celery"  # what it runs are steps of distributed runs (single-host checks)
celery_settings(os.environ)  # fails with the variable to set, before a worker starts listening nowhere
_broker = os.environ[BROKER_VARIABLE]
app = make_app(CeleryExecutor.for_cli(broker=_broker, backend=os.environ.get(BACKEND_VARIABLE) or _broker).app_args())

execute_plan = create_task(app)
execute_job = create_execute_job_task(app)
resume_job = create_resume_job_task(app)
