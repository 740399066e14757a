"""Google sign-in for an installed app: the loopback flow with PKCE that yields a refresh token.

Google blocked the copy-paste "OOB" flow in 2023; desktop apps receive the authorisation code on a
short-lived HTTP server on 127.0.0.1 (research §4). ``prompt=consent`` and ``access_type=offline`` make
Google return a refresh token every time. The code, the verifier and the tokens are never logged.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.server
import secrets
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any

import httpx

from connector_ops.kernel.errors import InvalidInput, UpstreamError, host_of
from connector_ops.resources.drive.google_auth import DRIVE_SCOPE
from connector_ops.resources.http_client import make_client
from connector_ops.resources.proxies import ProxyFailure

DEFAULT_AUTH_URL = "https://accounts.google.com/o/oauth2/v2/auth"
PAGE = b"<html><body><h3>connector-ops: sign-in finished.</h3>You can close this tab.</body></html>"


class _CallbackServer(http.server.HTTPServer):
    """The loopback server of one sign-in: the answer the consent page sent back, and when it came."""

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, _Callback)
        self.result: dict[str, str] = {}
        self.done = threading.Event()


class _Callback(http.server.BaseHTTPRequestHandler):
    server: _CallbackServer

    def do_GET(self) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        if "code" not in query and "error" not in query:  # e.g. /favicon.ico
            self.send_response(404)
            self.end_headers()
            return
        self.server.result.update({k: v[0] for k, v in query.items()})
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)
        self.server.done.set()

    def log_message(self, format: str, *args: Any) -> None:  # the request line holds the code: say nothing
        pass


def authorization_url(auth_url: str, client_id: str, redirect_uri: str, challenge: str, state: str) -> str:
    query = urllib.parse.urlencode({
        "client_id": client_id, "redirect_uri": redirect_uri, "response_type": "code", "scope": DRIVE_SCOPE,
        "access_type": "offline", "prompt": "consent", "code_challenge": challenge,
        "code_challenge_method": "S256", "state": state,
    })
    return f"{auth_url}?{query}"


def sign_in(*, client_id: str, client_secret: str, auth_url: str, token_url: str,
            open_url: Callable[[str], Any], port: int = 0, timeout_s: float = 300.0) -> str:
    """Run the flow: show the consent page with ``open_url``, wait for the code, return the refresh token."""
    verifier = secrets.token_urlsafe(64)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    state = secrets.token_urlsafe(16)
    server = _CallbackServer(("127.0.0.1", port))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    redirect_uri = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        open_url(authorization_url(auth_url, client_id, redirect_uri, challenge, state))
        if not server.done.wait(timeout_s):
            raise UpstreamError(f"no answer from the Google sign-in page within {timeout_s:.0f} s", status=408)
        result = server.result
    finally:
        server.shutdown()
        server.server_close()
    if result.get("state") != state:
        raise UpstreamError("the sign-in answer did not match this sign-in (state mismatch); try again", status=400)
    if "error" in result:
        raise UpstreamError(f"Google sign-in was not completed: {result['error']}", status=401)
    response = _exchange(token_url, {
        "grant_type": "authorization_code", "code": result["code"], "redirect_uri": redirect_uri,
        "client_id": client_id, "client_secret": client_secret, "code_verifier": verifier,
    })
    if response.status_code != 200:
        error = ""
        with contextlib.suppress(ValueError, AttributeError):
            error = str(response.json().get("error", ""))
        raise UpstreamError(f"Google refused the sign-in code ({error or response.status_code})", status=401)
    refresh_token = response.json().get("refresh_token")
    if not refresh_token:
        raise UpstreamError("Google returned no refresh token; revoke the app's access and sign in again",
                            status=401)
    return str(refresh_token)


def _exchange(token_url: str, form: dict[str, str]) -> httpx.Response:
    """The code exchanged at the token endpoint by the client every Drive call uses (:func:`make_client`):
    through the environment's proxies as they are (``NO_PROXY``'s networks, a proxy's refusal named without its
    password), and a failure to get there is the token endpoint's, a 503, as a refresh's is
    (:class:`.google_auth.TokenSource`). Not retried: a code is good once."""
    with make_client(timeout=httpx.Timeout(30.0)) as client:
        try:
            return client.post(token_url, data=form)
        except ProxyFailure as exc:
            raise UpstreamError(f"could not reach the Google token endpoint: {exc}", status=502) from None
        except httpx.TransportError as exc:
            raise UpstreamError(f"could not reach the Google token endpoint at {host_of(token_url)} "
                                f"({type(exc).__name__}: {exc})", status=503) from None


def require(value: str | None, name: str) -> str:
    if not value:
        raise InvalidInput(name, "is required to sign in (create a 'Desktop app' OAuth client in Google Cloud)")
    return value
