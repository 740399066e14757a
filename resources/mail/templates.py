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
from jinja2.sandbox import SandboxedEnvironment

from connector_ops.kernel.errors import ActionFailed
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
                raise ActionFailed(f"template {template_id}, {SUBJECT}: {exc}") from None
        return Rendered(subject or None, text, html)
