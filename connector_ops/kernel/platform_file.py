"""The base of every input/output model and the platform-file descriptor (spec 2.1).

They live in the kernel because resources (the platform-file store, mail attachments) speak them too.

Every action has one input and one output model whose field names are the spec's JSON names; Python
attributes are snake_case with the camelCase spec names as aliases, so both spellings validate and
``model_dump(by_alias=True)`` gives back exactly the spec's JSON.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from connector_ops.kernel.limits import holds_surrogate, lone_surrogate

#: C0 control characters and DEL: they end or split header lines and listings
_CONTROLS = re.compile(r"[\x00-\x1f\x7f]+")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def check_file_name(value: str) -> str:
    """Names are metadata: refuse only what breaks headers and listings (empty, control characters) and
    half a surrogate pair, which no header, JSON body or database can carry (a name given as text; a name
    taken from elsewhere goes through :func:`name_from_elsewhere` first)."""
    if not value.strip() or _CONTROLS.search(value):
        raise ValueError("must be a non-empty name without control characters")
    if (half := lone_surrogate(value)) is not None:
        raise ValueError(holds_surrogate(half))
    return value


def name_from_elsewhere(text: str, fallback: str) -> str:
    """A name another system chose — a file on the local disk, a Drive file — made one
    :func:`check_file_name` takes, since the user cannot change it and the file is real.

    Bytes that were not UTF-8 (Python reads such a disk name with one lone surrogate per byte,
    ``surrogateescape``) become U+FFFD, as decoding with ``errors="replace"`` would; each run of control
    characters (a tab, a line break pasted into a Drive name) becomes one space. ``fallback`` when nothing
    but spaces is left."""
    if lone_surrogate(text) is not None:
        try:
            text = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:  # a surrogate that no undecodable byte made
            text = _SURROGATE.sub("\ufffd", text)
    text = _CONTROLS.sub(" ", text)
    return text if text.strip() else fallback


#: a drive letter starting a Windows path (``C:``, or ``C:report.csv``, relative to that drive's folder)
_DRIVE_LETTER = re.compile(r"[A-Za-z]:")


def base_name(text: str) -> str:
    """The file name that ends ``text`` read as a path on any system: after its last ``/`` or ``\\`` and
    without a leading drive letter, its outer spaces dropped; empty when that names a folder (``""``, ``.``,
    ``..``). For a name that becomes a path elsewhere — a zip archive's member, a mail attachment saved to
    disk: a name made from outside data (``..\\..\\Startup\\x.csv``) must not reach another folder there,
    on Windows either, whose extractors and mail clients read ``\\`` and ``C:`` too."""
    name = re.split(r"[/\\]", text)[-1]
    if _DRIVE_LETTER.match(name):
        name = name[2:]
    name = name.strip()
    return "" if name in (".", "..") else name


#: A file or folder name as the user gives it (never a path: stores make their own ids)
FileName = Annotated[str, AfterValidator(check_file_name)]


_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
#: ``type/subtype`` and optional ``; name=value`` parameters, empty ones and quoted pairs too (RFC 9110, 8.3.1, 5.6.4)
_MEDIA_TYPE = re.compile(
    rf'{_TOKEN}/{_TOKEN}(\s*;\s*({_TOKEN}=({_TOKEN}|"([^"\\\x00-\x1f\x7f]|\\[\t -~])*"))?)*')


def header_safe(value: str) -> bool:
    """Whether ``value`` can go into an HTTP or MIME header as it is: no control characters (CR and LF
    would start a header of the caller's choosing; NUL and the rest break parsers)."""
    return not _CONTROLS.search(value)


def is_media_type(value: str) -> bool:
    """Whether ``value`` is a media type a header carries as it is: ASCII (Starlette and most servers write
    headers in Latin-1, mail headers are ASCII) ``type/subtype`` with optional ``; name=value`` parameters."""
    return value.isascii() and _MEDIA_TYPE.fullmatch(value) is not None


def check_media_type(value: str | None) -> str | None:
    """A ``contentType`` is sent as a header by the file server and the drives: refuse what no header can
    be. Empty means "not given" (the type is then guessed from the name)."""
    if value and not header_safe(value):
        raise ValueError("must not contain control characters (CR, LF, NUL …): it is sent as a header")
    if value and not is_media_type(value):
        raise ValueError(f"must be a media type in ASCII, type/subtype with optional ; name=value parameters "
                         f"(text/csv; charset=utf-8), got {value!r}")
    return value


def served_media_type(value: str | None) -> str | None:
    """A content type from elsewhere (a Drive's ``mimeType``, a descriptor stored before types were
    checked) as it may be sent on: itself if a media type, else its ``type/subtype`` if that is one (the
    parameters dropped), else ``None`` (the caller guesses, or serves ``application/octet-stream``)."""
    if not value or is_media_type(value):
        return value or None
    bare = value.split(";", 1)[0].strip()
    return bare if is_media_type(bare) else None


#: a ``contentType``: a media type, which becomes a header
MediaType = Annotated[str, AfterValidator(check_media_type)]


class Referable:
    """Marks an output field whose value a later step takes as input as it is — an id, a platform-file
    descriptor, a row list: ``Annotated[str, REFERABLE]``. The one list of such fields: ``%pipeline record``
    turns an input equal to a marked field's value into ``${step.field}`` and leaves every other value a
    literal. Validation and JSON schemas ignore the mark."""

    def __repr__(self) -> str:
        return "REFERABLE"


REFERABLE = Referable()


@dataclass(frozen=True)
class PresentWhen:
    """Marks an optional output field the output always holds when the input sets ``field`` (a dotted spec
    path) to ``value``: ``Annotated[str | None, PresentWhen("parameters.onRowError", "quarantine")]`` on
    Push's ``rejectsFileId``. A YAML step whose input sets it so, literally, has the field as an output of
    its own (``${step.rejectsFileId}``); the generic op keeps the outputs of the spec. Validation and JSON
    schemas ignore the mark."""

    field: str
    value: object

    def given(self, payload: object) -> object:
        """What the input ``payload`` (spec names) sets the field to; None when it does not set it."""
        for key in self.field.split("."):
            if not isinstance(payload, Mapping):
                return None
            payload = payload.get(key)
        return payload

    def holds(self, payload: object) -> bool:
        """Whether the input ``payload`` sets the field to the value."""
        return self.given(payload) == self.value


#: the JSON Schema mark (``json_schema_extra={ANY_CASE: True}``) of a word field whose validator reads it in any
#: case (``"trim"``: also with spaces around it); the pipeline schema turns the field's enum into a pattern
ANY_CASE = "x-any-case"


class SpecModel(BaseModel):
    """Base of every input/output model: spec (camelCase) names, unknown fields refused."""

    # defer_build: a model's validator is built when first used, so a CLI call pays only for its own action
    model_config = ConfigDict(
        defer_build=True,
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        str_strip_whitespace=False,
    )

    def to_json(self) -> dict:
        return self.model_dump(by_alias=True, mode="json", exclude_none=False)


class PlatformFile(SpecModel):
    """The platform's file descriptor (spec 2.1). Which fields are required depends on the action."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", defer_build=True)

    id: str | None = None
    name: str | None = None
    content_type: MediaType | None = None
    link: str | None = None
    size: int | None = Field(default=None, ge=0)
    last_modified: str | None = None
