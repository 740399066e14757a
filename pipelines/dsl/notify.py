"""``notify:`` in a pipeline file: mail the pipeline's products when a run succeeds and/or fails.

    notify:
      - when: [success, failure]            # default: both
        message:                            # the input of mail.send_transactional_message
          from: "Sales reports <reports@example.com>"
          recipients: [{to: sales-team@example.com}]
          subject: "sales_report: ${run.status}"
          templateId: 1
          templateVariables: {status: "${run.status}", error: "${run.error}", report: "${asset:sales/report_csv}"}
          attachments: ["${asset:sales/report_csv}"]

The message is sent through the configured mail backend (Mailjet, SMTP or the outbox) once the run has
ended, so it can only name what outlives the run: ``${run.status}`` (``success`` / ``failure``),
``${run.id}``, ``${run.job}``, ``${run.error}`` (what failed, empty on success) and ``${asset:KEY}`` —
the data the run materialised for asset ``KEY`` (an ``asset:`` step of this pipeline): exactly one
reference takes the platform file itself (an attachment; a template variable gets the whole descriptor),
inside a longer string its link (a virtual file: its id). An asset the run did not get to (a failure
before its step) is left out of the attachments and is empty elsewhere. ``$${`` writes a literal ``${``.

``${run.error}`` has one line per failed step and may be long; in a field that is one header line
(``subject``, ``from``, a recipient's ``to`` or ``name``) it is written on one line (the steps joined by
``; ``, whitespace collapsed) and the subject shortened to its 255 characters with ``…``: the mail action
refuses line breaks and longer subjects there, and the failure mail would be lost. Template variables get
the whole text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from connector_ops.pipelines.dsl import references as r
from connector_ops.pipelines.dsl.model import Notify, Step
from connector_ops.pipelines.dsl.sections import Report, known_mapping
from connector_ops.resources.mail.message import CONTROL, MAX_SUBJECT_LENGTH

NOTIFY_KEYS = ("when", "message")
WHEN = ("success", "failure")
RUN_FIELDS = ("status", "id", "job", "error")
MAIL_ACTION = "mail.send_transactional_message"
_TOKEN = re.compile(r"\$\$\{|\$\{([^{}]*)\}")
_ASSET_KEY = re.compile(r"^[A-Za-z0-9_-]+(/[A-Za-z0-9_-]+)*$")
_ERROR_CHARS = 2000
#: the key of the run facts holding ``${run.error}`` as it goes in a one-line field (see run_facts)
ERROR_LINE = "error, one line"
#: the message's fields that are one header line, with their length limit (None: the action sets none)
ONE_LINE_FIELDS: dict[str, int | None] = {"from": None, "subject": MAX_SUBJECT_LENGTH}
ONE_LINE_RECIPIENT_FIELDS = ("to", "name")

#: a reference of a notification: ("run", field) or ("asset", key)
NotifyRef = tuple[str, str]


def parse_ref(inner: str) -> NotifyRef:
    """``run.status`` -> ("run", "status"); ``asset:sales/report`` -> ("asset", "sales/report")."""
    body = inner.strip()
    if body.startswith("asset:") and _ASSET_KEY.fullmatch(body[6:].strip()):
        return "asset", body[6:].strip()
    if body.startswith("run.") and body[4:] in RUN_FIELDS:
        return "run", body[4:]
    raise ValueError(f"${{{inner}}}: a notification names only ${{run.{'|'.join(RUN_FIELDS)}}} or ${{asset:KEY}} "
                     "(the steps' outputs are gone when the run has ended)")


def template_parts(text: str) -> list[str | NotifyRef]:
    """``text`` split into literal strings and references (``ValueError`` names a bad one)."""
    parts: list[str | NotifyRef] = []
    last = 0
    for match in _TOKEN.finditer(text):
        if match.start() > last:
            parts.append(text[last:match.start()])
        parts.append("${" if match.group(0) == "$${" else parse_ref(match.group(1)))
        last = match.end()
    if last < len(text):
        parts.append(text[last:])
    return parts


def run_facts(status: str, run_id: str, job: str, failed: Sequence[str]) -> dict[str, str]:
    """What ``${run.…}`` names, from how the run ended and its failed steps (``step: error`` each)."""
    return {"status": status, "id": run_id, "job": job, "error": "\n".join(failed)[:_ERROR_CHARS],
            ERROR_LINE: "; ".join(" ".join(CONTROL.sub(" ", step).split()) for step in failed)[:_ERROR_CHARS]}


def resolve_message(message: Mapping[str, Any], run: Mapping[str, str], assets: Mapping[str, Any]) -> dict[str, Any]:
    """A notification's mail input with its references replaced; its one-line fields get one-line text."""
    resolved: dict[str, Any] = {}
    for key, value in message.items():
        if key in ONE_LINE_FIELDS:
            item = _one_line(value, run, assets, ONE_LINE_FIELDS[key])
        elif key == "recipients" and isinstance(value, list):
            item = [_recipient(r, run, assets) for r in value]
        else:
            item = resolve(value, run, assets)
        resolved[key] = "" if item is None else item
    return resolved


def _recipient(value: Any, run: Mapping[str, str], assets: Mapping[str, Any]) -> Any:
    if not isinstance(value, Mapping):
        return resolve(value, run, assets)
    fields = {k: _one_line(v, run, assets, None) if k in ONE_LINE_RECIPIENT_FIELDS else resolve(v, run, assets)
              for k, v in value.items()}
    return {k: "" if v is None else v for k, v in fields.items()}


def _one_line(value: Any, run: Mapping[str, str], assets: Mapping[str, Any], limit: int | None) -> Any:
    """``value`` resolved for a one-line field: ``${run.error}`` on one line, shortened (with ``…``) so that
    the whole fits ``limit``; the rest of the text is the caller's and stays as written."""
    if not isinstance(value, str):
        return resolve(value, run, assets)
    parts = template_parts(value)
    errors = parts.count(("run", "error"))
    if not errors:
        return resolve(value, run, assets)
    error = run[ERROR_LINE]  # made by run_facts
    rest = "".join(p if isinstance(p, str) else _text(p, run, assets) for p in parts if p != ("run", "error"))
    if limit is not None and len(rest) + errors * len(error) > limit:
        width = max(limit - len(rest), 0) // errors
        error = error[:width - 1].rstrip() + "…" if width else ""
    return "".join(p if isinstance(p, str) else error if p == ("run", "error") else _text(p, run, assets)
                   for p in parts)


def resolve(value: Any, run: Mapping[str, str], assets: Mapping[str, Any]) -> Any:
    """``value`` with its references replaced; an attachment of an asset the run did not make is dropped."""
    if isinstance(value, str):
        parts = template_parts(value)
        if len(parts) == 1 and isinstance(parts[0], tuple):
            kind, name = parts[0]
            return run[name] if kind == "run" else assets.get(name)
        return "".join(p if isinstance(p, str) else _text(p, run, assets) for p in parts)
    if isinstance(value, Mapping):  # a template variable may not be null: an asset not made is empty
        return {k: "" if (v := resolve(item, run, assets)) is None else v for k, item in value.items()}
    if isinstance(value, list):
        return [item for item in (resolve(v, run, assets) for v in value) if item is not None]
    return value


def _text(ref: NotifyRef, run: Mapping[str, str], assets: Mapping[str, Any]) -> str:
    kind, name = ref
    if kind == "run":
        return run[name]
    data = assets.get(name)
    if isinstance(data, Mapping):  # a platform file: where to open it
        return str(data.get("link") or data.get("name") or "")
    return "" if data is None else str(data)


def asset_refs(message: Any) -> set[str]:
    """The asset keys ``message`` names (for a valid message)."""
    return {p[1] for _loc, text in r.walk_strings(message) for p in template_parts(text)
            if isinstance(p, tuple) and p[0] == "asset"}


def parse_notify(raw: Any, steps: Sequence[Step], report: Report,
                 check_message: Callable[[dict[str, Any], tuple[str | int, ...]], None]) -> list[Notify]:
    """The ``notify`` entries (a mapping or a list of them); every problem goes to ``report``.

    ``check_message`` validates the literal parts of a message with the mail action's input model.
    """
    if raw is None:
        return []
    items = [raw] if isinstance(raw, Mapping) else raw
    if not isinstance(items, list):
        report(("notify",), "`notify` must be a mapping {when: [...], message: {...}} or a list of them")
        return []
    assets = {"/".join(s.asset.key): s.asset.field for s in steps if s.asset is not None}
    found = []
    for i, item in enumerate(items):
        path: tuple[str | int, ...] = ("notify", i) if isinstance(raw, list) else ("notify",)
        entry = _entry(item, path, assets, report, check_message)
        if entry is not None:
            found.append(entry)
    return found


def _entry(item: Any, path: tuple[str | int, ...], assets: Mapping[str, str], report: Report,
           check_message: Callable[[dict[str, Any], tuple[str | int, ...]], None]) -> Notify | None:
    ok = known_mapping(item, path, "notify", NOTIFY_KEYS,
                       "a notification is a mapping {when: [success, failure], message: {...}}", report)
    if ok is None:
        return None
    when = item.get("when", list(WHEN))
    when = [when] if isinstance(when, str) else when
    if not isinstance(when, list) or not when or any(w not in WHEN for w in when):
        report((*path, "when"), f"`when` must list {' and/or '.join(WHEN)}, got {item.get('when')!r}")
        ok = False
    message = item.get("message")
    if not isinstance(message, Mapping):
        report((*path, "message"), f"`message` is required: the input of {MAIL_ACTION}")
        return None
    for loc, text in r.walk_strings(message):
        try:
            parts = template_parts(text)
        except ValueError as exc:
            report((*path, "message", *loc), str(exc))
            ok = False
            continue
        for part in parts:
            if isinstance(part, tuple) and part[0] == "asset" and part[1] not in assets:
                known = ", ".join(sorted(assets)) or "none"
                report((*path, "message", *loc), f"${{asset:{part[1]}}}: no step of this pipeline is that asset "
                                                 f"(its assets: {known})")
                ok = False
    for j, attachment in enumerate(message.get("attachments") or []):
        pieces = template_parts(attachment) if isinstance(attachment, str) and ok else None
        if pieces is None or len(pieces) != 1 or not isinstance(pieces[0], tuple) or pieces[0][0] != "asset" \
                or assets.get(pieces[0][1]) != "platformFile":
            report((*path, "message", "attachments", j),
                   "an attachment is exactly ${asset:KEY} of an asset step whose data is a platform file")
            ok = False
    if ok:
        check_message({k: v for k, v in message.items() if k != "attachments"}, (*path, "message"))
    if not ok:
        return None
    return Notify(when=tuple(dict.fromkeys(when)), message=dict(message))
