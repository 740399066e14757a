"""A fake Mailjet Send API v3.1 (``POST /v3.1/send``) for loopback tests, strict the way Mailjet documents.

It checks HTTP basic auth and validates the payload with Mailjet's rules and error shapes (research
mail.md §1–3): the four JSON error shapes (per-message ``Messages[].Errors``, global single error, global
``Errors`` list, 401 ``ErrorIdentifier/StatusCode/ErrorMessage``), template ids and authorised senders of
the account, ``SandboxMode``. Tests can also queue canned answers (429, 5xx as HTML or empty, slow
answers) that are served before validation, one per request.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import itertools
import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

AUTH_FAILURE = (
    "API key authentication/authorization failure. You may be unauthorized to access the API or your API key "
    "may be expired. Visit API keys management section to check your keys."
)
MAX_ATTACHMENTS = 15_000_000
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_MESSAGE_PROPERTIES = {
    "From", "Sender", "To", "Cc", "Bcc", "ReplyTo", "Subject", "TextPart", "HTMLPart", "TemplateID",
    "TemplateLanguage", "TemplateErrorReporting", "TemplateErrorDeliver", "Variables", "Attachments",
    "InlinedAttachments", "Headers", "CustomID", "EventPayload", "CustomCampaign", "DeduplicateCampaign",
    "Priority", "TrackOpens", "TrackClicks", "URLTags", "MonitoringCategory",
}


@dataclass
class Canned:
    """An answer served as-is to the next request (before auth and validation)."""

    status: int
    body: Any = None  # JSON body, or None
    text: str | None = None  # raw body (HTML, empty) when not JSON
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


def _error(code: str, message: str, related: list[str] | None = None, status: int = 400) -> dict[str, Any]:
    error: dict[str, Any] = {"ErrorIdentifier": str(uuid.uuid4()), "ErrorCode": code, "StatusCode": status,
                             "ErrorMessage": message}
    if related is not None:
        error["ErrorRelatedTo"] = related
    return error


class FakeMailjet:
    """State of the fake account: keys, templates, senders; what it received and what it accepted."""

    def __init__(self, api_key: str, api_secret: str, *, templates: set[int] | None = None,
                 senders: set[str] | None = None) -> None:
        self.api_key, self.api_secret = api_key, api_secret
        self.templates = templates if templates is not None else {4242}
        self.senders = senders if senders is not None else {"noreply@example.com"}
        self.requests: list[dict[str, Any]] = []  # every request: headers and raw body
        self.accepted: list[dict[str, Any]] = []  # messages accepted for delivery (not sandbox)
        self.canned: list[Canned] = []
        self._ids = itertools.count(70650219165027410)
        self._lock = threading.Lock()
        self.app = Starlette(routes=[Route("/v3.1/send", self.send, methods=["POST"])])

    def queue(self, *answers: Canned) -> None:
        self.canned.extend(answers)

    @property
    def payloads(self) -> list[Any]:
        return [json.loads(r["body"]) for r in self.requests if r["body"]]

    # -- the endpoint ------------------------------------------------------------------------------
    async def send(self, request: Request) -> Response:
        body = await request.body()
        with self._lock:
            self.requests.append({"headers": dict(request.headers), "body": body})
            canned = self.canned.pop(0) if self.canned else None
        if canned is not None:
            if canned.delay_s:
                await asyncio.sleep(canned.delay_s)
            if canned.body is not None:
                return JSONResponse(canned.body, canned.status, headers=canned.headers)
            return Response(canned.text or "", canned.status, headers=canned.headers, media_type="text/html")
        if not self._authorised(request.headers.get("authorization", "")):
            return JSONResponse({"ErrorIdentifier": str(uuid.uuid4()), "StatusCode": 401,
                                 "ErrorMessage": AUTH_FAILURE}, 401)
        try:
            payload = json.loads(body, parse_constant=_no_constant)  # strict RFC 8259, as Mailjet parses
        except ValueError:
            return JSONResponse(_error("mj-0002", "Malformed JSON, please review the syntax and properties types."),
                                400)
        return self._process(payload)

    def _authorised(self, header: str) -> bool:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, _, password = base64.b64decode(value).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        return user == self.api_key and password == self.api_secret

    def _process(self, payload: Any) -> Response:
        if not isinstance(payload, dict) or not isinstance(payload.get("Messages"), list):
            errors = [_error("mj-0004", 'Type mismatch. Expected type "Messages".', ["Messages"]),
                      _error("mj-0003", "Missing mandatory property.", ["Messages"])]
            return JSONResponse({"Errors": errors, "Messages": []}, 400)
        messages = payload["Messages"]
        if not messages or len(messages) > 50:
            code, text = ("mj-0007", "Empty array not allowed.") if not messages else ("mj-0008", "Array too long.")
            return JSONResponse({"Errors": [_error(code, text, ["Messages"])], "Messages": []}, 400)
        sandbox = payload.get("SandboxMode") is True
        results, status = [], 200
        for message in messages:
            errors = self._check(message) if isinstance(message, dict) else [
                _error("mj-0004", 'Type mismatch. Expected type "Message".', ["Messages"])]
            if errors:
                results.append({"Status": "error", "Errors": errors})
                status = max(status, max(e["StatusCode"] for e in errors))
                continue
            results.append(self._accept(message, sandbox))
        return JSONResponse({"Messages": results}, status)

    def _accept(self, message: dict[str, Any], sandbox: bool) -> dict[str, Any]:
        result: dict[str, Any] = {"Status": "success", "CustomID": message.get("CustomID", "")}
        for kind in ("To", "Cc", "Bcc"):
            result[kind] = []
            for recipient in message.get(kind) or []:
                mid = 0 if sandbox else next(self._ids)
                result[kind].append({
                    "Email": recipient["Email"], "MessageUUID": "" if sandbox else str(uuid.uuid4()),
                    "MessageID": mid, "MessageHref": f"https://api.mailjet.com/v3/REST/message/{mid}",
                })
        if not sandbox:
            with self._lock:
                self.accepted.append(message)
        return result

    # -- validation with Mailjet's codes (research §2.3) -----------------------------------------------
    def _check(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        errors: list[dict[str, Any]] = []
        for key, value in message.items():
            if key not in _MESSAGE_PROPERTIES:
                errors.append(_error("mj-0004", f'Unknown property "{key}".', [key]))
            elif value is None:
                errors.append(_error("mj-0003", "Property value cannot be null.", [key]))
        errors += self._check_addresses(message)
        subject = message.get("Subject")
        if subject is not None and (not isinstance(subject, str) or len(subject) > 255):
            errors.append(_error("mj-0006", "String too long.", ["Subject"]))
        errors += self._check_template(message)
        errors += self._check_attachments(message.get("Attachments"))
        return errors

    def _check_addresses(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        errors: list[dict[str, Any]] = []
        sender = message.get("From")
        if not isinstance(sender, dict) or not sender.get("Email"):
            errors.append(_error("mj-0003", "Missing mandatory property.", ["From"]))
        elif not _EMAIL.match(str(sender["Email"])):
            errors.append(_error("mj-0013", f'"{sender["Email"]}" is an invalid email address.', ["From.Email"]))
        elif sender["Email"] not in self.senders:
            errors.append(_error(
                "send-0008", f'"{sender["Email"]}" is not an authorized sender email address for your account.',
                ["From"], 403))
        if not message.get("To"):
            errors.append(_error("mj-0007", "Empty array not allowed.", ["To"]))
        total = set()
        for kind in ("To", "Cc", "Bcc"):
            recipients = message.get(kind) or []
            if not isinstance(recipients, list):
                errors.append(_error("mj-0004", f'Type mismatch. Expected type "{kind}".', [kind]))
                continue
            for index, recipient in enumerate(recipients):
                email = recipient.get("Email") if isinstance(recipient, dict) else None
                if not email:
                    errors.append(_error("mj-0012", "Empty string not allowed.", [f"{kind}[{index}].Email"]))
                elif not _EMAIL.match(email):
                    errors.append(_error("mj-0013", f'"{email}" is an invalid email address.',
                                         [f"{kind}[{index}].Email"]))
                else:
                    total.add(email.lower())
                if isinstance(recipient, dict) and set(recipient) - {"Email", "Name"}:
                    errors.append(_error("mj-0004", 'Type mismatch. Expected type "emailIn".',
                                         [f"{kind}[{index}]"]))
        if len(total) > 50:
            errors.append(_error("send-0015", "Too many recipients.", ["To", "Cc", "Bcc"]))
        return errors

    def _check_template(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        template_id = message.get("TemplateID")
        if template_id is None:
            if not (message.get("HTMLPart") or message.get("TextPart")):
                return [_error("send-0003", "At least one of TemplateID, HTMLPart or TextPart is required.",
                               ["HTMLPart", "TextPart", "TemplateID"])]
            return []
        if not isinstance(template_id, int) or isinstance(template_id, bool):
            return [_error("mj-0004", 'Type mismatch. Expected type "TemplateID".', ["TemplateID"])]
        errors = []
        if template_id not in self.templates:
            errors.append(_error("send-0010", f'Template id "{template_id}" doesn\'t exist for your account.',
                                 ["TemplateID"]))
        language = message.get("TemplateLanguage")
        if language is not None and not isinstance(language, bool):
            errors.append(_error("mj-0004", 'Type mismatch. Expected type "TemplateLanguage".',
                                 ["TemplateLanguage"]))
        variables = message.get("Variables")
        if variables is not None and not isinstance(variables, dict):
            errors.append(_error("mj-0004", 'Type mismatch. Expected type "Variables".', ["Variables"]))
        elif variables and _has_null(variables):
            errors.append(_error("mj-0003", "Property value cannot be null.", ["Variables"]))
        return errors

    def _check_attachments(self, attachments: Any) -> list[dict[str, Any]]:
        if attachments is None:
            return []
        if not isinstance(attachments, list):
            return [_error("mj-0004", 'Type mismatch. Expected type "Attachments".', ["Messages.Attachments"])]
        errors, total = [], 0
        for index, item in enumerate(attachments):
            for key in ("ContentType", "Filename", "Base64Content"):
                value = item.get(key) if isinstance(item, dict) else None
                if not isinstance(value, str) or not value:
                    errors.append(_error("mj-0012", "Empty string not allowed.", [f"Attachments[{index}].{key}"]))
            content = item.get("Base64Content") if isinstance(item, dict) else None
            if isinstance(content, str) and content:
                try:
                    total += len(base64.b64decode(content, validate=True))
                except binascii.Error:
                    errors.append(_error("mj-0004", "Invalid base64 content.",
                                         [f"Attachments[{index}].Base64Content"]))
        if total > MAX_ATTACHMENTS:
            errors.append(_error("mj-0011", "Payload size over limit.", ["Attachments"]))
        return errors


def _no_constant(word: str) -> Any:
    """``NaN``/``Infinity``: Python's ``json`` reads them, Mailjet answers mj-0002 (malformed JSON)."""
    raise ValueError(f"{word} is not JSON")


def _has_null(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, dict):
        return any(_has_null(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_null(v) for v in value)
    return False
