"""A stateful loopback fake of Google Drive v3 and Google's OAuth token endpoint (research §1–§4).

Run it with ``tests.servers.serving(FakeDrive(tmp).app)``. It keeps a tree of files and folders with one
parent each, blob bytes on disk (so big uploads cost no memory), permissions, reserved ids, and
resumable upload sessions. Every Drive request is checked against the discovery document
(:mod:`tests.servers.drive_discovery`) and a few hand-written house rules (``supportsAllDrives`` on every
by-id call, explicit ``fields``); violations are recorded in ``violations`` and answered with 400, so a
test that sends a bad request fails.

Fault injection (``fail``, optionally only for requests carrying ``query`` parameters such as
``alt=media``): an error status with an optional ``Retry-After``, a lost answer (the work is
done, then the connection drops), or a connection cut in the middle of an upload ``PUT`` (the first half
of its body, in whole 256 KiB units, kept; the rest never read) or of a download (optionally followed by a
new version of the file, ``replace_with``, before the client resumes), or a download's ``Range`` ignored
(``ignore_range``: the whole file, 200, as HTTP lets a server answer). Tokens:
``expire_access_tokens`` makes the next call see 401, ``revoke_refresh_tokens`` makes the token endpoint
answer ``invalid_grant``.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import json
import re
import secrets
import shutil
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from tests.servers import drive_discovery

FOLDER = "application/vnd.google-apps.folder"
NATIVE = "application/vnd.google-apps."
CREATABLE_NATIVE = {NATIVE + k for k in ("folder", "document", "spreadsheet", "presentation", "drawing", "form",
                                         "script")}
EXPORTS = {
    NATIVE + "document": {"application/vnd.openxmlformats-officedocument.wordprocessingml.document",
                          "application/pdf", "text/plain", "text/markdown"},
    NATIVE + "spreadsheet": {"application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", "text/csv"},
    NATIVE + "presentation": {"application/vnd.openxmlformats-officedocument.presentationml.presentation"},
    NATIVE + "drawing": {"image/png", "image/svg+xml"},
    NATIVE + "script": {"application/vnd.google-apps.script+json"},
}
ME = "me@example.com"
DRIVE_SCOPE = "https://www.googleapis.com/auth/drive"
QUANTUM = 256 * 1024

#: the pause between the bytes of a trickled download (Fault mode "trickle")
TRICKLE_S = 0.1


def envelope(code: int, reason: str, message: str, **extra: Any) -> JSONResponse:
    error = {"domain": "global", "reason": reason, "message": message, **extra}
    return JSONResponse({"error": {"code": code, "message": message, "errors": [error]}}, status_code=code)


def not_found(file_id: str) -> JSONResponse:
    return envelope(404, "notFound", f"File not found: {file_id}.", locationType="parameter", location="fileId")


def _split_top(fields: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in fields:
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def project(obj: Any, fields: str) -> Any:
    """Drive's partial response: ``id,name,files(id,name),user(emailAddress),capabilities/canDownload``."""
    if isinstance(obj, list):
        return [project(o, fields) for o in obj]
    out: dict[str, Any] = {}
    for part in _split_top(fields):
        m = re.fullmatch(r"([\w/]+)\((.*)\)", part)
        key, sub = (m.group(1), m.group(2)) if m else (part, None)
        head, _, rest = key.partition("/")
        if head not in obj:
            continue
        value = obj[head]
        if rest:
            value = project(value, rest if sub is None else f"{rest}({sub})")
        elif sub is not None:
            value = project(value, sub)
        out[head] = value
    return out


_TOKEN = re.compile(r"\s*('(?:[^'\\]|\\.)*'|\(|\)|!=|=|\w+)")


def parse_q(q: str) -> list[tuple[str, str, Any]]:
    """The subset of Drive's query language we serve: conjunctions of ``'<id>' in parents``,
    ``trashed = true|false``, ``name = '…'``, ``mimeType [!]= '…'`` (literals with ``\\'`` and ``\\\\``)."""
    tokens, pos = [], 0
    while pos < len(q):
        m = _TOKEN.match(q, pos)
        if not m:
            raise ValueError(f"Invalid Value at {q[pos:]!r}")
        tokens.append(m.group(1))
        pos = m.end()
        if q[pos:].strip() == "":
            break
    terms, i = [], 0

    def literal(tok: str) -> str:
        if not (tok.startswith("'") and tok.endswith("'")):
            raise ValueError(f"expected a string literal, got {tok}")
        return re.sub(r"\\(.)", r"\1", tok[1:-1])

    while i < len(tokens):
        a, op, b = tokens[i:i + 3]
        if op == "in" and b == "parents":
            terms.append(("parents", "in", literal(a)))
        elif a == "trashed" and op == "=" and b in ("true", "false"):
            terms.append(("trashed", "=", b == "true"))
        elif a in ("name", "mimeType") and op in ("=", "!="):
            terms.append((a, op, literal(b)))
        else:
            raise ValueError(f"unsupported term {a} {op} {b}")
        i += 3
        if i < len(tokens):
            if tokens[i] != "and":
                raise ValueError(f"expected 'and', got {tokens[i]}")
            i += 1
    return terms


@dataclass
class Fault:
    method: str
    path: str  # substring of the path, or "" for any
    status: int = 503
    times: int = 1
    retry_after: str | None = None
    reason: str = "backendError"
    #: status | lost_answer | drop_mid_body | trickle (a download's bytes TRICKLE_S apart) | ignore_range
    mode: str = "status"
    body_contains: str = ""
    query: dict[str, str] = field(default_factory=dict)  # parameters the request must carry, e.g. alt=media
    replace_with: bytes | None = None  # drop_mid_body of a download: a new version is saved after the cut


@dataclass
class Session:
    metadata: dict[str, Any]
    content_type: str
    blob: Path
    received: int = 0
    total: int | None = None
    file_id: str | None = None
    declared: int | None = None  # X-Upload-Content-Length of the request that started the session


@dataclass
class FakeDrive:
    """State and ASGI app of the fake; ``base_url`` must be set (to the served URL) before use."""

    storage: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="fake-drive-")))
    client_id: str = "client-123.apps.googleusercontent.com"
    client_secret: str = "shh-client-secret"
    refresh_tokens: set[str] = field(default_factory=lambda: {"1//refresh-token-secret"})
    service_account: dict[str, str] | None = None  # {"email":…, "public_key_pem":…}
    access_token_lifetime: int = 3599
    max_page: int | None = None
    #: like Google (and proxies), gzip a whole media/export body when the client's Accept-Encoding allows it
    compress_downloads: bool = True
    base_url: str = ""
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    permissions: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    sessions: dict[str, Session] = field(default_factory=dict)
    generated: set[str] = field(default_factory=set)
    access_tokens: dict[str, float] = field(default_factory=dict)
    codes: dict[str, dict[str, str]] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    upload_ranges: list[str] = field(default_factory=list)  # Content-Range of every upload-session PUT
    token_requests: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.storage.mkdir(parents=True, exist_ok=True)
        self.root_id = "0AROOT" + secrets.token_hex(4)
        self.files[self.root_id] = {"kind": "drive#file", "id": self.root_id, "name": "My Drive",
                                    "mimeType": FOLDER, "parents": [], "trashed": False, "version": "1"}
        self.permissions[self.root_id] = [self._owner_permission()]

    # -- test helpers -------------------------------------------------------------------------------
    def fail(self, method: str, path: str = "", **kwargs: Any) -> Fault:
        fault = Fault(method, path, **kwargs)
        self.faults.append(fault)
        return fault

    def expire_access_tokens(self) -> None:
        self.access_tokens.clear()

    def revoke_refresh_tokens(self) -> None:
        self.refresh_tokens.clear()

    def add_file(self, name: str, data: bytes = b"", mime: str = "application/octet-stream",
                 parent: str | None = None, file_id: str | None = None, **extra: Any) -> str:
        file_id = file_id or secrets.token_urlsafe(12)
        blob = self.storage / file_id
        blob.write_bytes(data)
        self._insert(file_id, name, mime, parent or self.root_id, blob, **extra)
        return file_id

    def replace_content(self, file_id: str, data: bytes) -> None:
        """Someone saves a new version of the blob: new bytes, size, MD5 and modifiedTime, same id."""
        (self.storage / file_id).write_bytes(data)
        self.files[file_id].update(size=str(len(data)), md5Checksum=hashlib.md5(data).hexdigest(),
                                   modifiedTime=time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()))
        self._changed(self.files[file_id])

    def children(self, parent: str) -> list[dict[str, Any]]:
        return [f for f in self.files.values() if parent in f["parents"]]

    def named(self, name: str) -> list[dict[str, Any]]:
        return [f for f in self.files.values() if f["name"] == name]

    def blob(self, file_id: str) -> bytes:
        return (self.storage / file_id).read_bytes()

    # -- model ---------------------------------------------------------------------------------------
    def _owner_permission(self) -> dict[str, Any]:
        return {"kind": "drive#permission", "id": "owner-" + ME, "type": "user", "role": "owner",
                "emailAddress": ME, "permissionDetails": []}

    def _insert(self, file_id: str, name: str, mime: str, parent: str, blob: Path | None, **extra: Any) -> dict:
        data = blob.read_bytes() if blob is not None and blob.stat().st_size < (64 << 20) else None
        md5 = hashlib.md5(data).hexdigest() if data is not None else self._md5_file(blob) if blob else None
        f = {"kind": "drive#file", "id": file_id, "name": name, "mimeType": mime, "parents": [parent],
             "trashed": False, "modifiedTime": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
             "version": "1",
             "webViewLink": f"https://drive.google.com/file/d/{file_id}/view?usp=drivesdk", **extra}
        if mime == FOLDER:
            f["webViewLink"] = f"https://drive.google.com/drive/folders/{file_id}"
        if not mime.startswith(NATIVE) and blob is not None:
            if blob != self.storage / file_id:
                shutil.move(blob, self.storage / file_id)
            f["size"] = str((self.storage / file_id).stat().st_size)
            f["md5Checksum"] = md5
        self.files[file_id] = f
        self.permissions[file_id] = [self._owner_permission()]
        return f

    @staticmethod
    def _changed(f: dict[str, Any]) -> None:
        """Drive's ``version``: "A monotonically increasing version number for the file. This reflects every
        change made to the file on the server, even those not visible to the user" (an int64 as a string)."""
        f["version"] = str(int(f["version"]) + 1)

    @staticmethod
    def _md5_file(path: Path) -> str:
        digest = hashlib.md5()
        with path.open("rb") as handle:
            while data := handle.read(1 << 20):
                digest.update(data)
        return digest.hexdigest()

    def _get(self, file_id: str) -> dict[str, Any] | None:
        if file_id == "root":
            file_id = self.root_id
        f = self.files.get(file_id)
        return f if f and not f["trashed"] else None

    def _check_create(self, body: dict[str, Any]) -> tuple[str, str] | JSONResponse:
        """(id, parent) for a create/copy body, or the error Drive would give."""
        parents = body.get("parents") or ["root"]
        if len(parents) != 1:
            return envelope(403, "cannotAddParent", "A shared drive item must have exactly one parent.")
        parent = self._get(parents[0])
        if parent is None:
            return not_found(parents[0])
        if parent["mimeType"] != FOLDER:
            return envelope(400, "badRequest", "The specified parent is not a folder.")
        new_id = body.get("id")
        if new_id is None:
            new_id = secrets.token_urlsafe(12)
        elif new_id in self.files:
            return envelope(409, "duplicate", "A file already exists with the provided ID.")
        elif new_id not in self.generated:
            return envelope(400, "invalidArgument", "The provided file ID is not usable.")
        return new_id, parent["id"]

    # -- ASGI ---------------------------------------------------------------------------------------
    @property
    def app(self) -> FakeDrive:
        """The ASGI application (the instance itself; uvicorn detects ASGI 3 from ``__call__``)."""
        return self

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        path = scope["path"]
        if path == "/token":
            response = await self._token(request)
        elif path == "/auth":
            response = self._authorize(request)
        else:
            response = await self._drive(request, send)
            if response is None:  # the connection was dropped on purpose
                return
        await response(scope, receive, send)

    async def _drop(self, send: Any, body: bytes = b'{"partial": ', length: int = 1000) -> None:
        """Start an answer and stop half-way: the client sees the connection break."""
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/octet-stream"),
                                (b"content-length", str(length).encode())]})
        await send({"type": "http.response.body", "body": body, "more_body": True})

    async def _trickle(self, send: Any, data: bytes, seconds: float = 3.0) -> None:
        """Answer with ``data``'s length (from the ``Range: bytes=N-`` asked for, if any) and send it a byte every
        ``TRICKLE_S`` for ``seconds``, then stop: never silent for a read time-out, far too slow to finish."""
        start = int(self._headers.get("range", "bytes=0-").removeprefix("bytes=").rstrip("-") or 0)
        headers = [(b"content-type", b"application/octet-stream"), (b"content-length", b"%d" % (len(data) - start))]
        if start:
            headers.append((b"content-range", b"bytes %d-%d/%d" % (start, len(data) - 1, len(data))))
        await send({"type": "http.response.start", "status": 206 if start else 200, "headers": headers})
        data = data[start:]
        for byte in data[:int(seconds / TRICKLE_S)]:
            await send({"type": "http.response.body", "body": bytes([byte]), "more_body": True})
            await asyncio.sleep(TRICKLE_S)

    def _fault(self, method: str, path: str, body: bytes, params: dict[str, str] | None = None) -> Fault | None:
        for fault in self.faults:
            if fault.times and fault.method == method and fault.path in path and \
                    fault.body_contains.encode() in body and fault.query.items() <= (params or {}).items():
                fault.times -= 1
                return fault
        return None

    # -- OAuth ------------------------------------------------------------------------------------
    def _issue(self, **extra: Any) -> JSONResponse:
        token = "ya29.fake-" + secrets.token_urlsafe(16)
        self.access_tokens[token] = time.time() + self.access_token_lifetime
        return JSONResponse({"access_token": token, "expires_in": self.access_token_lifetime,
                             "scope": DRIVE_SCOPE, "token_type": "Bearer", **extra})

    async def _token(self, request: Request) -> Response:
        form = dict(urllib.parse.parse_qsl((await request.body()).decode()))
        self.token_requests.append({k: str(v) for k, v in form.items()})
        fault = self._fault("POST", "/token", b"")
        if fault:
            return JSONResponse({"error": "temporarily_unavailable"}, status_code=fault.status)
        grant = form.get("grant_type")
        if grant == "refresh_token":
            if form.get("client_id") != self.client_id or form.get("client_secret") != self.client_secret:
                return JSONResponse({"error": "invalid_client", "error_description": "Unauthorized"}, status_code=401)
            if form.get("refresh_token") not in self.refresh_tokens:
                return JSONResponse({"error": "invalid_grant",
                                     "error_description": "Token has been expired or revoked."}, status_code=400)
            return self._issue(scope=form.get("scope") or DRIVE_SCOPE)  # a narrower scope asked is granted
        if grant == "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return self._jwt_grant(str(form.get("assertion", "")))
        if grant == "authorization_code":
            code = self.codes.pop(str(form.get("code")), None)
            if code is None or form.get("client_id") != self.client_id or \
                    form.get("client_secret") != self.client_secret or form.get("redirect_uri") != code["redirect_uri"]:
                return JSONResponse({"error": "invalid_grant", "error_description": "Bad Request"}, status_code=400)
            verifier = str(form.get("code_verifier", ""))
            challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
            if challenge != code["code_challenge"]:
                return JSONResponse({"error": "invalid_grant", "error_description": "Missing code verifier."},
                                    status_code=400)
            refresh = "1//new-refresh-" + secrets.token_urlsafe(8)
            self.refresh_tokens.add(refresh)
            return self._issue(refresh_token=refresh)
        return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)

    def _jwt_grant(self, assertion: str) -> Response:
        from google.auth import jwt

        if not self.service_account:
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        try:
            # google-auth signs for Google's token endpoint whatever token_uri says, and Google checks that
            claims = jwt.decode(assertion, certs=self.service_account["public_key_pem"],
                                audience="https://oauth2.googleapis.com/token")
        except ValueError as exc:
            return JSONResponse({"error": "invalid_grant", "error_description": str(exc)}, status_code=400)
        scopes = str(claims.get("scope", "")).split()
        if claims.get("iss") != self.service_account["email"] or len(scopes) != 1 or \
                not scopes[0].startswith(DRIVE_SCOPE):
            return JSONResponse({"error": "invalid_grant", "error_description": "bad claims"}, status_code=400)
        self.token_requests[-1].update(sub=str(claims.get("sub", "")), scope=scopes[0])
        return self._issue(scope=scopes[0])

    def _authorize(self, request: Request) -> Response:
        q = request.query_params
        if q.get("client_id") != self.client_id or q.get("code_challenge_method") != "S256" or \
                q.get("response_type") != "code" or q.get("access_type") != "offline":
            return JSONResponse({"error": "invalid_request"}, status_code=400)
        code = "4/code-" + secrets.token_urlsafe(8)
        self.codes[code] = {"redirect_uri": q["redirect_uri"], "code_challenge": q["code_challenge"]}
        query = urllib.parse.urlencode({"code": code, "state": q.get("state", ""), "scope": q.get("scope", "")})
        return RedirectResponse(f"{q['redirect_uri']}?{query}", status_code=302)

    # -- Drive ----------------------------------------------------------------------------------------
    async def _drive(self, request: Request, send: Any) -> Response | None:
        method, path = request.method, request.url.path
        self._headers = request.headers  # for handlers that read a header (X-Upload-Content-Length)
        query = list(request.query_params.multi_items())
        params = dict(query)
        self.requests.append((method, path, params))
        token = (request.headers.get("authorization") or "").removeprefix("Bearer ")
        if self.access_tokens.get(token, 0) < time.time():
            return envelope(401, "authError", "Invalid Credentials", locationType="header", location="Authorization")
        is_upload_put = method == "PUT" and "upload_id" in params
        if is_upload_put:
            self.upload_ranges.append(request.headers.get("content-range", ""))
        body_bytes = b"" if is_upload_put else await request.body()
        json_body = None
        content_type = request.headers.get("content-type", "")
        if body_bytes and content_type.startswith("application/json"):
            json_body = json.loads(body_bytes)
        metadata = None
        if content_type.startswith("multipart/related"):
            metadata, media_type, media = self._multipart(body_bytes, content_type)
        checked_body = json_body if json_body is not None else metadata
        method_id, problems = drive_discovery.check(method, path, query, checked_body)
        problems += self._house_rules(method_id, params)
        if problems:
            self.violations.extend(problems)
            return envelope(400, "oracleViolation", "; ".join(problems))
        fault = self._fault(method, path, body_bytes, params)
        if fault and fault.mode == "status":
            response = envelope(fault.status, fault.reason, f"injected {fault.status}")
            if fault.retry_after is not None:
                response.headers["Retry-After"] = fault.retry_after
            return response
        if is_upload_put:
            return await self._session_put(request, params["upload_id"], fault, send)
        handler = getattr(self, "_" + (method_id or "").replace("drive.", "").replace(".", "_"), None)
        if handler is None:
            return envelope(501, "notImplemented", f"the fake does not serve {method_id}")
        if metadata is not None:
            response = handler(params, path, metadata, (media_type, media))
        else:
            response = handler(params, path, json_body or {})
        if self.compress_downloads and response.status_code == 200 and \
                (params.get("alt") == "media" or path.endswith("/export")) and \
                "gzip" in request.headers.get("accept-encoding", ""):
            data = getattr(response, "body", None)
            response = Response(gzip.compress(data if data is not None else self.blob(self._file_id(path))),
                                media_type=response.media_type, headers={"Content-Encoding": "gzip"})
        if fault and fault.mode == "lost_answer":
            await self._drop(send)
            return None
        if fault and fault.mode == "trickle" and params.get("alt") == "media" and response.status_code == 200:
            await self._trickle(send, self.blob(self._file_id(path)))
            return None
        if fault and fault.mode == "ignore_range" and params.get("alt") == "media" and response.status_code == 200:
            scope = {**request.scope, "headers": [(k, v) for k, v in request.scope["headers"] if k != b"range"]}
            await response(scope, request.receive, send)  # the whole file, as if no Range was asked for
            return None
        if fault and fault.mode == "drop_mid_body" and params.get("alt") == "media" and response.status_code == 200:
            file_id = self._file_id(path)
            data = self.blob(file_id)
            await self._drop(send, data[: len(data) // 2], len(data))
            if fault.replace_with is not None:
                self.replace_content(file_id, fault.replace_with)
            return None
        return response

    def _house_rules(self, method_id: str | None, params: dict[str, str]) -> list[str]:
        """Research §0/§8 rules our client promises beyond what the document enforces."""
        problems = []
        by_id = method_id in {"drive.files.get", "drive.files.update", "drive.files.delete", "drive.files.copy",
                              "drive.files.create", "drive.permissions.create", "drive.permissions.list",
                              "drive.permissions.delete", "drive.files.list"}
        if by_id and params.get("supportsAllDrives") != "true":
            problems.append(f"{method_id}: supportsAllDrives=true missing")
        if method_id == "drive.files.list" and params.get("includeItemsFromAllDrives") != "true":
            problems.append("drive.files.list: includeItemsFromAllDrives=true missing")
        wants_fields = method_id in {"drive.files.get", "drive.files.update", "drive.files.copy", "drive.files.create",
                                     "drive.files.list", "drive.permissions.list", "drive.about.get"}
        if wants_fields and params.get("alt") != "media" and not params.get("fields"):
            problems.append(f"{method_id}: no explicit fields")
        if method_id == "drive.files.list" and "nextPageToken" not in params.get("fields", "nextPageToken"):
            problems.append("drive.files.list: fields without nextPageToken breaks pagination")
        return problems

    @staticmethod
    def _multipart(body: bytes, content_type: str) -> tuple[dict[str, Any], str, bytes]:
        boundary = content_type.split("boundary=", 1)[1].strip('"').encode()
        parts = body.split(b"--" + boundary)
        meta_part, media_part = parts[1], parts[2]
        meta = json.loads(meta_part.split(b"\r\n\r\n", 1)[1].strip())
        head, media = media_part.split(b"\r\n\r\n", 1)
        media_type = head.decode().split("Content-Type:", 1)[1].strip()
        return meta, media_type, media[:-2] if media.endswith(b"\r\n") else media

    def _fields(self, obj: Any, params: dict[str, str], default: str = "kind,id,name,mimeType") -> Response:
        return JSONResponse(project(obj, params.get("fields") or default))

    def _file_id(self, path: str) -> str:
        return urllib.parse.unquote(path.split("/files/", 1)[1].split("/")[0])

    # files.* ---------------------------------------------------------------------------------------
    def _files_generateIds(self, params: dict[str, str], path: str, body: Any) -> Response:
        ids = [secrets.token_urlsafe(12) for _ in range(int(params.get("count", "10")))]
        self.generated.update(ids)
        return JSONResponse({"kind": "drive#generatedIds", "space": "drive", "ids": ids})

    def _files_create(self, params: dict[str, str], path: str, body: dict[str, Any],
                      media: tuple[str, bytes] | None = None) -> Response:
        if params.get("uploadType") == "resumable":
            return self._start_session(params, body)
        checked = self._check_create(body)
        if isinstance(checked, Response):
            return checked
        new_id, parent = checked
        mime = body.get("mimeType") or (media[0] if media else "application/octet-stream")
        if mime.startswith(NATIVE) and mime not in CREATABLE_NATIVE:
            return envelope(400, "badRequest", f"Cannot create a file of type {mime}.")
        blob = None
        if not mime.startswith(NATIVE):
            blob = self.storage / f".new-{new_id}"
            blob.write_bytes(media[1] if media else b"")
        return self._fields(self._insert(new_id, body.get("name", "Untitled"), mime, parent, blob), params)

    def _files_get(self, params: dict[str, str], path: str, body: Any) -> Response:
        file_id = self._file_id(path)
        f = self._get(file_id)
        if f is None:
            return not_found(file_id)
        if params.get("alt") != "media":
            return self._fields(f, params)
        if f["mimeType"].startswith(NATIVE):
            return envelope(403, "fileNotDownloadable",
                            "Only files with binary content can be downloaded. Use Export with Docs Editors files.")
        return self._media(f["id"], f["mimeType"], params)

    def _media(self, file_id: str, mime: str, params: dict[str, str]) -> Response:
        from starlette.responses import FileResponse

        blob = self.storage / file_id
        return FileResponse(blob, media_type=mime)  # answers Range requests with 206

    def _files_export(self, params: dict[str, str], path: str, body: Any) -> Response:
        file_id = self._file_id(path)
        f = self._get(file_id)
        if f is None:
            return not_found(file_id)
        if f["mimeType"] not in EXPORTS:
            return envelope(403, "fileNotExportable", "Export only supports Docs Editors files.")
        if params["mimeType"] not in EXPORTS[f["mimeType"]]:
            return envelope(400, "badRequest", "The requested conversion is not supported.")
        return Response(f"exported {f['name']} as {params['mimeType']}".encode(), media_type=params["mimeType"])

    def _files_update(self, params: dict[str, str], path: str, body: dict[str, Any]) -> Response:
        file_id = self._file_id(path)
        f = self._get(file_id)
        if f is None:
            return not_found(file_id)
        parents = list(f["parents"])
        for removed in filter(None, params.get("removeParents", "").split(",")):
            if removed not in parents:
                return envelope(400, "badRequest", f"Parent {removed} is not a parent of the file.")
            parents.remove(removed)
        for added in filter(None, params.get("addParents", "").split(",")):
            target = self._get(added)
            if target is None:
                return not_found(added)
            if target["mimeType"] != FOLDER:
                return envelope(400, "badRequest", "The specified parent is not a folder.")
            if f["mimeType"] == FOLDER and target["id"] in self._subtree(f["id"]):
                return envelope(400, "badRequest", "The parent would create a cycle.")
            parents.append(target["id"])
        if len(parents) != 1:
            return envelope(403, "cannotAddParent", "Increasing the number of parents is not allowed.")
        f["parents"] = parents
        if "name" in body:
            f["name"] = body["name"]
        self._changed(f)
        return self._fields(f, params)

    def _subtree(self, file_id: str) -> list[str]:
        out, todo = [], [file_id]
        while todo:
            current = todo.pop()
            out.append(current)
            todo.extend(c["id"] for c in self.children(current))
        return out

    def _files_delete(self, params: dict[str, str], path: str, body: Any) -> Response:
        file_id = self._file_id(path)
        f = self._get(file_id)
        if f is None:
            return not_found(file_id)
        for item in self._subtree(f["id"]):
            self.files.pop(item, None)
            self.permissions.pop(item, None)
            (self.storage / item).unlink(missing_ok=True)
        return Response(status_code=204)

    def _files_copy(self, params: dict[str, str], path: str, body: dict[str, Any]) -> Response:
        file_id = self._file_id(path)
        src = self._get(file_id)
        if src is None:
            return not_found(file_id)
        if src["mimeType"] == FOLDER:
            return envelope(403, "fileNotCopyable", "Folders cannot be copied.")
        checked = self._check_create({"parents": src["parents"], **body})
        if isinstance(checked, Response):
            return checked
        new_id, parent = checked
        blob = None
        if not src["mimeType"].startswith(NATIVE):
            blob = self.storage / f".new-{new_id}"
            shutil.copyfile(self.storage / src["id"], blob)
        copy = self._insert(new_id, body.get("name", f"Copy of {src['name']}"), src["mimeType"], parent, blob)
        return self._fields(copy, params)

    def _files_list(self, params: dict[str, str], path: str, body: Any) -> Response:
        try:
            terms = parse_q(params.get("q", ""))
        except ValueError as exc:
            return envelope(400, "invalid", f"Invalid Value: {exc}", location="q", locationType="parameter")
        items = [f for f in self.files.values() if f["id"] != self.root_id]
        for key, op, value in terms:
            if key == "parents":
                parent = self.root_id if value == "root" else value
                items = [f for f in items if parent in f["parents"]]
            elif key == "trashed":
                items = [f for f in items if f["trashed"] is value]
            else:
                items = [f for f in items if (f[key] == value) == (op == "=")]
        items.sort(key=lambda f: f["id"])
        size = int(params.get("pageSize", "100"))
        if self.max_page:
            size = min(size, self.max_page)
        start = int(base64.b64decode(params["pageToken"]).decode()) if "pageToken" in params else 0
        page = {"kind": "drive#fileList", "incompleteSearch": False, "files": items[start:start + size]}
        if start + size < len(items):
            page["nextPageToken"] = base64.b64encode(str(start + size).encode()).decode()
        return self._fields(page, params, "kind,nextPageToken,incompleteSearch,files(kind,id,name,mimeType)")

    def _about_get(self, params: dict[str, str], path: str, body: Any) -> Response:
        return self._fields({"kind": "drive#about", "user": {"emailAddress": ME, "displayName": "Me"}}, params)

    # permissions.* ------------------------------------------------------------------------------------
    def _permissions_create(self, params: dict[str, str], path: str, body: dict[str, Any]) -> Response:
        file_id = self._file_id(path)
        f = self._get(file_id)
        if f is None:
            return not_found(file_id)
        kind, role = body["type"], body["role"]
        if kind in ("user", "group") and not body.get("emailAddress"):
            return envelope(400, "badRequest", "The permission emailAddress field is required.")
        if kind == "domain" and not body.get("domain"):
            return envelope(400, "badRequest", "The permission domain field is required.")
        if "sendNotificationEmail" in params and kind not in ("user", "group"):
            return envelope(400, "badRequest", "sendNotificationEmail is not allowed for this permission.")
        if role == "owner" and params.get("transferOwnership") != "true":
            return envelope(403, "forbidden",
                            "The transferOwnership parameter must be enabled when the permission role is 'owner'.")
        if "allowFileDiscovery" in body and kind not in ("domain", "anyone"):
            return envelope(400, "badRequest", "allowFileDiscovery is only for domain and anyone.")
        grantee = body.get("emailAddress") or body.get("domain") or "anyone"
        perms = self.permissions[f["id"]]
        existing = next((p for p in perms if p["type"] == kind and
                         (p.get("emailAddress") or p.get("domain") or "anyone") == grantee), None)
        if existing is None:
            existing = {"kind": "drive#permission", "id": secrets.token_hex(6), "type": kind,
                        "permissionDetails": [], **{k: body[k] for k in ("emailAddress", "domain",
                                                                         "allowFileDiscovery") if k in body}}
            perms.append(existing)
        existing["role"] = role
        self._changed(f)
        return self._fields(existing, params, "kind,id,type,role")

    def _permissions_list(self, params: dict[str, str], path: str, body: Any) -> Response:
        file_id = self._file_id(path)
        f = self._get(file_id)
        if f is None:
            return not_found(file_id)
        perms = self.permissions[f["id"]]
        size = int(params.get("pageSize", "100"))
        start = int(params.get("pageToken", "0"))
        page: dict[str, Any] = {"kind": "drive#permissionList", "permissions": perms[start:start + size]}
        if start + size < len(perms):
            page["nextPageToken"] = str(start + size)
        return self._fields(page, params, "kind,permissions(kind,id,type,role)")

    def _permissions_delete(self, params: dict[str, str], path: str, body: Any) -> Response:
        file_id = self._file_id(path)
        permission_id = urllib.parse.unquote(path.rsplit("/", 1)[1])
        perms = self.permissions.get(file_id if file_id != "root" else self.root_id)
        if perms is None or not any(p["id"] == permission_id for p in perms):
            return not_found(permission_id)
        perms[:] = [p for p in perms if p["id"] != permission_id]
        self._changed(self.files[file_id if file_id != "root" else self.root_id])
        return Response(status_code=204)

    # resumable uploads ----------------------------------------------------------------------------------
    def _start_session(self, params: dict[str, str], body: dict[str, Any]) -> Response:
        checked = self._check_create(body)
        if isinstance(checked, Response):
            return checked
        upload_id = secrets.token_urlsafe(16)
        blob = self.storage / f".session-{upload_id}"
        blob.touch()
        declared = self._headers.get("x-upload-content-length")
        self.sessions[upload_id] = Session(body, "application/octet-stream", blob, file_id=None,
                                           declared=int(declared) if declared is not None else None)
        location = f"{self.base_url}/upload/drive/v3/files?uploadType=resumable&upload_id={upload_id}"
        return Response(status_code=200, headers={"Location": location})

    def _range(self, session: Session) -> dict[str, str]:
        return {"Range": f"bytes=0-{session.received - 1}"} if session.received else {}

    async def _session_put(self, request: Request, upload_id: str, fault: Fault | None, send: Any) -> Response | None:
        session = self.sessions.get(upload_id)
        if session is None:
            return envelope(404, "notFound", "Upload session not found.")
        if session.file_id is not None:  # completed already: the status query answers with the file
            async for _ in request.stream():
                pass
            return JSONResponse(self.files[session.file_id])
        m = re.fullmatch(r"bytes (?:(\d+)-(\d+)|\*)/(\d+|\*)", request.headers.get("content-range", ""))
        if not m:
            return envelope(400, "badRequest", "Missing or malformed Content-Range.")
        if m.group(3) != "*":
            session.total = int(m.group(3))
            if session.declared is not None and session.total != session.declared:
                return envelope(400, "badRequest", f"Content-Range total {session.total} does not match the "
                                                   f"X-Upload-Content-Length {session.declared} of the session.")
        if m.group(2) is not None and session.declared is not None and int(m.group(2)) >= session.declared:
            return envelope(400, "badRequest", "The upload is larger than its X-Upload-Content-Length.")
        if m.group(1) is not None:
            start, end = int(m.group(1)), int(m.group(2))
            if start != session.received:
                return envelope(400, "badRequest", f"Chunk starts at {start}, the session has {session.received}.")
            length = end - start + 1
            last = session.total is not None and end + 1 == session.total
            if not last and length % QUANTUM:
                return envelope(400, "badRequest", "Chunk size must be a multiple of 256 KiB.")
            cut = fault is not None and fault.mode == "drop_mid_body"
            # a cut connection: half the body (in whole 256 KiB units) arrives and is persisted, the rest
            # is never read; the client finds the connection gone while it is still sending
            keep = (length // 2) // QUANTUM * QUANTUM if cut else length
            written = 0
            with session.blob.open("ab") as handle:
                async for data in request.stream():
                    part = data[: keep - written]
                    handle.write(part)
                    written += len(part)
                    if cut and written >= keep:
                        break
            if cut:
                session.received += written
                await self._drop(send)
                return None
            if written != length:
                return envelope(400, "badRequest", "Content-Range does not match the body length.")
            session.received += written
        else:
            async for _ in request.stream():
                pass
        if session.total is not None and session.received == session.total:
            checked = self._check_create(session.metadata)
            if isinstance(checked, Response):
                return checked
            new_id, parent = checked
            mime = session.metadata.get("mimeType") or request.headers.get("content-type", "application/octet-stream")
            f = self._insert(new_id, session.metadata.get("name", "Untitled"), mime, parent, session.blob)
            session.file_id = new_id
            return JSONResponse(f, status_code=200)
        return Response(status_code=308, headers=self._range(session))
