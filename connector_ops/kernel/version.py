"""The installed connector-ops version: what a store's layout stamp records and what a run is launched with
(every process of a deployment compares its own with them)."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
from pathlib import Path

#: the packages whose sources make up connector-ops: installed inside ``connector_ops`` from a wheel, three
#: folders side by side in a source tree (pyproject.toml's ``package-dir``)
PACKAGES = ("connector_ops", "connector_ops.pipelines", "connector_ops.resources")


@functools.cache
def package_version() -> str:
    try:
        return importlib.metadata.version("connector-ops")
    except importlib.metadata.PackageNotFoundError:  # a source tree that is not installed
        return "unknown"


@functools.cache
def build_version() -> str:
    """``<package version>+<digest of the sources>`` (``0.1.0+3f2a9c01b7de``): what a run is launched with.

    A team that deploys from a git commit installs the same package version from every commit, so the
    version alone let a Celery worker still on last week's code run steps of a run launched by today's code
    server, unnoticed. Two processes with the same sources (one wheel, or one commit) agree on it."""
    return f"{package_version()}+{source_digest()}"


def source_digest(roots: dict[str, Path] | None = None) -> str:
    """The first 12 hex digits of a SHA-256 over every ``.py`` file of the packages (name → folder; default:
    :data:`PACKAGES` where they are installed), each named by its package and its path inside it, so a wheel's
    layout and a source tree's give one digest. ~15 ms, once a process."""
    roots = roots or {name: _root(name) for name in PACKAGES}
    digest = hashlib.sha256()
    for key, path in sorted(_sources(roots).items()):
        digest.update(key.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def _root(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations, f"{package} is not a package"
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def _sources(roots: dict[str, Path]) -> dict[str, Path]:
    """Each source file under the deepest package root that holds it (a wheel nests the three roots)."""
    found: dict[str, Path] = {}
    for name, root in roots.items():
        for path in root.rglob("*.py"):
            owner = max((n for n, r in roots.items() if path.is_relative_to(r)), key=lambda n: len(roots[n].parts))
            if owner == name:
                found[f"{name}/{path.relative_to(root).as_posix()}"] = path
    return found
