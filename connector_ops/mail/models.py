"""Input model of Send Transactional Message (spec 4.B, recipients per 2.5), checked before any sending.

Every rule here answers 400 with the field's path (``recipients[0].to: …``): addresses valid
(``email-validator``, no DNS), no line breaks or control characters in the subject, names or file
names, at most 50 recipients with at least one ``To``, ``templateId`` a positive integer,
``templateVariables`` a JSON object without ``null`` (Mailjet refuses null values).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from connector_ops.kernel.errors import InvalidInput
from connector_ops.kernel.limits import MAX_DEPTH, check_payload, deeper_than, too_many_digits
from connector_ops.kernel.platform_file import ANY_CASE, PlatformFile, SpecModel, base_name
from connector_ops.resources.mail.message import (
    MAX_RECIPIENTS,
    MAX_SUBJECT_LENGTH,
    check_header_text,
    find_null,
    media_type,
    parse_address,
)

RecipientType = Literal["To", "Cc", "Bcc"]
_TYPES = {t.lower(): t for t in ("To", "Cc", "Bcc")}


def _display_name(value: str | None) -> str | None:
    if value is None or not value.strip():
        return None
    return check_header_text(value.strip(), "the name")


class Recipient(SpecModel):
    """One recipient (spec 2.5); ``type`` defaults to ``To`` and is read case-insensitively."""

    to: str = Field(description="e-mail address of the recipient")
    type: RecipientType = Field("To", description="To, Cc or Bcc", json_schema_extra={ANY_CASE: "trim"})
    name: str | None = Field(None, description="display name")

    @field_validator("to")
    @classmethod
    def _address(cls, value: str) -> str:
        parse_address(value.strip())
        return value.strip()

    @field_validator("type", mode="before")
    @classmethod
    def _kind(cls, value: Any) -> Any:
        if value is None:
            return "To"
        return _TYPES.get(value.strip().lower(), value) if isinstance(value, str) else value

    _name = field_validator("name")(_display_name)


class AttachmentFile(PlatformFile):
    """An attachment's platform file: name, link and size required (spec 2.1)."""

    name: str = Field(min_length=1)
    link: str = Field(min_length=1)
    size: int = Field(ge=0)
    #: checked by ``_media_type`` below, not the platform file's rule: a mail sends ``type/subtype`` only,
    #: so its parameters are dropped rather than judged
    content_type: str | None = None

    @field_validator("name")
    @classmethod
    def _file_name(cls, value: str) -> str:
        check_header_text(value, "the file name")
        base = base_name(value)  # a mail client saves it under that name
        if not base:
            raise ValueError("must be a file name, not a folder path")
        return base

    @field_validator("content_type")
    @classmethod
    def _media_type(cls, value: str | None) -> str | None:
        return media_type(value) if value and value.strip() else None


class Attachment(SpecModel):
    platform_file: AttachmentFile


class SendTransactionalMessageInput(SpecModel):
    """Send one template e-mail (spec 4.B)."""

    from_: str = Field(alias="from", description="sender address, optionally `Name <address>`")
    recipients: list[Recipient] = Field(min_length=1, max_length=MAX_RECIPIENTS)
    subject: str | None = Field(None, max_length=MAX_SUBJECT_LENGTH,
                                description="overrides the template's subject when not empty")
    template_id: int = Field(gt=0, description="id of the template (Mailjet template id, or the SMTP templates "
                                               "folder's sub-folder)")
    template_variables: str | dict[str, Any] = Field(
        description="a JSON object as a string (a mapping is accepted too); no null values")
    attachments: list[Attachment] = Field(default_factory=list)

    @field_validator("from_")
    @classmethod
    def _sender(cls, value: str) -> str:
        parse_address(value.strip(), allow_display_name=True)
        return value.strip()

    @field_validator("subject")
    @classmethod
    def _subject(cls, value: str | None) -> str | None:
        """A blank subject means "the template's subject", as an empty one does (never a subject of spaces)."""
        return check_header_text(value, "the subject") if value and value.strip() else None

    @field_validator("template_id", mode="before")
    @classmethod
    def _integer(cls, value: Any) -> Any:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(f"must be an integer, got {value!r}")
        if isinstance(value, str) and not value.strip().isdigit():
            raise ValueError(f"must be an integer, got {value!r}")
        return value

    @field_validator("template_variables")
    @classmethod
    def _variables(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        parse_variables(value)
        return value

    @field_validator("attachments", mode="before")
    @classmethod
    def _wired_files(cls, value: Any) -> Any:
        """Accept what other ops output: one platform file, or a list of them, without the wrapper."""
        if value is None:
            return []
        items = [value] if isinstance(value, dict) else value
        if not isinstance(items, list):
            return value
        return [{"platformFile": i} if isinstance(i, dict) and "link" in i and "platformFile" not in i else i
                for i in items]

    @model_validator(mode="after")
    def _one_to(self) -> SendTransactionalMessageInput:
        if not any(r.type == "To" for r in self.recipients):
            raise ValueError("recipients: at least one recipient must be of type To (Cc/Bcc-only is refused)")
        return self

    @property
    def variables(self) -> dict[str, Any]:
        return parse_variables(self.template_variables)


def parse_variables(value: str | dict[str, Any]) -> dict[str, Any]:
    """``templateVariables`` as a dict: a JSON object (blank means ``{}``) with no null anywhere."""
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"is not valid JSON: {exc}") from None
        except RecursionError:
            raise ValueError(deeper_than()) from None
        except ValueError:  # int()'s digit limit
            raise ValueError(f"holds {too_many_digits()}") from None
        try:
            check_payload(value, limit=MAX_DEPTH - 2)  # as deep as the object form could be
        except InvalidInput as exc:
            raise ValueError(str(exc)) from None
    if not isinstance(value, dict):
        raise ValueError(f"must be a JSON object (key-value), got {type(value).__name__}")
    null_at = find_null(value)
    if null_at:
        raise ValueError(f"null is not allowed (Mailjet refuses null values), found at {null_at!r}; "
                         'use "" or leave the key out')
    return value
