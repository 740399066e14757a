"""Local e-mail templates for the SMTP backend: ``<templates_dir>/<templateId>/`` rendered with Jinja2.

Layout of one template (``templateId`` 4242)::

    templates/4242/subject.j2      optional; one line (surrounding whitespace is dropped)
    templates/4242/body.txt.j2     plain-text part  } at least one of the two
    templates/4242/body.html.j2    HTML part        } (both: multipart/alternative)

Variables come from ``templateVariables`` (``{{ first_name }}``). A missing variable is an error, not a
blank (``StrictUndefined``); HTML is autoescaped, text and subject are not. Templates run in Jinja's
sandbox, so a template cannot reach into Python objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
from jinja2.sandbox import SandboxedEnvironment

from connector_ops.kernel.errors import ActionFailed, InvalidInput
from connector_ops.resources.mail.message import check_header_text

SUBJECT, TEXT, HTML = "subject.j2", "body.txt.j2", "body.html.j2"


@dataclass(frozen=True)
class Rendered:
    subject: str | None
    text: str | None
    html: str | None


class LocalTemplates:
    """The templates folder; one instance per send (cheap: Jinja only reads the files it renders)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        loader = jinja2.FileSystemLoader(str(self.root))
        options: dict[str, Any] = {"loader": loader, "undefined": jinja2.StrictUndefined, "keep_trailing_newline": True}
        self._plain = SandboxedEnvironment(autoescape=False, **options)
        self._html = SandboxedEnvironment(autoescape=True, **options)

    def _render(self, env: SandboxedEnvironment, template_id: int, name: str,
                variables: dict[str, Any]) -> str | None:
        if not (self.root / str(template_id) / name).is_file():
            return None
        try:
            return env.get_template(f"{template_id}/{name}").render(variables)
        except Exception as exc:  # Jinja's errors, and what Python raises inside the template
            # (``{{ qty * price }}`` with strings: TypeError): either way the template file is at fault, a 500
            raise ActionFailed(f"template {template_id}, {name}: {type(exc).__name__}: {exc}") from None

    def render(self, template_id: int, variables: dict[str, Any]) -> Rendered:
        text = self._render(self._plain, template_id, TEXT, variables)
        html = self._render(self._html, template_id, HTML, variables)
        if text is None and html is None:
            raise ActionFailed(
                f"templateId: no template {template_id} in {self.root} "
                f"(expected {template_id}/{TEXT} and/or {template_id}/{HTML})"
            )
        subject = self._render(self._plain, template_id, SUBJECT, variables)
        if subject is not None:
            subject = subject.strip()
            try:
                check_header_text(subject, "the rendered subject")
            except ValueError as exc:
                culprit = self._subject_variable(template_id, variables)
                if culprit is not None:  # the caller's value broke the line: theirs to fix, a 400
                    raise InvalidInput(f"templateVariables.{culprit}", f"is rendered into the subject (template "
                                       f"{template_id}, {SUBJECT}), which is one header line: {exc}") from None
                raise ActionFailed(f"template {template_id}, {SUBJECT}: {exc}") from None
        return Rendered(subject or None, text, html)

    def _subject_variable(self, template_id: int, variables: dict[str, Any]) -> str | None:
        """The first variable the subject template uses whose value holds a line break or a control character
        (``None``: the template itself makes them)."""
        loader = self._plain.loader
        assert loader is not None  # (the environment is made with one)
        source, _, _ = loader.get_source(self._plain, f"{template_id}/{SUBJECT}")
        used = jinja2.meta.find_undeclared_variables(self._plain.parse(source))
        return next((name for name in sorted(used) if name in variables and _has_control(variables[name])), None)


def _has_control(value: Any) -> bool:
    """Whether a string inside ``value`` (a nested object's too) is no header text."""
    if isinstance(value, str):
        try:
            check_header_text(value)
        except ValueError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_control(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_control(v) for v in value)
    return False
