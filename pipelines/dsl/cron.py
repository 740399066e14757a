"""A pipeline's ``schedule``: whether Dagster takes the cron string, and what a step too long for its field does.

Cron never carries a step over into the next unit: ``*/90`` in the minute field is ``0-59/90``, which matches
minute 0 alone, so ``*/90 * * * *`` fires once an hour, not every 90 minutes (so does Dagster, which warns
"Found a cron schedule with an interval greater than the expected range" and fires it hourly). That string is
valid cron, and the editor schema takes it, so the loader takes it too and says what will happen instead
(:func:`step_notices`, shown through :mod:`connector_ops.kernel.notices` with the file and line). Dagster's own
``UserWarning`` is caught where we build schedules (:func:`schedule_definition`): it named a probe schedule the
file never had, came a second time from the real one, and under ``-W error`` made a valid string "invalid".
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any

import dagster as dg

#: the start of Dagster's warning about such a step (``dagster._core.definitions.schedule_definition``)
DAGSTER_STEP_WARNING = r"Found a cron schedule with an interval greater than the expected range"
_MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_MONTH_NAMES = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
                "November", "December"]
_WEEKDAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
_WEEKDAY_NAMES = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_STEP = re.compile(r"^(?P<base>[^/]+)/(?P<step>\d+)$")


@dataclass(frozen=True)
class _Field:
    name: str  # as the notice says it: "minute", "day-of-month"
    low: int
    high: int
    unit: str  # what the step counts, plural: "every 90 minutes"
    cycle: int | None  # the step that does fire every N units (``*/60`` is hourly: every 60 minutes); None: none
    at: str  # where the one value it matches fires, ``{}`` the value: "at minute {} of each hour"
    names: tuple[str, ...] = ()  # the field's words, first one worth ``low``
    shown: tuple[str, ...] = ()  # a value as the notice says it, by number ("January"); else the number


_FIELDS = (
    _Field("minute", 0, 59, "minutes", 60, "at minute {} of each hour"),
    _Field("hour", 0, 23, "hours", 24, "in hour {} of each day"),
    _Field("day-of-month", 1, 31, "days", None, "on day {} of each month"),
    _Field("month", 1, 12, "months", 12, "in {} of each year", tuple(_MONTHS), ("", *_MONTH_NAMES)),
    _Field("day-of-week", 0, 7, "days", 7, "on {} of each week", tuple(_WEEKDAYS), tuple(_WEEKDAY_NAMES)),
)


def schedule_definition(**kwargs: Any) -> dg.ScheduleDefinition:
    """``dg.ScheduleDefinition(**kwargs)`` without Dagster's warning about a step past its field's range: the
    loader has told the user already, at the file's line (:func:`step_notices`). Every other warning shows."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=DAGSTER_STEP_WARNING, category=UserWarning)
        return dg.ScheduleDefinition(**kwargs)


def valid_cron(cron: str) -> bool:
    """Whether Dagster takes ``cron`` as a schedule (it refuses the rest when the schedule is defined).

    Dagster has no public check, so this defines a throwaway schedule. Whatever it warns is ignored here:
    validity is the same under any warning filter (``-W error`` once turned a warning into "not valid")."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            dg.ScheduleDefinition(name="cron_check", cron_schedule=cron, job_name="cron_check")
        except Exception:  # Dagster's refusal, or its parser's on a string too odd to parse
            return False
    return True


def step_notices(cron: str) -> list[str]:
    """What a valid ``cron`` really does, for each step too long for its field to fire twice in it (empty: none).

    A step ``low-high/N`` (``*/N`` is the whole field, ``low/N`` runs to its end) with ``low + N > high``
    matches ``low`` alone, so the next larger unit sets the pace. Dagster warns when ``N > high``; this also
    catches ``30/45`` (minute 30 alone). Not a step of exactly the field's cycle: ``*/60`` minutes is hourly,
    as written."""
    parts = cron.split()
    if len(parts) != len(_FIELDS):  # a macro (``@daily``): no steps
        return []
    notices = []
    for field, part in zip(_FIELDS, parts, strict=True):
        for item in part.split(","):
            low = _single_value(field, item)
            if low is not None:
                shown = field.shown[low] if low < len(field.shown) else str(low)
                step = item.rpartition("/")[2].lstrip("0")
                notices.append(f"`schedule` {cron!r}: `{item}` in the {field.name} field matches {low} only, so "
                               f"cron fires it {field.at.format(shown)} the other fields allow, not every {step} "
                               f"{field.unit}; list the times it should fire, or split it over pipeline files with "
                               "a schedule each")
    return notices


def _single_value(field: _Field, item: str) -> int | None:
    """The one value a stepped ``item`` matches, when its step is too long to match a second; else None."""
    match = _STEP.match(item.lower())
    if match is None:
        return None
    step, base = int(match["step"]), match["base"]
    first, _, last = ("", "", "") if base == "*" else base.partition("-")
    low = field.low if base == "*" else _number(field, first)
    high = field.high if not last else _number(field, last)
    if low is None or high is None or high < low or step == field.cycle or low + step <= high:
        return None
    return low


def _number(field: _Field, text: str) -> int | None:
    """A value of ``field`` written as a number or one of its words (``L``: the 31st); else None."""
    if text == "l" and field.name == "day-of-month":
        return 31
    if text.isdigit():
        return int(text)
    if text in field.names:
        return field.names.index(text) + field.low
    return None
