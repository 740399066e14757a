"""Reading a Mailjet Send API v3.1 answer: success, or a message that says what went wrong in words.

Mailjet answers errors in several body shapes (research mail.md §2.1): per-message ``Messages[].Errors``,
a single global error, a global ``Errors`` list, the ``ErrorIdentifier/StatusCode/ErrorMessage`` form of
401 and 5xx, and non-JSON (HTML or empty) bodies from the edge. The HTTP status alone is not enough (a
batch with one failure is a 400), so the body decides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import httpx

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Outcome:
    """What one answer means: ``ok``, else ``message`` (for the user) and whether a retry may help."""

    ok: bool
    message: str = ""
    retryable: bool = False
    references: tuple[str, ...] = ()  # MessageIDs on success, ErrorIdentifiers on failure (for logs)


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _snippet(text: str, limit: int = 200) -> str:
    """The first words of a non-JSON body (an HTML 503 page), tags and whitespace removed."""
    words = " ".join(re.sub(r"<[^>]*>", " ", text).split())
    return words if len(words) <= limit else words[: limit - 1] + "…"


def describe_error(error: dict[str, Any]) -> str:
    """``error send-0010: Template id "4242" doesn't exist… (field TemplateID; Mailjet error id 88b5…)``."""
    code = error.get("ErrorCode")
    text = str(error.get("ErrorMessage") or "no message").strip()
    words = f"error {code}: {text}" if code else text
    details = []
    related = error.get("ErrorRelatedTo")
    if related:
        fields = related if isinstance(related, list) else [related]
        details.append(("field " if len(fields) == 1 else "fields ") + ", ".join(map(str, fields)))
    if error.get("ErrorIdentifier"):
        details.append(f"Mailjet error id {error['ErrorIdentifier']}")
    return f"{words} ({'; '.join(details)})" if details else words


def _errors_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every error object of any JSON shape, per-message ones first."""
    errors: list[dict[str, Any]] = []
    messages = body.get("Messages")
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict) and message.get("Status") != "success":
                found = message.get("Errors")
                errors.extend(e for e in (found if isinstance(found, list) else []) if isinstance(e, dict))
    if isinstance(body.get("Errors"), list):
        errors.extend(e for e in body["Errors"] if isinstance(e, dict))
    if not errors and (body.get("ErrorMessage") or body.get("ErrorCode")):
        errors.append(body)
    return errors


def _succeeded(body: Any) -> tuple[bool, tuple[str, ...]]:
    messages = body.get("Messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages:
        return False, ()
    if not all(isinstance(m, dict) and m.get("Status") == "success" for m in messages):
        return False, ()
    ids = tuple(str(r.get("MessageID")) for m in messages for kind in ("To", "Cc", "Bcc")
                for r in (m.get(kind) or []) if isinstance(r, dict) and r.get("MessageID") is not None)
    return True, ids


def interpret(response: httpx.Response) -> Outcome:
    """The meaning of one answer of ``POST /v3.1/send``."""
    status = response.status_code
    body = _json(response)
    if status == 200:
        ok, ids = _succeeded(body)
        if ok:
            return Outcome(True, references=ids)
    errors = _errors_of(body) if isinstance(body, dict) else []
    described = "; ".join(describe_error(e) for e in errors)
    references = tuple(str(e["ErrorIdentifier"]) for e in errors if e.get("ErrorIdentifier"))
    # a per-message error with a 5xx status is transient too (nodejs SDK guidance)
    transient = status in RETRYABLE_STATUS or any(_int(e.get("StatusCode")) >= 500 for e in errors)
    if status == 200:
        message = (f"Mailjet did not accept the message: {described}" if described else
                   "Mailjet answered HTTP 200 without a success status; the message may not have been sent")
    elif status == 401:
        message = (f"Mailjet authentication failed (HTTP 401): {described or 'no details'}. "
                   "Check MAILJET_API_KEY (public key) and MAILJET_API_SECRET (private key).")
    elif status == 429:
        message = "Mailjet rate limit (HTTP 429): too many requests" + (f": {described}" if described else "")
    elif status >= 500:
        text = described or _snippet(response.text)
        message = f"Mailjet service error (HTTP {status})" + (f": {text}" if text else ", empty answer")
    elif described:
        message = f"Mailjet refused the message (HTTP {status}): {described}"
    else:
        text = _snippet(response.text)
        message = f"Mailjet answered HTTP {status}" + (f": {text}" if text else " with an empty body")
    return Outcome(False, message, retryable=transient, references=references)


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
