"""The names a pipeline file gives Dagster — job and step names, asset owners — and what Dagster refuses.

Dagster checks them only when a definition is built, and then throws, which would surface as a 500 without
file:line; so the validator and the JSON Schema both check them here, against the same rules.
"""

from __future__ import annotations

import re
import unicodedata

from dagster._core.definitions.assets.job.asset_job import IMPLICIT_ASSET_JOB_NAME, is_reserved_asset_job_name
from dagster._core.definitions.target import ANONYMOUS_ASSET_JOB_PREFIX
from dagster._core.definitions.utils import DISALLOWED_NAMES

#: the end of a pattern, read alike by Python's ``re`` and a JSON Schema validator (ECMA 262): Python's ``$``
#: also matches before a final line break, and so took the job name ``"job\n"`` (YAML's ``name: |``), which
#: Dagster then refused for the whole pipeline. Python code matches these patterns with ``fullmatch`` too.
END = r"(?!\n)$"
#: letters, digits and _, not starting with a digit (job, op and group names)
NAME = rf"^[A-Za-z_][A-Za-z0-9_]*{END}"
#: names Dagster refuses for a job or an op: Python keywords and its own (``input``, ``type``, ``config``…)
RESERVED_NAMES: frozenset[str] = frozenset(DISALLOWED_NAMES)
#: job names Dagster keeps for its asset jobs (``__ASSET_JOB``, ``__anonymous_asset_job…``): it accepts such a
#: job when the job is built and refuses it only in the Definitions — the whole code location, every job,
#: schedule and sensor with it. As a JSON Schema pattern; :func:`is_reserved_job_name` is Dagster's own test.
RESERVED_JOB_NAMES = rf"^({re.escape(IMPLICIT_ASSET_JOB_NAME)}$|{re.escape(ANONYMOUS_ASSET_JOB_PREFIX)})"
#: an asset owner as Dagster accepts it: an e-mail address or ``team:NAME``
OWNER = rf"^(team:.+|[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{{2,7}}){END}"

_OWNER = re.compile(OWNER)
_NAME = re.compile(NAME)
#: letters NFKD does not take apart into an ASCII letter and accents
_LETTERS = str.maketrans({"ß": "ss", "æ": "ae", "Æ": "AE", "œ": "oe", "Œ": "OE", "ø": "o", "Ø": "O",
                          "ł": "l", "Ł": "L", "đ": "d", "Đ": "D", "þ": "th", "Þ": "Th"})


def is_name_character(char: str) -> bool:
    """Whether Dagster takes ``char`` in a job, op or group name: an ASCII letter, digit or ``_``
    (``str.isalnum`` alone would also take ``é`` or ``ß``, which Dagster refuses)."""
    return char.isascii() and (char.isalnum() or char == "_")


def name_like(text: str) -> str | None:
    """A valid name close to ``text``, or None: accents dropped (``ventes_été`` -> ``ventes_ete``), every
    other run of characters Dagster refuses -> one ``_`` (``weekly-report`` -> ``weekly_report``), a leading
    digit prefixed (``2024_sales`` -> ``p_2024_sales``), a name Dagster reserves suffixed
    (``class_pipeline``). What the scaffolder names a pipeline after its folder, and what the validator
    suggests for a name it refuses."""
    ascii_text = "".join(c for c in unicodedata.normalize("NFKD", text.translate(_LETTERS))
                         if not unicodedata.combining(c))
    fixed = re.sub(r"[^A-Za-z0-9]+", "_", ascii_text).strip("_")
    if fixed[:1].isdigit():
        fixed = f"p_{fixed}"
    if fixed in RESERVED_NAMES:
        fixed = f"{fixed}_pipeline"
    return fixed if fixed and _NAME.fullmatch(fixed) else None


def is_reserved_job_name(name: str) -> bool:
    """Whether Dagster keeps ``name`` for its asset jobs (a job of ours so named would take the location down)."""
    return is_reserved_asset_job_name(name)


def is_owner(text: str) -> bool:
    """Whether Dagster takes ``text`` as an asset owner."""
    return bool(_OWNER.fullmatch(text))


def why_not_a_name(name: object) -> str:
    """Why ``name`` (given, not a valid :data:`NAME`) is not one, in the user's words: the characters Dagster
    refuses, a leading digit, not text, empty. The job-name and step-id problems both say it."""
    if not isinstance(name, str):
        return f"it is a {type(name).__name__}, not text"
    bad = sorted({c for c in name if not is_name_character(c)})
    if bad:
        return f"it contains {', '.join(repr(c) for c in bad)}"
    return "it starts with a digit" if name[:1].isdigit() else "it is empty"
