"""The names a pipeline file gives Dagster — job and step names, asset owners — and what Dagster refuses.

Dagster checks them only when a definition is built, and then throws, which would surface as a 500 without
file:line; so the validator and the JSON Schema both check them here, against the same rules.
"""

from __future__ import annotations

import re

from dagster._core.definitions.utils import DISALLOWED_NAMES

#: letters, digits and _, not starting with a digit (job, op and group names)
NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
#: names Dagster refuses for a job or an op: Python keywords and its own (``input``, ``type``, ``config``…)
RESERVED_NAMES: frozenset[str] = frozenset(DISALLOWED_NAMES)
#: an asset owner as Dagster accepts it: an e-mail address or ``team:NAME``
OWNER = r"^(team:.+|[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,7})$"

_OWNER = re.compile(OWNER)


def is_owner(text: str) -> bool:
    """Whether Dagster takes ``text`` as an asset owner."""
    return bool(_OWNER.match(text))
