"""What the container this process runs in allows it: CPUs and memory, read from its own cgroups.

``os.cpu_count()`` counts the host's cores, not a container's CPU quota, and nothing in the standard library
knows a container's memory limit. Dagster's multiprocess executor, Celery's pool and Arrow's threads size
themselves by the first: a pod allowed 2 CPUs on a 64-core node starts 64 step processes, which the quota then
throttles and whose memory the pod's limit then kills. So whatever we size by the machine asks here instead.

Read as the JVM and Go's runtime read them: the process's cgroup in each hierarchy (``/proc/self/cgroup``),
found where that hierarchy is mounted (``/proc/self/mountinfo``), then the same limit in every ancestor up
to the mount, the smallest winning (a limit set on a parent applies to its children). cgroup v2:
``cpu.max`` and ``memory.max``; v1: ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` and
``memory.limit_in_bytes``. No maintained Python library reads these (psutil reads no cgroup). A file that
is missing or unreadable means no limit there, never an error: outside a container this finds none.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import math
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

#: where the kernel describes the calling process (a parameter for the tests' own trees)
PROC_SELF = Path("/proc/self")
#: a v1 memory limit at least this large is the kernel's "unlimited" (PAGE_COUNTER_MAX pages, rounded)
UNLIMITED_V1 = 1 << 60
_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class Limits:
    """The container's limits; ``None`` where there is none."""

    #: CPUs the quota allows (``1.5``: 150 ms of CPU time per 100 ms)
    cpus: float | None = None
    #: bytes of memory the process and its children may hold together before the kernel reclaims, then kills
    memory: int | None = None


@dataclass(frozen=True)
class _Hierarchy:
    """One mounted cgroup hierarchy holding this process: its controllers and this process's folder in it."""

    version: int
    controllers: frozenset[str]
    mount: Path
    folder: Path

    def up(self) -> Iterator[Path]:
        """The process's folder, then each parent up to the mount point."""
        folder = self.folder
        while True:
            yield folder
            if folder == self.mount or self.mount not in folder.parents:
                return
            folder = folder.parent


def limits(proc: Path = PROC_SELF) -> Limits:
    """The CPU quota and the memory limit of the cgroups ``proc`` (a ``/proc/<pid>``) runs in."""
    hierarchies = list(_hierarchies(proc))
    memory = _smallest(hierarchies, "memory", _memory_v2, _memory_v1)
    return Limits(cpus=_smallest(hierarchies, "cpu", _cpu_v2, _cpu_v1),
                  memory=None if memory is None else int(memory))


@dataclass(frozen=True)
class CpuShare:
    """The CPUs this process can keep busy (:func:`usable_cpus`), and why they are fewer than the host's."""

    count: int
    #: what holds ``count`` below the host's CPUs, which ``os.cpu_count()``, ``multiprocessing`` and Celery's
    #: pool count ("the container's CPU quota is 0.5 CPU"); ``None`` when nothing does, so that a caller
    #: says something only where its number differs from the usual one
    reason: str | None


def usable_cpus(proc: Path = PROC_SELF) -> int:
    """How many CPUs this process can keep busy: those it may run on (its affinity), no more than its
    quota rounded up (a quota of 1.5 CPUs keeps two steps busy half the time each), at least one."""
    return cpu_share(proc).count


def cpu_share(proc: Path = PROC_SELF) -> CpuShare:
    """:func:`usable_cpus`, and the reason when it is fewer than the host's CPUs (what a default sized by it
    tells the user: the number alone would look like a wrong guess of the machine)."""
    host = os.cpu_count() or 1
    try:
        allowed = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - platforms without affinity (macOS)
        allowed = host
    quota = limits(proc).cpus
    cpus = allowed if quota is None else min(allowed, math.ceil(quota))
    cpus = max(cpus, 1)
    if cpus >= host:
        reason = None
    elif quota is not None and cpus < allowed:
        reason = f"the container's CPU quota is {quota:g} CPU{'s' if quota > 1 else ''}"
    else:
        reason = f"this process may run on {allowed} of the host's {host} CPUs"
    return CpuShare(cpus, reason)


def size_arrow_threads() -> None:
    """Lower Arrow's CPU thread pool to :func:`usable_cpus` where it is at Arrow's default, the host's cores
    (``pyarrow.cpu_count()`` reads no cgroup). Its threads decode a Parquet file's columns side by side, each
    with buffers of its own: the Push of a 60-column file of one 200,000-row group (50 MiB) grew its process
    by 540-660 MiB with a pool of 64 threads, 195-200 MiB with 1 (pyarrow 26, SQLite, the same time), under a
    quota that would run no more than one of them at a time anyway. A size someone chose is kept:
    ``OMP_NUM_THREADS`` / ``OMP_THREAD_LIMIT`` (which Arrow reads) or a ``pyarrow.set_cpu_count`` that left
    it at another number than the host's."""
    import pyarrow as pa

    if os.environ.get("OMP_NUM_THREADS") or os.environ.get("OMP_THREAD_LIMIT"):
        return
    host, usable = os.cpu_count(), usable_cpus()
    if pa.cpu_count() == host and host is not None and usable < host:
        pa.set_cpu_count(usable)


#: the variable Arrow chooses its default memory pool by, once, as pyarrow is imported
POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


@functools.cache
def arrow_pool_for_limit() -> None:
    """In a container with a memory limit, Arrow's jemalloc pool instead of its default, mimalloc, which
    keeps more of what it freed. Measured (pyarrow 26, ``benchmarks/bench_memory_limit.py``, BENCHMARKS.md):
    a Push of 1M rows, whose SQLite loader process parses and loads them, needed 144 MiB and completes in
    128; a Pull to Parquet of 1M or 4M rows needed 128–136 MiB and completes in 96.

    Arrow reads ``ARROW_DEFAULT_MEMORY_POOL`` as pyarrow is imported, and only that reaches the pool its C++
    readers and writers allocate from (``pyarrow.set_memory_pool`` changes pyarrow's own conversions: a Pull
    to Parquet so set still needed 112 MiB). So this sets that variable, as a virtual-file store is made,
    before our code imports pyarrow; a process that imported it already keeps its pool, and the processes it
    starts (the SQLite loader) take the variable. A value someone set is kept; nothing is set outside a
    container, nor where the installed pyarrow was built without jemalloc (Arrow would warn at import)."""
    if os.environ.get(POOL_VARIABLE) or limits().memory is None or not _arrow_has_jemalloc():
        return
    os.environ[POOL_VARIABLE] = "jemalloc"


def _arrow_has_jemalloc() -> bool:
    """Whether the installed Arrow was built with jemalloc, from the build's ``config.h``, which pyarrow
    ships; without importing pyarrow (that would choose the pool)."""
    spec = importlib.util.find_spec("pyarrow")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        with contextlib.suppress(OSError):
            return "#define ARROW_JEMALLOC\n" in (Path(folder) / "include/arrow/util/config.h").read_text()
    return False


def _smallest(hierarchies: list[_Hierarchy], controller: str, v2: Callable[[Path], float | None],
              v1: Callable[[Path], float | None]) -> float | None:
    """The smallest limit any folder up the tree of ``controller``'s hierarchy sets (v1 files where the
    controller is mounted as v1, else v2's, where v2 holds it)."""
    found: list[float] = []
    for hierarchy in hierarchies:
        if hierarchy.version == 1 and controller in hierarchy.controllers:
            read = v1
        elif hierarchy.version == 2:  # a controller bound to v1 has no files in v2
            read = v2
        else:
            continue
        found.extend(value for folder in hierarchy.up() if (value := read(folder)) is not None)
    return min(found, default=None)


def _cpu_v2(folder: Path) -> float | None:
    words = (_read(folder / "cpu.max") or "").split()
    if len(words) != 2 or words[0] == "max":
        return None
    return _ratio(words[0], words[1])


def _cpu_v1(folder: Path) -> float | None:
    quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
    if quota is None or period is None:
        return None
    return _ratio(quota, period)


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None  # -1: no quota


def _memory_v2(folder: Path) -> float | None:
    return _bytes(_read(folder / "memory.max"), unlimited="max")


def _memory_v1(folder: Path) -> float | None:
    value = _bytes(_read(folder / "memory.limit_in_bytes"), unlimited="")
    return value if value is not None and value < UNLIMITED_V1 else None


def _bytes(text: str | None, unlimited: str) -> int | None:
    if text is None or text == unlimited:
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value > 0 else None


def _read(path: Path) -> str | None:
    try:  # a path in mountinfo may hold any bytes: kept as they are
        return path.read_text(encoding="utf-8", errors="surrogateescape").strip()
    except OSError:
        return None


def _hierarchies(proc: Path) -> Iterator[_Hierarchy]:
    """Each cgroup hierarchy ``proc`` is in that is mounted where this process sees it."""
    memberships = _read(proc / "cgroup")
    mounts = _read(proc / "mountinfo")
    if memberships is None or mounts is None:
        return
    mounted = list(_cgroup_mounts(mounts))
    for line in memberships.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, names, path = parts
        version = 2 if parts[0] == "0" and names == "" else 1
        controllers = frozenset(name for name in names.split(",") if name)
        for mount_version, mount_controllers, root, point in mounted:
            if mount_version != version or (version == 1 and not controllers & mount_controllers):
                continue
            inside = _inside(root, path)
            if inside is not None:
                yield _Hierarchy(version, controllers, point, point / inside if inside else point)
                break


def _inside(root: str, path: str) -> str | None:
    """``path`` (the process's cgroup) relative to ``root`` (the folder of the hierarchy that is mounted),
    or ``None`` when the mount does not show it (a cgroup namespace's mount shows its own root as ``/``)."""
    if root == "/":
        return path.strip("/")
    if path == root or path.startswith(root.rstrip("/") + "/"):
        return path[len(root):].strip("/")
    return None


def _cgroup_mounts(mountinfo: str) -> Iterator[tuple[int, frozenset[str], str, Path]]:
    """``(version, controllers, root, mount point)`` of each cgroup file system in ``mountinfo``
    (proc(5): ``id parent dev root point options [optional…] - type source super-options``)."""
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, tail_fields = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(tail_fields) < 3:
            continue
        kind = tail_fields[0]
        if kind not in ("cgroup", "cgroup2"):
            continue
        root, point = _unescape(fields[3]), Path(_unescape(fields[4]))
        controllers = frozenset(tail_fields[2].split(",")) if kind == "cgroup" else frozenset()
        yield (2 if kind == "cgroup2" else 1), controllers, root, point


def _unescape(field: str) -> str:
    r"""mountinfo writes a space, tab, newline and backslash in a path as octal escapes (``\040``)."""
    return _ESCAPE.sub(lambda match: chr(int(match[1], 8)), field)
