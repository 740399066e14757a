"""The base of every resource (client or store): typed settings, a safe repr and an explicit lifecycle.

Resources are plain Python objects: ``invoke()``, the CLI and the magics build them from the environment
and reuse them for a session (one HTTP client, one OAuth token), Dagster gets them through thin adapters
in the op layer. Whoever builds a resource closes it (``with`` or ``close()``); closing twice is harmless.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict

from connector_ops.kernel.secrets import RedactedRepr


class Resource(RedactedRepr, BaseModel):
    """Settings are pydantic fields; the docstring under each is its description, which the Dagster adapter
    shows (read from the source by the op layer, so plain use never pays for parsing it)."""

    # hide_input_in_errors: a refused setting may be a secret (a database URL with its password), and
    # pydantic's report would quote it
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True, hide_input_in_errors=True)

    def close(self) -> None:
        """Release what the resource holds (connections, HTTP clients, tokens). Override where needed."""

    def held(self, for_process: bool) -> None:
        """Told by whoever built it how long the process-wide state it uses (a store's database engine, shared
        by every resource on that URL) must last: ``for_process`` — the process's life (the process session,
        Dagster's adapters, built and closed per step); else until this resource's ``close`` (a user's
        ``Session``). Nothing by default."""

    def single_host(self) -> str | None:
        """Why this resource's state lives on the host it runs on, and what to configure instead (``None``:
        every host of a deployment reaches it). Steps of a distributed run refuse such a resource."""
        return None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
