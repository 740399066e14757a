"""Google sign-in for the Drive resource: access tokens from a refresh token or a service account.

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

DRIVE_SCOPE = "https://www.googleapis.com/auth/drive"
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
                                retryable=True) from None
        self._stale = False


def user_token_source(client: httpx.Client, *, client_id: str, client_secret: str, refresh_token: str,
                      token_url: str) -> TokenSource:
    """Installed-app / web sign-in: GOOGLE_CLIENT_ID, GOOGLE_CLIENT_SECRET, GOOGLE_REFRESH_TOKEN."""
    creds = user_credentials.Credentials(
        token=None, refresh_token=refresh_token, token_uri=token_url, client_id=client_id,
        client_secret=client_secret,
    )
    return TokenSource(creds, "refresh_token", client)


def service_account_token_source(client: httpx.Client, *, key_file: str, token_url: str | None,
                                 subject: str | None) -> TokenSource:
    """A service account key file (GOOGLE_APPLICATION_CREDENTIALS), optionally impersonating ``subject``."""
    field = "GOOGLE_APPLICATION_CREDENTIALS"
    try:
        info = json.loads(Path(key_file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise InvalidInput(field, "must name a readable service account JSON key file") from None
    if not isinstance(info, dict) or info.get("type") != "service_account":
        raise InvalidInput(field, "is not a service account key (type must be service_account)")
    if token_url:
        info = {**info, "token_uri": token_url}
    try:
        creds = service_account.Credentials.from_service_account_info(info, scopes=[DRIVE_SCOPE])
    except (ValueError, KeyError) as exc:
        raise InvalidInput(field, f"service account key is incomplete ({type(exc).__name__})") from None
    if subject:
        creds = creds.with_subject(subject)
    return TokenSource(creds, "service_account", client)
