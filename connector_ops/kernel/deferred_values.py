"""Input values an action op reads where it runs, from that process's environment.

A step computed upstream (a YAML pipeline's reference resolver) hands its action op the input fields through
the step-output store, which pickles them into the database until ``connector-ops gc``. A value read from the
environment (``${env.SECRET}``) must not be stored there: the resolver hands over a :class:`Deferred` (the
variable's name, not its value) in place of the fields, and the action op, the one place every action runs,
reads it when it runs (:func:`connector_ops.ops.factory.op_payload`). The processes that run steps have the
same environment (docs/deployment.md), so a Celery worker on another host reads the same value.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any


class Deferred(ABC):
    """A value known by how to read it from an environment (picklable: it is a step output)."""

    @abstractmethod
    def value(self, environ: Mapping[str, str], model: Any = None) -> Any:
        """The value in ``environ``; raises ``InvalidInput`` naming the reference when it cannot be read.
        ``model``: the action's input model the value is for, whose text fields take text as it is read."""

    def named(self) -> Mapping[tuple[str | int, ...], str]:
        """Where in the value (a field's location) a value read from the environment goes -> how a message names
        it instead of showing it (``the value of ${env.TOKEN}``): a step's error is stored in the run's events,
        where the value must not go."""
        return {}
