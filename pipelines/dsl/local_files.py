"""The local files a pipeline's steps name with ``${file:path}``: part of the version of the pipeline.

A step stores such a file as a platform file when it runs, reading it then. The pipeline's digest (the job
tag ``connector_ops/pipeline_digest``, which every step compares with its run's) promises that a step runs
the version of the pipeline its run was launched with, or refuses with a 409: so the digest covers the
content of these files too (read when the file is loaded), and the step storing one checks, as it copies it,
that its content is still the one its own process loaded — else a run launched, then the referenced file
edited, would run the new content without notice.

Hashing a large file at every load is slow, so the digests are cached by the file's stat
(:mod:`.digest_cache`); an edited file is hashed again, so the digest is always that of the content on disk.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from connector_ops.pipelines.dsl import references as r
from connector_ops.pipelines.dsl.digest_cache import digest_cache
from connector_ops.pipelines.dsl.model import Step


def referenced_paths(templates: Iterable[Any]) -> list[str]:
    """The paths of the ``${file:path}`` references in ``templates``, each once, in order of appearance."""
    paths = (ref.path[0] for template in templates for _loc, ref, _exact in r.find_refs(template) if ref.is_file)
    return list(dict.fromkeys(paths))


def file_digests(steps: Iterable[Step], base_dir: str) -> dict[str, str]:
    """``path -> content digest`` of every ``${file:path}`` in the steps' inputs (and foreach sources) that
    names a readable file (one that does not is the validator's problem, or the step's error when it runs)."""
    templates = [t for step in steps for t in (step.input, step.foreach.virtual_file_id if step.foreach else None)]
    paths = {rel: Path(base_dir) / rel for rel in referenced_paths(templates)}
    files = {rel: path for rel, path in paths.items() if path.is_file()}
    if not files:  # the cache file is read only by a pipeline that has files to look up in it
        return {}
    with digest_cache() as cache:
        return {rel: cache.digest(path) for rel, path in files.items()}
