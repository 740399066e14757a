"""The size of each process's PostgreSQL connection pool, from the environment, read without SQLAlchemy.

Every process of a deployment (the code server, each run or step process, each Celery worker process,
``files serve``, a notebook) holds its own pool, and together they must fit the server's
``max_connections`` (docs/deployment.md#database-connections). Eight Celery workers beside a code server
need smaller pools than one notebook, and a server shared with other teams may give a role few sessions:
so the sizes are settings, read when a process first connects — and checked where settings are read
(:mod:`connector_ops.environment`), which must not pay SQLAlchemy's import for it.
"""

from __future__ import annotations

from collections.abc import Mapping

from connector_ops.kernel.errors import ConfigurationError
from connector_ops.kernel.settings import count_setting

POOL_SIZE_VARIABLE = "CONNECTOR_OPS_DATABASE_POOL_SIZE"
MAX_OVERFLOW_VARIABLE = "CONNECTOR_OPS_DATABASE_MAX_OVERFLOW"
POOL_TIMEOUT_VARIABLE = "CONNECTOR_OPS_DATABASE_POOL_TIMEOUT"
#: connections one action may hold at once: every action of the test suite ran on a pool of 1 + 1 overflow
LEAST_CONNECTIONS = 2


def pool_settings(environ: Mapping[str, str] | None = None) -> dict[str, int]:
    """``create_engine``'s pool arguments: SQLAlchemy's own defaults (5 kept, 10 more while busy, a 30 s
    wait for a free one) unless the environment says otherwise. Fewer than :data:`LEAST_CONNECTIONS` in all
    is refused: a Map would wait for itself until the time-out, and a 503 that says "try again" would not help."""
    settings = {
        "pool_size": count_setting(POOL_SIZE_VARIABLE, 5, least=1, what="connections", environ=environ),
        "max_overflow": count_setting(MAX_OVERFLOW_VARIABLE, 10, least=0, what="connections", environ=environ),
        "pool_timeout": count_setting(POOL_TIMEOUT_VARIABLE, 30, least=1, what="seconds", environ=environ),
    }
    if settings["pool_size"] + settings["max_overflow"] < LEAST_CONNECTIONS:
        raise ConfigurationError(MAX_OVERFLOW_VARIABLE, (
            f"{POOL_SIZE_VARIABLE}={settings['pool_size']} and {MAX_OVERFLOW_VARIABLE}={settings['max_overflow']} "
            f"allow {settings['pool_size'] + settings['max_overflow']} connection, and an action may need "
            f"{LEAST_CONNECTIONS} at once (a Map reads its file on one while it stores its rows on the other)"))
    return settings
