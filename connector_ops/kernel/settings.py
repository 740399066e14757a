"""Whole-number settings read from the environment, each refused by name when it is not one.

A deployment sets these in a unit file, a container spec or a Celery worker's environment, where a typo is
found only when the setting is read: the message names the variable and the value it got, so the person
reading a run's failure knows which line of which file to fix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from connector_ops.kernel.errors import ConfigurationError


def count_setting(variable: str, default: int, *, least: int, what: str,
                  environ: Mapping[str, str] | None = None) -> int:
    """The whole number the environment variable ``variable`` holds (``default`` when unset or empty), at
    least ``least``; ``what`` names its unit in the refusal ("batches", "connections", "seconds")."""
    value = (os.environ if environ is None else environ).get(variable) or None
    if value is None:
        return default
    text = value.strip()
    if not (text.isascii() and text.isdigit() and int(text) >= least):
        raise ConfigurationError(variable, f"must be a whole number of {what}, at least {least}, got {value!r}")
    return int(text)


#: seconds between two progress lines written as text (a step's lines in Dagster's log, the command line's
#: lines when stderr is no terminal); each writer has its own default, the variable sets them all
PROGRESS_INTERVAL = "CONNECTOR_OPS_PROGRESS_INTERVAL"


def progress_interval(default: int) -> int:
    """The seconds ``CONNECTOR_OPS_PROGRESS_INTERVAL`` sets, else the writer's ``default``: a deployment
    tunes how chatty its logs are, and a test can ask for a line at every update (``0``)."""
    return count_setting(PROGRESS_INTERVAL, default, least=0, what="seconds")
