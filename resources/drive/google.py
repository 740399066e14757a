"""GoogleDriveResource: the drive actions against the Google Drive REST API v3 (research §1).

Every call sends ``supportsAllDrives=true`` and an explicit ``fields`` selector; listings follow
``nextPageToken`` to the end. Creates (files, folders, copies, multipart uploads) carry an id reserved
with ``files.generateIds``, so a retried POST can only meet its own earlier success (409), never make a
duplicate. Sharing and copying with permissions undo what they added if a later step fails.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import quote

import httpx
from pydantic import PrivateAttr

from connector_ops.kernel.errors import ActionFailed, InvalidInput, NotFound, UpstreamError
from connector_ops.kernel.forks import per_process, take_own
from connector_ops.kernel.progress import track
from connector_ops.kernel.resource import Resource
from connector_ops.resources.drive.base import (
    FOLDER_MIME,
    ROOT_ALIASES,
    SHORTCUT_MIME,
    Download,
    DriveItem,
    Grant,
    copy_name,
    exported,
    listing_order,
)
from connector_ops.resources.drive.google_auth import (
    DEFAULT_TOKEN_URL,
    TokenSource,
    default_token_source,
    key_file_token_source,
    user_token_source,
)
from connector_ops.resources.drive.google_http import DriveApiError, DriveHttp
from connector_ops.resources.drive.uploads import (
    QUANTUM,
    ChunkedSender,
    SessionLost,
    StreamingSender,
    check_md5,
    multipart_related,
    read_up_to,
    seekable_size,
)
from connector_ops.resources.http_client import make_client
from connector_ops.resources.progress_floor import Stalled, progressing, read_timeout
from connector_ops.resources.retry import Backoff

DEFAULT_API_URL = "https://www.googleapis.com"
SAD = {"supportsAllDrives": "true"}
#: the metadata server (Application Default Credentials on GCE / GKE): on the host's own link, never behind a
#: proxy, so reached straight whatever NO_PROXY says (httpx mount keys, :func:`…http_client.make_client`)
METADATA_SERVER = ("all://metadata.google.internal", "all://169.254.169.254")
#: Permission fields read when copying sharing (research §1.8).
PERMISSION_FIELDS = "id,type,role,emailAddress,domain,allowFileDiscovery,deleted,pendingOwner,view,permissionDetails"


def q_literal(value: str) -> str:
    """A Drive query string literal: ``\\`` and ``'`` escaped (research §1.10)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _grant_body(grant: Grant) -> dict[str, Any]:
    body: dict[str, Any] = {"type": grant.type, "role": grant.role}
    if grant.email:
        body["emailAddress"] = grant.email
    if grant.domain:
        body["domain"] = grant.domain
    if grant.type in ("domain", "anyone"):
        body["allowFileDiscovery"] = False
    return body


#: the metadata that tells one version of a blob from another
VERSION_FIELDS = "size,md5Checksum,modifiedTime"


@dataclass(frozen=True)
class _Version:
    """What Drive's metadata said of the blob being downloaded: its id, size, MD5 and modification time
    (any but the id may be unknown)."""

    file_id: str
    size: int | None
    md5: str | None
    modified: str | None

    @classmethod
    def of(cls, meta: dict[str, Any]) -> _Version:
        size = meta.get("size")
        return cls(meta["id"], int(size) if size is not None else None, meta.get("md5Checksum"),
                   meta.get("modifiedTime"))

    @staticmethod
    def changed() -> UpstreamError:
        return UpstreamError("the file changed on Google Drive while it was being downloaded; nothing was "
                             "saved, try again", status=409, retryable=True)

    def check_resumed(self, content_range: str, received: int) -> None:
        """``Content-Range: bytes <received>-<end>/<size>`` or the resumed part belongs to another version."""
        m = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+|\*)", content_range.strip())
        if m is None or int(m.group(1)) != received or \
                (self.size is not None and m.group(3) != str(self.size)):
            raise self.changed()

    def check_complete(self, received: int, now: _Version) -> None:
        """The body has the size the metadata said, and the file is still the version it was when the
        download started (``now``, read again after a resume), so every part is of that version."""
        if (self.size is not None and received != self.size) or now != self:
            raise self.changed()


def _past(chunks: Iterator[bytes], skip: int) -> Iterator[bytes]:
    """``chunks`` less their first ``skip`` bytes, dropped as they come (one chunk in memory at a time)."""
    for chunk in chunks:
        if skip >= len(chunk):
            skip -= len(chunk)
            continue
        yield chunk[skip:] if skip else chunk
        skip = 0


class GoogleDriveResource(Resource):
    """Google Drive v3 over one httpx client, signed in with a refresh token or a service account."""

    api_url: str = DEFAULT_API_URL
    """Google Drive API base URL (tests point it at a loopback server)."""
    token_url: str = DEFAULT_TOKEN_URL
    """OAuth 2.0 token endpoint."""
    client_id: str | None = None
    """OAuth client id (user sign-in, with client_secret and refresh_token)."""
    client_secret: str | None = None
    """OAuth client secret (secret: an environment reference)."""
    refresh_token: str | None = None
    """OAuth refresh token from `connector-ops drive login` (secret)."""
    service_account_file: str | None = None
    """Service-account key file (JSON), instead of the user OAuth fields."""
    subject: str | None = None
    """With a service account: the user to act as (domain-wide delegation)."""
    use_adc: bool = False
    """Without other credentials, sign in with Application Default Credentials (google.auth.default: the gcloud
    file, the metadata server / workload identity)."""
    scope: str = "drive"
    """The Drive scope requested: drive (everything), drive.file (files this app made or opened), drive.readonly."""
    timeout_s: float = 120.0
    """Timeout of one HTTP request, in seconds; for a download, of each read, and the window in which Drive must
    send at least 64 KiB (:mod:`…progress_floor`)."""
    max_attempts: int = 7
    """Attempts for a retryable failure (429, 5xx, connection errors)."""
    backoff_base_s: float = 1.0
    """First retry delay in seconds (doubles, with jitter; Retry-After wins)."""
    backoff_max_s: float = 32.0
    """Longest retry delay in seconds."""
    multipart_max_bytes: int = 5 * 1024 * 1024
    """Uploads up to this size go in one multipart request; larger ones are resumable."""
    chunk_bytes: int = 16 * 1024 * 1024
    """Chunk size of resumable uploads from sources that cannot seek (rounded to 256 KiB)."""
    page_size: int = 1000
    """Items per page when listing a folder."""

    # per process (:mod:`~connector_ops.kernel.forks`): a forked child given this resource signs in on its own
    # connections, and reserves its own ids (two processes creating under one id: the second's 409 was taken
    # for its own earlier success, and it was told the other's file id)
    _http: tuple[int, DriveHttp] | None = PrivateAttr(default=None)
    _ids: tuple[int, list[str]] | None = PrivateAttr(default=None)
    _root_id: str | None = PrivateAttr(default=None)

    # -- plumbing -------------------------------------------------------------------------------
    @property
    def http(self) -> DriveHttp:
        """This process's client (made on first use)."""
        return per_process(self, "_http", self._connect)

    def _connect(self) -> DriveHttp:
        client = make_client(timeout=httpx.Timeout(self.timeout_s, connect=15.0), follow_redirects=False,
                             direct=METADATA_SERVER)
        backoff = Backoff(self.backoff_base_s, self.backoff_max_s, self.max_attempts)
        return DriveHttp(client, self._token_source(client), backoff)

    def close(self) -> None:
        """Close the HTTP client; the next call opens a new one (and signs in again). In a forked child, the
        parent's client is left open (it is the parent's connection), and only the child's own is closed."""
        http = take_own(self, "_http")
        if http is not None:
            http.client.close()

    def _token_source(self, client: httpx.Client) -> TokenSource:
        if self.refresh_token:
            pairs = (("GOOGLE_CLIENT_ID", self.client_id), ("GOOGLE_CLIENT_SECRET", self.client_secret))
            missing = [name for name, value in pairs if not value]
            if missing:
                raise InvalidInput(", ".join(missing), "is required with GOOGLE_REFRESH_TOKEN")
            return user_token_source(client, client_id=str(self.client_id), client_secret=str(self.client_secret),
                                     refresh_token=self.refresh_token, token_url=self.token_url)
        if self.service_account_file:
            return key_file_token_source(client, key_file=self.service_account_file, token_url=self.token_url,
                                         subject=self.subject, scope=self.scope)
        if self.use_adc:
            return default_token_source(client, scope=self.scope, token_url=self.token_url)
        raise InvalidInput("GOOGLE_REFRESH_TOKEN",
                           "no Google credentials: set GOOGLE_CLIENT_ID, GOOGLE_CLIENT_SECRET and GOOGLE_REFRESH_TOKEN "
                           "(see `connector-ops drive login`), GOOGLE_APPLICATION_CREDENTIALS, or GOOGLE_USE_ADC=true "
                           "for Application Default Credentials")

    def _url(self, *segments: str, upload: bool = False, field: str | None = None) -> str:
        """The API URL of ``segments`` (ids quoted). ``.`` and ``..`` are refused as unknown ids (of the
        input ``field``): URL normalisation (httpx, RFC 3986, even as ``%2E``) would turn them into another
        endpoint."""
        for segment in segments:
            if segment in (".", ".."):
                raise NotFound(f"{field + ': ' if field else ''}no drive item with id {segment!r}")
        base = self.api_url.rstrip("/") + ("/upload/drive/v3" if upload else "/drive/v3")
        return "/".join([base, *(quote(s, safe="") for s in segments)])

    def _get(self, item_id: str, fields: str, action: str, field: str | None = None) -> dict[str, Any]:
        """The metadata of ``item_id``; ``field`` is the input it came from, named if Drive refuses it."""
        return self.http.call("GET", self._url("files", self._id(item_id), field=field), action=action,
                              params={**SAD, "fields": fields}, field=field)

    def _id(self, item_id: str) -> str:
        return "root" if item_id in ROOT_ALIASES else item_id

    def _parent(self, folder_id: str | None) -> str:
        return "root" if not folder_id else self._id(folder_id)

    def _root(self) -> str:
        if self._root_id is None:
            self._root_id = self._get("root", "id", "read the root folder")["id"]
        return self._root_id

    def _is_root(self, item_id: str) -> bool:
        """Whether ``item_id`` is My Drive's root, by an alias or by its real id (read once per resource):
        Drive's own answers to renaming, moving or sharing the root are unrelated errors or no link."""
        return item_id in ROOT_ALIASES or item_id == self._root()

    def _new_id(self) -> str:
        """An id reserved with ``files.generateIds``: it makes the create that uses it repeatable."""
        reserved: list[str] = per_process(self, "_ids", list)  # a forked child never pops the ids its parent reserved
        with contextlib.suppress(IndexError):  # list.pop is atomic: no two threads get one id
            return reserved.pop()
        ids = self.http.call("GET", self._url("files", "generateIds"), action="reserve a file id",
                             params={"count": "10", "space": "drive", "type": "files"})["ids"]
        reserved.extend(ids[1:])
        return ids[0]

    def _create(self, url: str, body: dict[str, Any], action: str, fields: str = "id,name",
                **kwargs: Any) -> dict[str, Any]:
        """POST a create/copy with a reserved id; a 409 on a retry means our first attempt succeeded."""
        new_id = self._new_id()
        with self.http.open("POST", url, action=action, params={**SAD, "fields": fields},
                            json={**body, "id": new_id}, own_conflict=True, **kwargs) as response:
            response.read()
        if response.status_code == 409:
            return self._get(new_id, fields, action)
        return response.json()

    def _kind(self, item_id: str, action: str, field: str) -> dict[str, Any]:
        return self._get(item_id, "id,name,mimeType,driveId", action, field)

    # -- actions ----------------------------------------------------------------------------------
    def rename(self, item_id: str, name: str) -> None:
        if self._is_root(item_id):
            raise InvalidInput("id", "the drive root cannot be renamed")
        self.http.call("PATCH", self._url("files", self._id(item_id), field="id"), action="rename the item",
                       params={**SAD, "fields": "id,name"}, json={"name": name}, field="id")

    def create_file(self, name: str, folder_id: str | None, mime_type: str) -> str:
        body = {"name": name, "mimeType": mime_type, "parents": [self._parent(folder_id)]}
        return self._create(self._url("files"), body, "create the file", field="folderId")["id"]

    def create_folder(self, name: str, parent_id: str | None) -> str:
        body = {"name": name, "mimeType": FOLDER_MIME, "parents": [self._parent(parent_id)]}
        return self._create(self._url("files"), body, "create the folder", field="folderId")["id"]

    def move(self, item_id: str, folder_id: str) -> None:
        target = self._root() if folder_id in ROOT_ALIASES else folder_id
        meta = self._get(item_id, "id,parents", "read the item to move", "id")
        if self._is_root(meta["id"]):
            raise InvalidInput("id", "the drive root cannot be moved")
        current = meta.get("parents") or []
        if current == [target]:
            return
        params = {**SAD, "fields": "id,parents", "addParents": target}
        removed = [p for p in current if p != target]
        if removed:
            params["removeParents"] = ",".join(removed)
        # the item was just read, so what Drive refuses here is the destination
        self.http.call("PATCH", self._url("files", self._id(item_id)), action="move the item", params=params, json={},
                       field="folderId")

    def _delete(self, item_id: str, action: str) -> None:
        # a 404 here means an earlier attempt (whose answer was lost) or someone else already deleted it
        with self.http.open("DELETE", self._url("files", item_id), action=action, params=SAD,
                            ok=lambda r: r.status_code < 400 or r.status_code == 404) as response:
            response.read()

    def delete_file(self, file_id: str) -> None:
        meta = self._kind(file_id, "read the file to delete", "fileId")
        if meta.get("mimeType") == FOLDER_MIME:
            raise InvalidInput("fileId", "is a folder; use Delete Folder to delete a folder and its contents")
        self._delete(meta["id"], "delete the file")

    def delete_folder(self, folder_id: str) -> None:
        meta = self._kind(folder_id, "read the folder to delete", "folderId")
        if meta.get("mimeType") != FOLDER_MIME:
            raise InvalidInput("folderId", "is not a folder; use Delete File to delete a file")
        if self._is_root(meta["id"]):
            raise InvalidInput("folderId", "the drive root cannot be deleted")
        self._delete(meta["id"], "delete the folder")

    def _permission_ids(self, file_id: str, fields: str = "id") -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            params = {**SAD, "fields": f"nextPageToken,permissions({fields})", "pageSize": "100"}
            if token:
                params["pageToken"] = token
            page = self.http.call("GET", self._url("files", file_id, "permissions"), action="list the sharing",
                                  params=params)
            out.extend(page.get("permissions") or [])
            token = page.get("nextPageToken")
            if not token:
                return out

    def _grant_all(self, file_id: str, bodies: list[tuple[str, dict[str, Any], bool]]) -> None:
        """Create permissions one after the other (Drive does not support concurrent permission writes);
        if one fails, remove the ones this call added and report which recipient failed."""
        before = {p["id"] for p in self._permission_ids(file_id)}
        added: list[str] = []
        for label, body, notify_param in bodies:
            params = dict(SAD)
            if body["role"] == "owner":
                params["transferOwnership"] = "true"
            elif notify_param:
                params["sendNotificationEmail"] = "false"
            try:
                created = self.http.call("POST", self._url("files", file_id, "permissions"),
                                         action=f"share with {label}", params={**params, "fields": "id"}, json=body)
            except UpstreamError:
                for permission_id in added:
                    with contextlib.suppress(UpstreamError):
                        self.http.call("DELETE", self._url("files", file_id, "permissions", permission_id),
                                       action="undo sharing", params=SAD)
                raise
            if created["id"] not in before:
                added.append(created["id"])

    def share(self, item_id: str, grants: list[Grant]) -> str:
        file_id = self._get(item_id, "id", "read the item to share", "id")["id"]
        if self._is_root(file_id):
            raise InvalidInput("id", "the drive root cannot be shared; share a folder inside it")
        labels = [g.email or g.domain or "anyone" for g in grants]
        self._grant_all(file_id, [(label, _grant_body(g), False) for label, g in zip(labels, grants, strict=True)])
        link = self._get(file_id, "id,webViewLink", "read the shared link").get("webViewLink")
        if not link:
            raise ActionFailed("Google Drive returned no link for the shared item")
        return link

    def copy_file(self, file_id: str, folder_id: str | None, name: str | None,
                  keep_permissions: bool) -> tuple[str, str]:
        source = self._kind(file_id, "read the file to copy", "fileId")
        if source.get("mimeType") == FOLDER_MIME:
            raise InvalidInput("fileId", "is a folder; Drive copies files only")
        body = {"name": copy_name(source["name"], name), "parents": [self._parent(folder_id)]}
        # the source was just read, so what Drive refuses here is the destination
        copy = self._create(self._url("files", source["id"], "copy"), body, "copy the file", fields="id,name,driveId",
                            field="folderId")
        if keep_permissions:
            try:
                self._copy_permissions(source["id"], copy)
            except BaseException:
                with contextlib.suppress(UpstreamError):
                    self._delete(copy["id"], "remove the incomplete copy")
                raise
        return copy["id"], copy["name"]

    def _copy_permissions(self, source_id: str, copy: dict[str, Any]) -> None:
        """Share the copy with the source's people (research §1.8): skip inherited, deleted and view-only
        entries; the source owner becomes a writer (the signed-in user owns the copy)."""
        me: str | None = None
        bodies = []
        for p in self._permission_ids(source_id, PERMISSION_FIELDS):
            details = p.get("permissionDetails") or []
            if p.get("deleted") or p.get("view") or (details and all(d.get("inherited") for d in details)):
                continue
            role = p["role"]
            if role == "owner":
                if me is None:
                    about = self.http.call("GET", self._url("about"), action="read the signed-in user",
                                           params={"fields": "user(emailAddress)"})
                    me = (about.get("user") or {}).get("emailAddress", "")
                if p.get("emailAddress") == me:
                    continue
                role = "writer"
            if role in ("organizer", "fileOrganizer") and not copy.get("driveId"):
                role = "writer"  # organizer roles exist only in shared drives
            body = {"type": p["type"], "role": role}
            for key in ("emailAddress", "domain", "allowFileDiscovery"):
                if key in p:
                    body[key] = p[key]
            label = p.get("emailAddress") or p.get("domain") or p["type"]
            bodies.append((label, body, p["type"] in ("user", "group")))
        if bodies:
            self._grant_all(copy["id"], bodies)

    def upload(self, stream: IO[bytes], name: str, content_type: str, size: int | None,
               folder_id: str | None) -> str:
        """Multipart up to ``multipart_max_bytes``, else a resumable session: one streamed PUT for a
        seekable source (its size read from the source itself), 256 KiB-multiple chunks otherwise."""
        metadata = {"name": name, "parents": [self._parent(folder_id)]}
        with track(f"upload {name}", size, "B") as reporter:
            total = seekable_size(stream)
            if total is not None and total > self.multipart_max_bytes:
                file, expected = self._resumable(stream, None, metadata, content_type, total, reporter)
            else:
                first = read_up_to(stream, self.multipart_max_bytes + 1)
                if len(first) <= self.multipart_max_bytes:
                    file = self._post_multipart(metadata, first, content_type)
                    reporter.update(len(first))
                    expected = hashlib.md5(first, usedforsecurity=False).hexdigest()
                else:
                    file, expected = self._resumable(stream, first, metadata, content_type, size, reporter)
        try:
            check_md5(file, expected)
        except ActionFailed:
            with contextlib.suppress(UpstreamError):
                self._delete(file["id"], "remove the corrupted upload")
            raise
        return file["id"]

    def _post_multipart(self, metadata: dict[str, Any], data: bytes, content_type: str) -> dict[str, Any]:
        new_id = self._new_id()
        body, multipart_type = multipart_related({**metadata, "id": new_id}, data, content_type)
        params = {**SAD, "uploadType": "multipart", "fields": "id,name,md5Checksum"}
        with self.http.open("POST", self._url("files", upload=True), action="upload the file", params=params,
                            content=body, headers={"Content-Type": multipart_type}, field="folderId",
                            own_conflict=True) as response:
            response.read()
        if response.status_code == 409:  # a retry met the file our lost first attempt created
            return self._get(new_id, "id,name,md5Checksum", "upload the file")
        return response.json()

    def _resumable(self, stream: IO[bytes], first: bytes | None, metadata: dict[str, Any], content_type: str,
                   size: int | None, reporter: Any) -> tuple[dict[str, Any], str]:
        """A resumable session; ``first is None`` means the stream is seekable and ``size`` its exact size
        (streamed in one PUT), else ``first`` holds the bytes already read from a stream sent in chunks."""
        for attempt in range(2):
            headers = {"X-Upload-Content-Type": content_type}
            if size is not None:
                headers["X-Upload-Content-Length"] = str(size)
            params = {**SAD, "uploadType": "resumable", "fields": "id,name,md5Checksum"}
            # starting a session creates nothing, so repeating it is safe
            with self.http.open("POST", self._url("files", upload=True), action="start the upload", params=params,
                                json=metadata, headers=headers, field="folderId") as response:
                response.read()
            location = response.headers.get("location")
            if not location:
                raise UpstreamError("Google Drive did not return an upload session", status=502, retryable=True)
            try:
                if first is None and size is not None:
                    streaming = StreamingSender(self.http, location, content_type, reporter)
                    return streaming.send(stream, size), streaming.hexdigest()
                chunk = max(QUANTUM, self.chunk_bytes // QUANTUM * QUANTUM)
                chunked = ChunkedSender(self.http, location, chunk, content_type, reporter)
                return chunked.send(stream, first or b""), chunked.hexdigest()
            except SessionLost:
                if attempt or not stream.seekable():
                    raise ActionFailed("the upload session was lost and the file cannot be re-read; "
                                       "nothing was created, try again") from None
                stream.seek(0)
                if first is not None:
                    first = read_up_to(stream, self.multipart_max_bytes + 1)
        raise AssertionError("unreachable")  # pragma: no cover

    @contextlib.contextmanager
    def download(self, file_id: str) -> Iterator[Download]:
        meta = self._get(file_id, f"id,name,mimeType,{VERSION_FIELDS},shortcutDetails", "read the file to download",
                         "fileId")
        if meta.get("mimeType") == SHORTCUT_MIME:
            target = (meta.get("shortcutDetails") or {}).get("targetId")
            if not isinstance(target, str) or not target:
                # Drive's answer lacks the target a shortcut always has: say so, not quote(None)'s TypeError
                raise ActionFailed(f"Google Drive returned the shortcut {file_id!r} without its target "
                                   "(shortcutDetails.targetId); nothing was downloaded")
            meta = self._get(target, f"id,name,mimeType,{VERSION_FIELDS}", "read the shortcut's target", "fileId")
        mime = meta.get("mimeType") or "application/octet-stream"
        if mime == FOLDER_MIME:
            raise InvalidInput("fileId", "is a folder; folders cannot be downloaded")
        export = exported(meta["name"], mime)
        if export is not None:
            name, export_mime = export
            url, params = self._url("files", meta["id"], "export"), {"mimeType": export_mime}
            yield Download(name, export_mime, None, self._stream(url, params, resumable=False))
            return
        url, params = self._url("files", meta["id"]), {**SAD, "alt": "media"}
        size = int(meta["size"]) if meta.get("size") is not None else None
        yield Download(meta["name"], mime, size, self._stream(url, params, resumable=True, version=_Version.of(meta)))

    def _stream(self, url: str, params: dict[str, str], *, resumable: bool,
                version: _Version | None = None) -> Iterator[bytes]:
        """The body of a GET, streamed; a blob download broken mid-way continues with ``Range``.

        A resumed blob must continue the version it started with: the 206's ``Content-Range`` must start
        where we stopped and end at the size read in the metadata, and once the body is complete the
        metadata, read again, must still be the version read before it, else the file changed on
        Drive in between and the download fails (nothing kept). A 200 to the ``Range`` request (a server may
        ignore ``Range``, RFC 9110 14.2) is the whole body again: the bytes already passed on are read past and
        dropped, and the rest continues the stream, the version checked at the end as for a 206; so what was
        written is never rewritten and memory stays one chunk. A download that was never cut is one response,
        one version: it pays no second metadata read and no hashing.
        """
        received, failures, resumed = 0, 0, False
        while True:
            # the bytes are passed on raw (iter_raw), and ranges count bytes of the identity encoding
            headers = {"Accept-Encoding": "identity", **({"Range": f"bytes={received}-"} if received else {})}
            accept: Callable[[httpx.Response], bool] = (
                (lambda r: r.status_code in (200, 206)) if received else (lambda r: r.status_code == 200))
            try:
                with self.http.open("GET", url, action="download the file", params=params, headers=headers,
                                    ok=accept, preload=False) as response:
                    done = 0  # of this response's body, bytes already passed on: those of a 200 to a Range
                    if received and version is not None:
                        resumed = True
                        if response.status_code == 206:
                            version.check_resumed(response.headers.get("content-range", ""), received)
                        else:
                            done = received
                    # as each read brings them, at least FLOOR bytes per read time-out waited (progress_floor)
                    for chunk in _past(progressing(response.iter_raw(), read_timeout(response)), done):
                        received += len(chunk)
                        yield chunk
                if version is not None:
                    now = _Version.of(self._get(version.file_id, f"id,{VERSION_FIELDS}",
                                                "check the version of the file downloaded")) if resumed else version
                    version.check_complete(received, now)
                return
            except DriveApiError as exc:
                if received and exc.status == 416:
                    raise ActionFailed("the download was interrupted and Drive could not resume it") from None
                raise
            except (httpx.TransportError, Stalled) as exc:  # a server that hardly sends is one that broke off
                failures += 1
                if not resumable or failures >= self.http.backoff.attempts:
                    why = f": Drive {exc.words()}" if isinstance(exc, Stalled) else ""
                    raise UpstreamError(f"the download was interrupted{why}; try again", status=503,
                                        retryable=True) from None
                self.http.backoff.wait(failures)

    def list_folder(self, folder_id: str | None) -> list[DriveItem]:
        params = {**SAD, "includeItemsFromAllDrives": "true", "pageSize": str(self.page_size),
                  "fields": "nextPageToken,files(id,name,mimeType,md5Checksum,modifiedTime,version)"}
        parent = "root"
        if folder_id and folder_id not in ROOT_ALIASES:
            meta = self._get(folder_id, "id,mimeType,driveId", "read the folder to list", "folderId")
            if meta.get("mimeType") != FOLDER_MIME:
                raise InvalidInput("folderId", "is not a folder")
            parent = meta["id"]
            if meta.get("driveId"):
                params.update(corpora="drive", driveId=meta["driveId"])
        params["q"] = f"{q_literal(parent)} in parents and trashed = false"
        items: list[DriveItem] = []
        token: str | None = None
        while True:
            page_params = {**params, "pageToken": token} if token else params
            page = self.http.call("GET", self._url("files"), action="list the folder", params=page_params)
            for f in page.get("files") or []:
                items.append(DriveItem(f["id"], f["name"], "folder" if f.get("mimeType") == FOLDER_MIME else "file",
                                       f.get("md5Checksum") or f.get("modifiedTime"), f.get("version")))
            token = page.get("nextPageToken")
            if not token:
                return sorted(items, key=listing_order)

    def check_token(self) -> dict[str, object]:
        """Spec 6 "Check refresh token": can the stored credentials obtain an access token right now?"""
        return self.http.tokens.check()
