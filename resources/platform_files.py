"""PlatformFileStore: stored bytes <-> ``platformFile`` descriptors (spec 2.1), and link resolution.

Layout under ``files_dir``: ``<id>`` holds the bytes and ``<id>.json`` the descriptor. Ids are random
hex generated here; a user-supplied name is metadata only and never becomes part of a path. Every file
is written to a temporary name and renamed into place, so a failed write leaves nothing behind.
With ``files_database_url`` set the bytes and descriptors are in that database instead
(:mod:`.platform_file_db`), where every host of a deployment reaches them.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import mimetypes
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, TypeVar
from urllib.parse import urljoin, urlsplit

import httpx
from pydantic import PrivateAttr, field_validator

from connector_ops.kernel.atomic import atomic_write, sweep_due, sweep_leftovers, sweep_unclaimed
from connector_ops.kernel.disk import DEFAULT_MIN_FREE_DISK
from connector_ops.kernel.errors import InvalidInput, NotFound, UpstreamError, host_of, link_shown
from connector_ops.kernel.fence import check_fence
from connector_ops.kernel.forks import per_process, take_own
from connector_ops.kernel.platform_file import (
    PlatformFile,
    check_file_name,
    check_media_type,
    name_from_elsewhere,
    served_media_type,
)
from connector_ops.kernel.replay import Open, fetched_once
from connector_ops.kernel.resource import Resource
from connector_ops.resources.http_bodies import body_of
from connector_ops.resources.http_client import Client, make_client
from connector_ops.resources.link_guard import MAX_REDIRECTS, AllowList, LinkGuard, Resolver, system_resolver
from connector_ops.resources.proxies import DIRECT, ProxyFailure

_ID = re.compile(r"^[0-9a-f]{32}$")
#: the path of a file server's link: ``…/files/<id>`` (what :func:`linked_id` reads)
_FILES_PATH = re.compile(r"(?:^|/)files/([0-9a-f]{32})$")
T = TypeVar("T")
DEFAULT_FILE_SERVER_URL = "http://127.0.0.1:8765"
CHUNK = 1 << 20
#: the stored descriptor's key naming the file of another store it copies (``store copy``:
#: :meth:`PlatformFileStore.copies`)
ORIGIN = "copiedFrom"
#: where :func:`_location_kept` puts a redirect's ``Location`` (``response.extensions``)
LOCATION = "connector_ops.location"


def utc_timestamp(ts: float | None = None) -> str:
    """ISO 8601 with milliseconds and ``Z``, as spec 2.1 shows ``lastModified``."""
    moment = datetime.now(UTC) if ts is None else datetime.fromtimestamp(ts, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


#: types the ``mimetypes`` table lacks (for Parquet, its vendor type ``application/vnd.apache.parquet``)
_OWN_TYPES = {(".ndjson", ".jsonl"): "application/x-ndjson", (".parquet", ".pq"): "application/vnd.apache.parquet"}


def _sweep_undescribed(root: Path) -> None:
    """The data of files whose writer died between putting the data in place and its descriptor (``create``
    renames one, then writes the other): no descriptor, so no inventory, ``gc`` or reader would see it."""
    sweep_unclaimed(root, lambda name, present: not _ID.fullmatch(name) or f"{name}.json" in present)


def guess_content_type(name: str) -> str:
    for suffixes, content_type in _OWN_TYPES.items():
        if name.lower().endswith(suffixes):
            return content_type
    guessed, _ = mimetypes.guess_type(name, strict=False)
    return guessed or "application/octet-stream"


def file_server_url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as the file server's base (``None``: nothing): links are ``{url}/files/<id>``
    and ``files serve`` listens on its host and port, so it must be an http(s) URL with a host and a port
    that exists, and nothing after its path. No ``user:password@``: the base is copied into every link, and
    links are printed, kept in step outputs and Dagster's events, and sent in mails."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # "Port out of range 0-65535", an unclosed "["
        return f"is not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"must be an http(s) URL with a host (http://files.example.org:8765), got {link_shown(url)!r}"
    if parts.username is not None or parts.password is not None:
        return (f"must not carry a user or a password (got {link_shown(url)!r}): it would be copied into every "
                "platform-file link, which outputs, events and mails show")
    if port == 0 or (port is None and parts.netloc.endswith(":")):  # 'http://h:' has a ':' and no port
        return "must have a port from 1 to 65535"
    if parts.query or parts.fragment:
        return "must not have a query or a fragment (links are {url}/files/<id>)"
    return None


def linked_id(link: str) -> str | None:
    """The id ending an http(s) link whose path is ``…/files/<id>`` with a well-formed id, whatever its base
    (``None`` for any other link): the shape of every link a file server of ours makes."""
    try:
        parts = urlsplit(link)
    except ValueError:
        return None
    match = _FILES_PATH.search(parts.path) if parts.scheme in ("http", "https") else None
    return match.group(1) if match else None


def link_base(link: str) -> str:
    """What precedes ``/files/<id>`` in a link of :func:`linked_id`'s shape, as messages show it (no password,
    no query)."""
    return link_shown(link).split("?", 1)[0].rsplit("/files/", 1)[0]


def _checked(check: Callable[[T], T], value: T, field: str) -> T:
    """``check(value)``, its ``ValueError`` a 400 naming ``field`` (the models' checks, for callers of the store)."""
    try:
        return check(value)
    except ValueError as exc:
        raise InvalidInput(field, str(exc)) from None


def clean_name(name: str, field: str = "name") -> str:
    return _checked(check_file_name, name or "", field)


def clean_content_type(content_type: str | None, field: str = "contentType") -> str | None:
    return _checked(check_media_type, content_type, field)


def _as_served(stored: dict, file_id: str) -> dict:
    """A stored descriptor as it may be served and sent on: one written before names and content types were
    checked (a name with half a surrogate pair from a disk name that was not UTF-8, a content type with a
    line break or one that is not ASCII) would break every header and body it went into: the file server
    wrote its headers in Latin-1 and answered 500."""
    stored = dict(stored)
    if isinstance(stored.get("name"), str):
        stored["name"] = name_from_elsewhere(stored["name"], file_id)
    stored["contentType"] = served_media_type(stored.get("contentType"))
    return stored


def _location_kept(response: httpx.Response) -> None:
    """Moves a redirect's ``Location`` out of its headers into ``response.extensions[LOCATION]``.

    httpx builds the next request of a redirect from ``Location`` even when it follows none, and a Location it
    cannot turn into a request raised out of ``send`` as its own error: ``data:…``, ``javascript:…`` or
    ``mailto:…`` an ``InvalidURL`` (a 500), ``http://[::1`` a retryable "cannot reach". The store follows
    redirects itself, each hop checked as a link (:meth:`PlatformFileStore._remote`), so httpx must not see
    the Location at all; the hop's check then refuses what is no http(s) URL with a 400 naming the field."""
    if response.has_redirect_location:
        response.extensions[LOCATION] = response.headers.pop("location")


def _joined(url: str, location: str) -> str:
    """A redirect's target: ``location`` read relative to ``url``; as it is if it is no URL at all (an unclosed
    ``[``), for the hop's check to refuse naming why."""
    try:
        return urljoin(url, location)
    except ValueError:
        return location


class PendingFile:
    """A platform file being written; it exists only once the ``with`` block of ``create`` succeeds."""

    def __init__(self, handle: IO[bytes]) -> None:
        self._handle = handle
        self.size = 0
        self.descriptor: PlatformFile | None = None

    def write(self, data: bytes) -> int:
        self._handle.write(data)
        self.size += len(data)
        return len(data)

    def writable(self) -> bool:
        return True

    def flush(self) -> None:
        self._handle.flush()


class PlatformFileStore(Resource):
    """Keeps platform files under ``files_dir`` and serves them at ``{file_server_url}/files/<id>``."""

    files_dir: str
    """Folder holding the files' bytes (``<id>``) and descriptors (``<id>.json``)."""
    file_server_url: str = DEFAULT_FILE_SERVER_URL
    """Base URL of ``connector-ops files serve``; links are ``{file_server_url}/files/<id>``."""
    http_timeout_s: float = 60.0
    """Timeout in seconds for reading a remote (non-local) link: of each read, and the window in which its
    server must send at least 64 KiB (:mod:`.progress_floor`)."""
    allowed_private_hosts: str = ""
    """Non-public destinations remote links may reach anyway: comma-separated ``host``, ``host:port`` or
    CIDR entries (``CONNECTOR_OPS_ALLOWED_PRIVATE_HOSTS``). Empty: public addresses only."""
    files_database_url: str | None = None
    """Keep the files in this database instead of ``files_dir`` (secret): ``CONNECTOR_OPS_FILES_BACKEND=database``
    uses the virtual-file store's, so every host reads and writes the same files."""
    min_free_disk: int = DEFAULT_MIN_FREE_DISK
    """Bytes of free disk space its writes leave on the disk of ``files_dir`` (``CONNECTOR_OPS_MIN_FREE_DISK``;
    0: no check): a write that would go below stops with a 500 and leaves nothing."""

    _http: tuple[int, Client] | None = PrivateAttr(default=None)  # per process (kernel.forks)
    _swept: bool = PrivateAttr(default=False)
    _resolver: Resolver | None = PrivateAttr(default=None)  # None: the system's (getaddrinfo)
    _database: Any = PrivateAttr(default=None)  # the DatabaseFiles of files_database_url

    @field_validator("file_server_url")
    @classmethod
    def _usable_url(cls, value: str) -> str:
        problem = file_server_url_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("allowed_private_hosts")
    @classmethod
    def _readable_allow_list(cls, value: str) -> str:
        AllowList.parse(value)
        return value

    def keep_leftovers(self) -> None:
        """Leave the crash leftovers of ``files_dir`` alone in this process: its start removes them otherwise
        (:attr:`root`, once an hour). For what must change nothing — ``gc --dry-run`` lists what would go; ``gc``
        without ``--dry-run`` removes them (:meth:`sweep`), or the first start of the store after the hour."""
        self._swept = True

    def set_resolver(self, resolver: Resolver) -> None:
        """Resolve link hosts with ``resolver`` (``(host, port) -> addresses``) instead of the system's:
        a deployment's own name service, or a test's stand-in."""
        self._resolver = resolver

    def single_host(self) -> str | None:
        if self.files_database_url is None:
            return (f"platform files are written to the folder {self.files_dir} of the host that makes them "
                    "(other hosts read them from the file server, but only the files of its own host); "
                    "use CONNECTOR_OPS_FILES_BACKEND=database with a PostgreSQL CONNECTOR_OPS_DATABASE_URL")
        if self.files_database_url.startswith("sqlite"):
            return "platform files are in a SQLite file of one host; set CONNECTOR_OPS_DATABASE_URL to PostgreSQL"
        return None

    @property
    def _db(self) -> Any:
        """The database storage (``None``: the folder ``files_dir``), made on first use."""
        if self.files_database_url is not None and self._database is None:
            from connector_ops.resources.platform_file_db import DatabaseFiles

            self._database = DatabaseFiles(self.files_database_url, self.min_free_disk)
        return self._database

    # -- paths -----------------------------------------------------------------------------------
    @property
    def root(self) -> Path:
        root = Path(self.files_dir)
        if not self._swept:  # the store's start: what writers killed mid-write left, once an hour per folder
            root.mkdir(parents=True, exist_ok=True)
            if sweep_due(root):
                self._sweep(root)
            self._swept = True
        return root

    def sweep(self) -> None:
        """Remove the crash leftovers of ``files_dir`` now, however recently a start swept it (``gc``,
        ``files serve``); a folder not made yet is left unmade, a database store has none."""
        root = Path(self.files_dir)
        if self.files_database_url is None and root.is_dir():
            sweep_due(root)  # dated: the starts of the next hour need not sweep again
            self._sweep(root)
            self._swept = True

    @staticmethod
    def _sweep(root: Path) -> None:
        sweep_leftovers(root)
        _sweep_undescribed(root)

    @property
    def _prefix(self) -> str:
        return self.file_server_url.rstrip("/") + "/files/"

    def link_for(self, file_id: str) -> str:
        return self._prefix + file_id

    @staticmethod
    def _check_id(file_id: str) -> str:
        """Ids are ours (random hex): anything else is no file of ours, and never reaches a path or a query."""
        if not _ID.fullmatch(file_id or ""):
            raise NotFound(f"platform file {file_id!r} not found")
        return file_id

    def _paths(self, file_id: str) -> tuple[Path, Path]:
        self._check_id(file_id)
        return self.root / file_id, self.root / f"{file_id}.json"

    # -- writing ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def create(self, name: str, content_type: str | None = None, *,
               copied_from: str | None = None) -> Iterator[PendingFile]:
        """Write a new platform file; on any error inside the block nothing is kept. ``copied_from``: the id
        of the file of another store it copies (``store copy``), kept in its stored descriptor (``copiedFrom``,
        never served: :class:`PlatformFile` drops it), which makes the file exist: :meth:`copies`."""
        name, content_type = clean_name(name), clean_content_type(content_type)
        file_id = uuid.uuid4().hex
        origin = {ORIGIN: copied_from} if copied_from is not None else {}
        if self._db is not None:
            with self._db.create(file_id) as (writer, descriptor):
                pending = PendingFile(writer)
                yield pending
                check_fence(f"platform file {name!r}")  # inside its transaction: a refusal rolls it back
                pending.descriptor = self._descriptor(file_id, name, content_type, pending.size)
                descriptor.append({**pending.descriptor.to_json(), **origin})
            return
        data_path, meta_path = self._paths(file_id)
        try:
            with atomic_write(data_path, min_free_disk=self.min_free_disk) as handle:
                pending = PendingFile(handle)
                yield pending
            check_fence(f"platform file {name!r}")  # before its descriptor, which makes it exist
            descriptor = self._descriptor(file_id, name, content_type, pending.size)
            with atomic_write(meta_path, min_free_disk=self.min_free_disk) as meta:
                meta.write(json.dumps({**descriptor.to_json(), **origin}).encode())
            pending.descriptor = descriptor
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(data_path)
            raise

    def _descriptor(self, file_id: str, name: str, content_type: str | None, size: int) -> PlatformFile:
        return PlatformFile(id=file_id, name=name, content_type=content_type or guess_content_type(name),
                            link=self.link_for(file_id), size=size, last_modified=utc_timestamp())

    def add_file(self, path: str | os.PathLike[str], name: str | None = None, content_type: str | None = None,
                 verify: Callable[[str], None] | None = None) -> PlatformFile:
        """Copy a local file into the store (``connector-ops files add``).

        ``verify``: called with the SHA-256 of the bytes copied, before the file exists; raising there keeps
        nothing. A pipeline's ``${file:…}`` checks that the file is the one its run was launched with in
        the same read that copies it, so no edit slips in between a check and the copy."""
        source = Path(path)
        clean_content_type(content_type)  # before the path's problems, as create would only after them
        # the file's own name is the disk's, which the user did not type: made readable (bytes that are not
        # UTF-8 become U+FFFD, control characters spaces), never refused; an empty or broken --name is refused
        name = clean_name(name_from_elsewhere(source.name, "unnamed") if name is None else name)
        if not source.is_file():
            raise InvalidInput("path", f"{source} is not a readable file")
        with source.open("rb") as src, self.create(name, content_type) as sink:
            if verify is None:
                shutil.copyfileobj(src, sink, CHUNK)
            else:
                digest = hashlib.sha256()
                while chunk := src.read(CHUNK):
                    digest.update(chunk)
                    sink.write(chunk)
                verify(digest.hexdigest())
        assert sink.descriptor is not None
        return sink.descriptor

    def add_bytes(self, data: bytes, name: str, content_type: str | None = None) -> PlatformFile:
        with self.create(name, content_type) as sink:
            sink.write(data)
        assert sink.descriptor is not None
        return sink.descriptor

    # -- reading ---------------------------------------------------------------------------------
    def describe(self, file_id: str) -> PlatformFile:
        """The stored descriptor of one of our files (``NotFound`` if unknown)."""
        if self._db is not None:
            stored = self._db.describe(self._check_id(file_id))
        else:
            _, meta_path = self._paths(file_id)
            try:
                stored = json.loads(meta_path.read_bytes())
            except FileNotFoundError:
                raise NotFound(f"platform file {file_id!r} not found") from None
        return PlatformFile.model_validate(_as_served(stored, file_id))

    def stored(self) -> bool:
        """Whether a file was ever stored here: ``False`` while ``files_dir`` does not exist, or the database
        has no catalog yet (``CONNECTOR_OPS_FILES_BACKEND=database``). Asked without creating either."""
        if self.files_database_url is not None:
            from connector_ops.resources.virtual_files.engines import catalog_exists

            return catalog_exists(self.files_database_url)
        return Path(self.files_dir).is_dir()

    def inventory(self) -> list[tuple[str, datetime]]:
        """Every stored file's id and when it was written (UTC, from its descriptor), oldest first. Files
        being written (no descriptor yet) are not listed."""
        if self._db is not None:
            return self._db.inventory()
        return _oldest_first(entry for file_id, stored in self._stored_descriptors()
                             if (entry := _written(file_id, stored)) is not None)

    def copies(self) -> dict[str, str]:
        """The files ``store copy`` made here, by the id of the file each copies (its descriptor's
        ``copiedFrom``); of two copies of one file, the later."""
        if self._db is not None:
            return self._db.copies(ORIGIN)
        return _by_origin(copy for file_id, stored in self._stored_descriptors()
                          if (copy := _copy_of(file_id, stored)) is not None)

    def inventory_and_copies(self) -> tuple[list[tuple[str, datetime]], dict[str, str]]:
        """:meth:`inventory` and :meth:`copies` together (``store copy`` into this store): in a folder from one
        read of its descriptors, a file each, rather than two."""
        if self._db is not None:
            return self._db.inventory(), self._db.copies(ORIGIN)
        found, copied = [], []
        for file_id, stored in self._stored_descriptors():
            if (entry := _written(file_id, stored)) is not None:
                found.append(entry)
            if (copy := _copy_of(file_id, stored)) is not None:
                copied.append(copy)
        return _oldest_first(found), _by_origin(copied)

    def _stored_descriptors(self) -> Iterator[tuple[str, Any]]:
        """Each descriptor of ``files_dir`` as stored, by its file's id; one removed meanwhile, or not JSON,
        left out."""
        for meta_path in self.root.glob("*.json"):
            file_id = meta_path.name.removesuffix(".json")
            if not _ID.fullmatch(file_id):
                continue
            try:
                stored = json.loads(meta_path.read_bytes())
            except (FileNotFoundError, ValueError):
                continue
            yield file_id, stored

    def local_id(self, descriptor: PlatformFile | Mapping[str, Any]) -> str | None:
        """The id of the file if ``descriptor.link`` is a link of our own file server, else ``None``: the one
        test of "ours" for every reader (Push, Drive upload, mail attachments, the magics, step metadata).

        ``{file_server_url}/files/<id>`` with a well-formed id is ours (read from storage, else from our file
        server). So is a link made under an earlier ``file_server_url`` — ``http://127.0.0.1:8765/files/<id>``
        kept in a run config, a step output or a notebook after the URL moved to the real host — when its
        path ends in ``/files/<id>``, ``<id>`` is the descriptor's own ``id`` and this store holds that file:
        it is read from storage, whatever the link's base. That exposes nothing a link with today's base
        would not: ids are random (128 bits) and made by this store, so whoever holds one could as well write
        today's link, and no request goes to the link's host. Any other link, one that merely starts like
        ours (``…/files/../../admin``) included, is a remote link and gets their checks (:mod:`.link_guard`)."""
        pf = PlatformFile.model_validate(descriptor)
        if not pf.link:
            return None
        if pf.link.startswith(self._prefix):
            file_id = pf.link[len(self._prefix):].split("?", 1)[0]
            return file_id if _ID.fullmatch(file_id) else None
        linked = linked_id(pf.link)
        return linked if linked is not None and linked == pf.id and self.holds(linked) else None

    def holds(self, file_id: str) -> bool:
        """Whether this store holds the file ``file_id``, asked without creating its folder or catalog."""
        if not _ID.fullmatch(file_id or "") or not self.stored():
            return False
        if self.files_database_url is None:
            return all(Path(self.files_dir, name).is_file() for name in (file_id, f"{file_id}.json"))
        try:
            self._db.describe(file_id)
        except NotFound:
            return False
        return True

    def _not_ours_because(self, link: str, own_id: str | None) -> str:
        """Why a link shaped as a file server's (``…/files/<id>``) that a remote check refused is not read
        from this store, for the refusal's message; ``""`` for any other link."""
        file_id = linked_id(link)
        if file_id is None:
            return ""
        server = f"the file server's URL {link_shown(self.file_server_url)} (CONNECTOR_OPS_FILE_SERVER_URL)"
        if self.holds(file_id):  # a descriptor made by hand: its link, not its id
            given = "has no id" if own_id is None else f"has the id {own_id[:40]!r}"
            return (f"; the platform file {file_id} is stored on this host, but the descriptor {given}: with "
                    f"\"id\": {file_id!r} it is read from here")
        return (f"; the platform file {file_id} is not stored on this host, and the link's base "
                f"{link_base(link)} is not {server}")

    def data_path(self, file_id: str) -> Path:
        """Where a file's bytes are on this host (``NotFound`` if not here, or kept in the database)."""
        if self._db is not None:
            raise NotFound(f"platform file {file_id!r} is kept in the database, not on this host's disk")
        data_path, _ = self._paths(file_id)
        if not data_path.is_file():
            raise NotFound(f"platform file {file_id!r} not found")
        return data_path

    @contextlib.contextmanager
    def open(self, descriptor: PlatformFile | Mapping[str, Any], field: str = "platformFile") -> Iterator[IO[bytes]]:
        """A binary stream of the file's bytes: read from storage for our links, else over HTTP."""
        pf = PlatformFile.model_validate(descriptor)
        local = self.local_id(pf)
        if local is not None:
            with self._own(local, pf.link or "") as handle:
                yield handle
            return
        with self._remote(pf.link or "", f"{field}.link", pf.id) as stream:
            yield stream

    @contextlib.contextmanager
    def opener(self, descriptor: PlatformFile | Mapping[str, Any],
               field: str = "platformFile") -> Iterator[tuple[Open, int | None]]:
        """Opens of the file for one action that reads it more than once, and its size in bytes if known. A
        file of this store is opened again each time (:meth:`open`). A link of another server is fetched
        once, now, and read again from what was kept (:mod:`…kernel.replay`): one ``GET``, the same bytes
        for every read; its size is the descriptor's, else the server's ``Content-Length``."""
        pf = PlatformFile.model_validate(descriptor)
        if self.local_id(pf) is not None:
            yield (lambda: self.open(pf, field)), self.size_of(pf)
            return
        with fetched_once(lambda: self.open(pf, field)) as replay:
            yield replay.open, pf.size if pf.size is not None else replay.length

    @contextlib.contextmanager
    def _own(self, file_id: str, link: str) -> Iterator[IO[bytes]]:
        """One of our files: from storage when this host has it, else from our file server over HTTP.

        A step on another host (a Celery worker without this ``files_dir``) reads a file the server's host
        wrote through the link, as any client would. Our own server is the deployment's, so it is reached
        as configured, without the checks remote links get.
        """
        try:
            handle = self.open_stored(file_id)
        except NotFound:
            with self._served(file_id, link) as stream:
                yield stream
            return
        with handle:
            yield handle

    def open_stored(self, file_id: str, *, detached: bool = False) -> IO[bytes]:
        """A stream of a stored file's bytes (``NotFound`` if this store does not hold it); ``detached``: for a
        reader that may stall (the file server's clients), holding no database connection while it reads."""
        if self._db is not None:
            return self._db.open(self._check_id(file_id), detached=detached)
        return self.data_path(file_id).open("rb")

    @contextlib.contextmanager
    def _served(self, file_id: str, link: str) -> Iterator[IO[bytes]]:
        """One of our files from our file server: straight, never through a proxy of the environment — the
        deployment's own service, inside its network, whose files are not sent out through the egress proxy."""
        send = functools.partial(self._get, self.link_for(file_id), {}, {DIRECT: True})
        try:
            response = send({})
        except httpx.TransportError:  # no server there: the file is simply not on this host
            raise NotFound(f"platform file {file_id!r} not found (not stored on this host, and the file server "
                           f"at {link_shown(self.file_server_url)} did not answer)") from None
        try:  # the link as messages show it (the file server's URL may carry a password, the link a signature)
            with contextlib.closing(body_of(response, link_shown(link), f"platform file {file_id!r} not found",
                                            host_of(self.file_server_url), send)) as body:
                yield body
        finally:
            response.close()

    @contextlib.contextmanager
    def _remote(self, link: str, field: str, own_id: str | None = None) -> Iterator[IO[bytes]]:
        """Stream a remote link: each hop's host resolved and checked (:mod:`.link_guard`), the connection
        made to the checked address — or, for a URL the environment sends through a proxy, to the proxy —,
        redirects followed here one at a time (a redirect to our own file server reads storage). ``own_id``:
        the descriptor's ``id``, for the refusal of a link of an earlier file server URL
        (:meth:`_not_ours_because`)."""
        guard = LinkGuard(AllowList.parse(self.allowed_private_hosts), self._resolver or system_resolver,
                          self._client().routes)
        url, shown = link, link_shown(link)
        came_from: str | None = None  # the hop that redirected here
        for _ in range(MAX_REDIRECTS + 1):
            local = self.local_id({"link": url}) if came_from is not None else None
            if local is not None:
                with self._own(local, url) as handle:
                    yield handle
                return
            try:
                hop = guard.hop(url, field, redirected_from=came_from)
            except InvalidInput as exc:
                if came_from is not None or not (why := self._not_ours_because(link, own_id)):
                    raise
                raise InvalidInput(exc.field, exc.problem + why) from None
            send = functools.partial(self._get, hop.url, hop.headers, hop.extensions)  # to the address checked
            try:
                response = send({})
            except ProxyFailure as exc:  # names the proxy (never its password) and the host
                raise UpstreamError(f"fetching {shown} failed: {exc}", retryable=exc.retryable) from None
            except httpx.TransportError as exc:  # name the host the user wrote, not the pinned address
                raise UpstreamError(f"fetching {shown} failed: cannot reach {host_of(url)} "
                                    f"({type(exc).__name__}: {exc})", retryable=True) from None  # a GET: safe
            try:
                location = response.extensions.get(LOCATION)
                if location:
                    came_from, url = url, _joined(url, location)
                    continue
                with contextlib.closing(body_of(response, shown, f"platform file at {shown} not found", host_of(url),
                                                send)) as body:
                    yield body
                return
            finally:
                response.close()
        raise UpstreamError(f"fetching {shown} failed: more than {MAX_REDIRECTS} redirects")

    def _get(self, url: str, headers: Mapping[str, str], extensions: dict[str, Any],
             more: Mapping[str, str]) -> httpx.Response:
        """A streamed ``GET`` of ``url`` with ``headers`` and ``more`` (a continuation's ``Range``)."""
        client = self._client()
        return client.send(client.build_request("GET", url, headers={**headers, **more}, extensions=extensions),
                           stream=True)

    def size_of(self, descriptor: PlatformFile | Mapping[str, Any]) -> int | None:
        """The file's size in bytes: for a file this store holds, the stored size (the caller's ``size`` may
        be wrong, and limits and upload headers are decided from it); else the descriptor's, if any."""
        pf = PlatformFile.model_validate(descriptor)
        local = self.local_id(pf)
        if local is not None:
            with contextlib.suppress(NotFound):
                if self._db is not None:
                    return self.describe(local).size
                return self.data_path(local).stat().st_size
        return pf.size

    def read_bytes(self, descriptor: PlatformFile | Mapping[str, Any]) -> bytes:
        with self.open(descriptor) as handle:
            return handle.read()

    def _client(self) -> Client:
        """One client for the store's lifetime (connections reused across downloads), closed by ``close()``."""
        return per_process(self, "_http", self._connect)

    def _connect(self) -> Client:
        return make_client(
            timeout=httpx.Timeout(self.http_timeout_s, connect=10.0),
            follow_redirects=False,  # each hop is checked by _remote
            event_hooks={"response": [_location_kept]},  # …and httpx does not read its Location
            retries=2,
        )

    def close(self) -> None:
        client = take_own(self, "_http")
        if client is not None:
            client.close()

    def delete(self, file_id: str) -> None:
        if self._db is not None:
            self._db.delete(self._check_id(file_id))
            return
        for path in self._paths(file_id):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _written(file_id: str, stored: Any) -> tuple[str, datetime] | None:
    """A stored descriptor's :meth:`PlatformFileStore.inventory` entry (none without a readable time)."""
    with contextlib.suppress(ValueError, KeyError):
        return file_id, datetime.fromisoformat(stored["lastModified"].replace("Z", "+00:00"))
    return None


def _oldest_first(found: Iterable[tuple[str, datetime]]) -> list[tuple[str, datetime]]:
    return sorted(found, key=lambda item: (item[1], item[0]))


def _copy_of(file_id: str, stored: Any) -> tuple[str, str, str] | None:
    """A stored descriptor's time, id and the id it copies, if ``store copy`` made it."""
    if isinstance(stored, dict) and isinstance(stored.get(ORIGIN), str):
        return str(stored.get("lastModified")), file_id, stored[ORIGIN]
    return None


def _by_origin(copied: Iterable[tuple[str, str, str]]) -> dict[str, str]:
    """:meth:`PlatformFileStore.copies` of the copies found: of two copies of one file, the later."""
    return {old_id: file_id for _, file_id, old_id in sorted(copied)}
