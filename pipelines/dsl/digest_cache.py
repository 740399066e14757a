"""The SHA-256 of a ``${file:…}`` file, hashed once per content rather than once per process that loads it.

Every load of a pipeline hashes the local files it references (:mod:`.local_files`): the code server, each
run worker, each step's process, every ``connector-ops pipeline run/validate``. A 3 GB lookup file costs
seconds each time. The digests are kept in ``<CONNECTOR_OPS_HOME>/file_digests.json``, which the code server
and the processes it starts share (a Celery worker on another host has its own home, so its own cache).

An entry is reused only while the file's stat is the one it was hashed at — device, inode, size, mtime_ns and
ctime_ns, as git's index — so any write, rename over it or ``os.utime`` (which moves the ctime, whatever it
sets the mtime to) makes it hash again. Git's "racy" rule covers writes the timestamps cannot show: a file
whose mtime or ctime is less than :data:`RACY_NS` older than the moment its hashing began may be written again
within the same timestamp tick, so such a digest is never kept (the next load hashes it again). The cache is
only ever a shortcut: unreadable, corrupt or not writable, it is ignored (and rewritten when it can be), never
an error; writers replace it whole (write then rename), so a lost update between processes costs a re-hash.
The step that stores a file still hashes it as it copies it (:func:`.step_ops.unchanged_file_check`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connector_ops.environment import Env
from connector_ops.kernel.atomic import atomic_write, sweep_leftovers
from connector_ops.kernel.disk import min_free_disk
from connector_ops.kernel.errors import ConnectorOpsError

log = logging.getLogger(__name__)

#: the cache's file name in ``CONNECTOR_OPS_HOME``
CACHE_NAME = "file_digests.json"
#: a digest is kept only if the file's mtime and ctime were at least this much older than its hashing (ns)
RACY_NS = 2_000_000_000
#: the most entries kept (the most recently hashed); entries of files gone or changed are dropped first
MAX_ENTRIES = 1000
#: the layout of the cache file; another one is ignored
FORMAT = 1

#: (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns): what must not have moved for a digest to stand
Signature = tuple[int, int, int, int, int]


def signature(st: os.stat_result) -> Signature:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class Entry:
    """The digest of a file as it was when its hashing began at ``hashed_at_ns`` (wall clock)."""

    stat: Signature
    sha256: str
    hashed_at_ns: int

    def settled(self) -> bool:
        """Not racy: the file's timestamps were well before its hashing, so any later write moves one of them."""
        return max(self.stat[3], self.stat[4]) <= self.hashed_at_ns - RACY_NS

    def stands_for(self, current: Signature | None) -> bool:
        """Whether the entry is still true of a file whose signature is ``current`` (``None``: it is gone)."""
        return self.stat == current and self.settled()

    def to_json(self) -> dict[str, Any]:
        return {"stat": list(self.stat), "sha256": self.sha256, "hashed_at_ns": self.hashed_at_ns}

    @classmethod
    def from_json(cls, raw: Any) -> Entry | None:
        """The entry, or ``None`` for anything that is not one (a corrupt or hand-edited cache)."""
        try:
            stat = tuple(int(v) for v in raw["stat"])
            sha256, hashed_at = raw["sha256"], int(raw["hashed_at_ns"])
        except (TypeError, KeyError, ValueError):
            return None
        if len(stat) != 5 or not isinstance(sha256, str) or len(sha256) != 64:
            return None
        return cls(stat, sha256, hashed_at)


def hash_file(path: Path) -> tuple[str, Entry | None]:
    """The SHA-256 of the file's bytes (read in chunks: a referenced CSV may be large), and the entry that may
    stand for it later: ``None`` when the file moved while it was read, or is racy."""
    started = time.time_ns()
    with path.open("rb") as file:
        before = signature(os.fstat(file.fileno()))
        digest = hashlib.file_digest(file, "sha256").hexdigest()
        after = signature(os.fstat(file.fileno()))
    entry = Entry(after, digest, started)
    return digest, entry if before == after and entry.settled() else None


def read_entries(cache_file: Path) -> dict[str, Entry] | None:
    """The entries of the cache file; ``{}`` when there is none yet, ``None`` when it cannot be used."""
    try:
        raw = json.loads(cache_file.read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):  # unreadable, not JSON, not UTF-8
        return None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT or not isinstance(raw.get("entries"), dict):
        return None
    entries = {path: Entry.from_json(value) for path, value in raw["entries"].items()}
    return {path: entry for path, entry in entries.items() if entry is not None}


def current_signature(path: str) -> Signature | None:
    try:
        return signature(os.stat(path))
    except OSError:
        return None


def pruned(entries: dict[str, Entry]) -> dict[str, Entry]:
    """The entries still true of their files (those of files gone or changed dropped), the newest
    :data:`MAX_ENTRIES` of them."""
    alive = [(path, entry) for path, entry in entries.items() if entry.stands_for(current_signature(path))]
    alive.sort(key=lambda item: item[1].hashed_at_ns, reverse=True)
    return dict(alive[:MAX_ENTRIES])


class DigestCache:
    """The digests of one load of a pipeline: looked up in the cache file, which :meth:`save` updates."""

    def __init__(self, cache_file: Path | None) -> None:
        self.cache_file = cache_file
        self.entries = (read_entries(cache_file) if cache_file else None) or {}
        self.hashed: dict[str, Entry | None] = {}  # what this load hashed (None: not to be kept)

    def digest(self, path: Path) -> str:
        """The SHA-256 of the file's content: the cached one if the file has not moved since, else hashed."""
        key = os.path.abspath(path)
        entry = self.entries.get(key)
        if entry is not None and entry.stands_for(current_signature(key)):
            return entry.sha256
        digest, self.hashed[key] = hash_file(path)
        return digest

    def save(self) -> None:
        """Merge what this load hashed into the cache file as it is now (another process may have written
        it since) and replace it. A failure is only logged: the cache is a shortcut."""
        if self.cache_file is None or not self.hashed:
            return
        merged = read_entries(self.cache_file) or {}  # a corrupt one is rewritten
        for key, entry in self.hashed.items():
            if entry is None:
                merged.pop(key, None)
            else:
                merged[key] = entry
        body = {"format": FORMAT, "entries": {path: e.to_json() for path, e in pruned(merged).items()}}
        try:
            sweep_leftovers(self.cache_file.parent)  # a writer killed mid-write left its temporary file
            with atomic_write(self.cache_file, min_free_disk=min_free_disk()) as handle:
                handle.write(json.dumps(body, separators=(",", ":")).encode())
        except (OSError, ConnectorOpsError) as exc:  # read-only home, disk at its floor, a bad floor setting
            log.debug("the file digest cache %s was not written: %s", self.cache_file, exc)


def cache_file() -> Path | None:
    """``<CONNECTOR_OPS_HOME>/file_digests.json``, or ``None`` while the home does not exist: loading a
    pipeline never creates it (it appears when something is first stored)."""
    home = Env().home
    return home / CACHE_NAME if home.is_dir() else None


@contextlib.contextmanager
def digest_cache() -> Iterator[DigestCache]:
    """A :class:`DigestCache` on the home's cache file, saved when the block ends without error."""
    cache = DigestCache(cache_file())
    yield cache
    cache.save()
