"""Google sign-in for the Drive resource: access tokens from a refresh token, a credentials file
(``GOOGLE_APPLICATION_CREDENTIALS``: a service-account key or an ``authorized_user`` file such as
``gcloud auth application-default login`` writes) or Application Default Credentials (``google.auth.default``:
the gcloud file, the metadata server — workload identity on Kubernetes/GKE), with a configurable Drive scope.

google-auth does the OAuth parts (refresh grant, RS256-signed JWT bearer grant, ``expires_in`` parsing,
retrying the token endpoint on 429/5xx); it ships no httpx transport (research §4), so
:class:`HttpxAuthRequest` adapts our one ``httpx.Client`` to its tiny ``Request`` interface.  We call only
``Credentials.refresh`` (never ``before_request``), so google-auth makes no other network calls.

Error messages are built from the token endpoint's ``error`` code only: they never carry a token, a
client secret or a private key.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
from google.auth import exceptions as gexc
from google.auth import transport
from google.oauth2 import credentials as user_credentials
from google.oauth2 import service_account

from connector_ops.kernel.errors import InvalidInput, UpstreamError
from connector_ops.resources.proxies import ProxyFailure

DRIVE_SCOPE = "https://www.googleapis.com/auth/drive"
#: The Drive scopes a deployment may ask for (GOOGLE_DRIVE_SCOPE), by short name.
DRIVE_SCOPES = {name: f"https://www.googleapis.com/auth/{name}" for name in ("drive", "drive.file", "drive.readonly")}
DEFAULT_TOKEN_URL = "https://oauth2.googleapis.com/token"
#: Refresh this long before Google's expiry (research §8: at least 4 minutes).
REFRESH_MARGIN = dt.timedelta(minutes=4)

SIGN_IN_AGAIN = (
    "run `connector-ops drive login` and set GOOGLE_REFRESH_TOKEN to the new token "
    "(refresh tokens of apps in Google's 'Testing' status expire after 7 days)"
)


class SignInRequired(UpstreamError):
    """The stored Google credentials can no longer obtain an access token (status 401)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=401)


class ProxyRefused(gexc.TransportError):
    """The proxy refused the token request (a 407, a 403): the same request gets the same answer until the
    proxy's settings or policy change, so it is not worth another try."""


class _Response(transport.Response):
    def __init__(self, response: httpx.Response) -> None:
        self._response = response

    @property
    def status(self) -> int:
        return self._response.status_code

    @property
    def headers(self) -> Mapping[str, str]:
        return self._response.headers

    @property
    def data(self) -> bytes:
        return self._response.content


class HttpxAuthRequest(transport.Request):
    """google-auth's transport interface over an ``httpx.Client``."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def __call__(self, url: str, method: str = "GET", body: bytes | None = None,
                 headers: Mapping[str, str] | None = None, timeout: float | None = None,
                 **kwargs: Any) -> _Response:
        try:
            response = self.client.request(method, url, content=body, headers=headers,
                                           timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT)
        except ProxyFailure as exc:  # names the proxy (never its password) and the host
            raise (gexc.TransportError if exc.retryable else ProxyRefused)(str(exc)) from None
        except httpx.HTTPError as exc:  # the URL is public; the body (secrets) is never in the message
            raise gexc.TransportError(f"{type(exc).__name__} while contacting the token endpoint") from None
        return _Response(response)


def _refresh_error(exc: gexc.RefreshError, what: str) -> UpstreamError:
    """Turn google-auth's error into ours, naming only the OAuth error code."""
    data = exc.args[1] if len(exc.args) > 1 and isinstance(exc.args[1], Mapping) else {}
    code = str(data.get("error") or "")
    if not code and exc.args and isinstance(exc.args[0], str):
        code = exc.args[0].split(":", 1)[0].strip() if ":" in exc.args[0] else ""
    if code == "invalid_grant" and what == "service account":
        return SignInRequired("Google refused the service account (invalid_grant): check that the key in "
                              "GOOGLE_APPLICATION_CREDENTIALS is still active and the machine's clock is right")
    if code == "invalid_grant":
        return SignInRequired(f"Google sign-in has expired or was revoked ({what}: invalid_grant); {SIGN_IN_AGAIN}")
    if code in ("invalid_client", "unauthorized_client"):
        hint = ("check GOOGLE_CLIENT_ID and GOOGLE_CLIENT_SECRET" if what == "refresh token"
                else "check the service account key and its domain-wide delegation")
        return SignInRequired(f"Google refused the client ({code}); {hint}")
    if code == "invalid_scope":
        return SignInRequired(f"Google refused the Drive scope ({code}); {SIGN_IN_AGAIN}")
    if getattr(exc, "retryable", False):
        return UpstreamError("the Google token endpoint is unavailable; try again later", status=503,
                             retryable=True)
    return SignInRequired(f"Google refused to issue an access token ({code or 'unknown error'})")


class TokenSource:
    """Hands out a valid access token, refreshing it early, once per expiry, across threads."""

    def __init__(self, credentials: Any, kind: str, client: httpx.Client) -> None:
        self.credentials = credentials
        self.kind = kind  # "refresh_token" | "service_account"
        self._request = HttpxAuthRequest(client)
        self._lock = threading.Lock()
        self._stale = True

    def token(self) -> str:
        with self._lock:
            if self._stale or self._expiring():
                self._refresh()
            return str(self.credentials.token)

    def invalidate(self, used: str | None = None) -> None:
        """The API answered 401 to ``used``: the next :meth:`token` refreshes (unless another thread did)."""
        with self._lock:
            if used is None or used == self.credentials.token:
                self._stale = True

    def check(self) -> dict[str, Any]:
        """Spec 6 "Check refresh token": obtain a fresh access token now; raise if the credentials are dead."""
        with self._lock:
            self._refresh()
            expiry = self.credentials.expiry
        seconds = None
        if expiry is not None:
            seconds = max(0, int((expiry - dt.datetime.now(dt.UTC).replace(tzinfo=None)).total_seconds()))
        return {"valid": True, "credentials": self.kind, "expiresInSeconds": seconds}

    def _expiring(self) -> bool:
        expiry = self.credentials.expiry  # naive UTC, as google-auth keeps it
        if expiry is None:
            return False
        return dt.datetime.now(dt.UTC).replace(tzinfo=None) >= expiry - REFRESH_MARGIN

    def _refresh(self) -> None:
        what = "refresh token" if self.kind == "refresh_token" else "service account"
        try:
            self.credentials.refresh(self._request)
        except gexc.RefreshError as exc:
            raise _refresh_error(exc, what) from None
        except gexc.TransportError as exc:
            raise UpstreamError(f"could not reach the Google token endpoint: {exc}", status=503,
                                retryable=not isinstance(exc, ProxyRefused)) from None
        self._stale = False


def user_token_source(client: httpx.Client, *, client_id: str, client_secret: str, refresh_token: str,
                      token_url: str) -> TokenSource:
    """Installed-app / web sign-in: GOOGLE_CLIENT_ID, GOOGLE_CLIENT_SECRET, GOOGLE_REFRESH_TOKEN."""
    creds = user_credentials.Credentials(
        token=None, refresh_token=refresh_token, token_uri=token_url, client_id=client_id,
        client_secret=client_secret,
    )
    return TokenSource(creds, "refresh_token", client)


def scope_url(scope: str) -> str:
    """The OAuth scope URL of a short Drive scope name (``drive``, ``drive.file``, ``drive.readonly``)."""
    if scope not in DRIVE_SCOPES:
        raise InvalidInput("GOOGLE_DRIVE_SCOPE", f"must be one of {', '.join(DRIVE_SCOPES)}, not {scope!r}")
    return DRIVE_SCOPES[scope]


def key_file_token_source(client: httpx.Client, *, key_file: str, token_url: str | None, subject: str | None,
                          scope: str = "drive") -> TokenSource:
    """GOOGLE_APPLICATION_CREDENTIALS: a service-account key (optionally impersonating ``subject``) or an
    ``authorized_user`` file (``gcloud auth application-default login``; a client id/secret and refresh token)."""
    field = "GOOGLE_APPLICATION_CREDENTIALS"
    try:
        info = json.loads(Path(key_file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise InvalidInput(field, "must name a readable JSON credentials file") from None
    kind = info.get("type") if isinstance(info, dict) else None
    if kind not in ("service_account", "authorized_user"):
        raise InvalidInput(field, "must be a service account key or an authorized_user file "
                                  "(type service_account or authorized_user); for other kinds use GOOGLE_USE_ADC")
    if token_url:
        info = {**info, "token_uri": token_url}
    scopes = [scope_url(scope)]
    try:
        if kind == "authorized_user":
            if subject:
                raise InvalidInput("GOOGLE_IMPERSONATE_SUBJECT", "needs a service account key, not user credentials")
            creds = user_credentials.Credentials.from_authorized_user_info(info, scopes=scopes)
            creds = creds.with_token_uri(info["token_uri"]) if token_url else creds  # the loader forces Google's
        else:
            creds = service_account.Credentials.from_service_account_info(info, scopes=scopes)
            if subject:
                creds = creds.with_subject(subject)
    except (ValueError, KeyError) as exc:
        raise InvalidInput(field, f"{kind} credentials are incomplete ({type(exc).__name__})") from None
    return TokenSource(creds, kind, client)


def default_token_source(client: httpx.Client, *, scope: str = "drive", token_url: str | None = None) -> TokenSource:
    """Application Default Credentials (``google.auth.default``): GOOGLE_APPLICATION_CREDENTIALS, the gcloud
    ADC file, then the metadata server (GCE, GKE workload identity) — how deployed workers are signed in.
    ``token_url`` replaces the token endpoint of file-based credentials (metadata-server ones have none)."""
    import google.auth

    try:
        creds, _project = google.auth.default(scopes=[scope_url(scope)])
    except gexc.DefaultCredentialsError as exc:
        raise InvalidInput("GOOGLE_USE_ADC", f"found no Application Default Credentials ({exc})") from None
    if token_url and hasattr(creds, "with_token_uri"):
        creds = creds.with_token_uri(token_url)
    return TokenSource(creds, "application_default", client)
