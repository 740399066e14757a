"""``retry:`` in a pipeline file (per step, or for every step at the top level) and its ``RetryPolicy``.

    retry: {max_retries: 3, delay: 2, backoff: exponential}

``max_retries`` (whole number, 0–100), ``delay`` (seconds before the first retry, optional) and
``backoff`` (``exponential`` or ``linear``, optional; needs ``delay``). A step's own ``retry`` replaces
the pipeline's. Dagster retries a failed step only when the failure allows it, and action failures allow
it only when they are transient (see ``ConnectorError.retryable``).
"""

from __future__ import annotations

import math
from typing import Any, overload

import dagster as dg

from connector_ops.pipelines.dsl.model import Retry
from connector_ops.pipelines.dsl.sections import Report, known_mapping, whole_number

RETRY_KEYS = ("max_retries", "delay", "backoff")
BACKOFFS = {"exponential": dg.Backoff.EXPONENTIAL, "linear": dg.Backoff.LINEAR}
MAX_RETRIES = 100



def parse_retry(raw: Any, path: tuple[str | int, ...], report: Report) -> Retry | None:
    """The ``retry`` mapping at ``path``, or ``None`` (absent or wrong; ``report`` gets every problem)."""
    if raw is None:
        return None
    shape = "`retry` must be a mapping: {max_retries: N, delay: seconds, backoff: exponential|linear}"
    ok = known_mapping(raw, path, "retry", RETRY_KEYS, shape, report)
    if ok is None:
        return None
    count = whole_number(raw.get("max_retries"))
    if count is None or not 0 <= count <= MAX_RETRIES:
        report((*path, "max_retries"), f"`max_retries` is required: a whole number from 0 to {MAX_RETRIES}")
        ok = False
    delay = raw.get("delay")
    if delay is not None and (isinstance(delay, bool) or not isinstance(delay, int | float)
                              or not 0 <= delay < math.inf):  # NaN fails too (.nan, .inf: a wait for ever)
        report((*path, "delay"), "`delay` must be a number of seconds, 0 or more")
        ok = False
    backoff = raw.get("backoff")
    if backoff is not None:
        if backoff not in BACKOFFS:
            report((*path, "backoff"), f"`backoff` must be one of {', '.join(BACKOFFS)}, got {backoff!r}")
            ok = False
        elif delay is None:
            report((*path, "backoff"), "`backoff` needs `delay` (the first wait it grows from)")
            ok = False
    if not ok or count is None:  # (no count: not ok either)
        return None
    return Retry(max_retries=count, delay=float(delay) if delay is not None else None, backoff=backoff)


@overload
def retry_policy(retry: Retry) -> dg.RetryPolicy: ...


@overload
def retry_policy(retry: Retry | None) -> dg.RetryPolicy | None: ...


def retry_policy(retry: Retry | None) -> dg.RetryPolicy | None:
    """Dagster's policy for a parsed ``retry`` (``None`` when there is none)."""
    if retry is None:
        return None
    return dg.RetryPolicy(max_retries=retry.max_retries, delay=retry.delay,
                          backoff=BACKOFFS[retry.backoff] if retry.backoff else None)
