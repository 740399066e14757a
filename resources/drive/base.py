"""What every drive backend offers the drive actions, and the vocabulary they share.

The actions in :mod:`connector_ops.drive.actions` are written once against :class:`DriveBackend`; the
Google Drive resource and the local-folder drive implement it, so a workflow behaves the same on both.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import IO, Literal, Protocol, runtime_checkable

from connector_ops.kernel.addresses import normalised_email
from connector_ops.kernel.errors import InvalidInput

#: Spec 2.2: the drive root is called "my-drive"; Google calls it "root". Both are accepted as ids.
ROOT_ALIASES = frozenset({"root", "my-drive"})

GOOGLE_APPS = "application/vnd.google-apps."
FOLDER_MIME = GOOGLE_APPS + "folder"
SHORTCUT_MIME = GOOGLE_APPS + "shortcut"

#: Spec 2.4 ``EType`` -> Google MIME type. ``drive-sd`` is Google's ``drive-sdk`` (research §0).
ETYPE_MIME = {
    etype: GOOGLE_APPS + ("drive-sdk" if etype == "drive-sd" else etype)
    for etype in (
        "audio", "document", "drive-sd", "drawing", "file", "form", "fusiontable", "jam", "map", "photo",
        "presentation", "script", "shortcut", "site", "spreadsheet", "unknown", "video",
    )
}

#: The kinds Google Drive creates as empty files (research §1.2); both backends create only these.
CREATABLE_TYPES = ("document", "spreadsheet", "presentation", "drawing", "form", "script")

#: Why a kind Create File refuses (before calling any drive) cannot be created, where there is more to say.
UNCREATABLE_TYPES = {
    "shortcut": "a shortcut needs a target file, which Create File has no field for",
    "fusiontable": "Google Fusion Tables were shut down in 2019",
    "jam": "Google Jamboard was retired in 2024",
}


def uncreatable_reason(etype: str) -> str | None:
    """Why Create File refuses ``etype`` (Google Drive answers 400 for these), or ``None`` if it is creatable."""
    if etype in CREATABLE_TYPES:
        return None
    return UNCREATABLE_TYPES.get(etype, "Google Drive creates only empty " + ", ".join(CREATABLE_TYPES[:-1])
                                 + f" and {CREATABLE_TYPES[-1]} files")

#: Google-native kind -> (export MIME type, file extension) used by Download File (research §1.11).
EXPORT_DEFAULTS = {
    GOOGLE_APPS + "document": (
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document", ".docx"),
    GOOGLE_APPS + "spreadsheet": (
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", ".xlsx"),
    GOOGLE_APPS + "presentation": (
        "application/vnd.openxmlformats-officedocument.presentationml.presentation", ".pptx"),
    GOOGLE_APPS + "drawing": ("image/png", ".png"),
    GOOGLE_APPS + "script": ("application/vnd.google-apps.script+json", ".json"),
}

RecipientType = Literal["user", "group", "domain", "anyone"]
Role = Literal["owner", "fileOrganizer", "writer", "commenter", "reader"]

_DOMAIN = re.compile(r"^(?=.{1,253}$)([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$", re.IGNORECASE)


@dataclass(frozen=True)
class DriveItem:
    """One entry of a listing (spec 4.A List: ``{name, id, type}``)."""

    id: str
    name: str
    type: Literal["folder", "file"]
    #: changes whenever the file's content does (Google: its MD5, or modifiedTime for native documents;
    #: local drive: modification time and size). Not part of the spec's List output; the drive sensor
    #: keys its cursor on it to see modified files.
    version: str | None = None
    #: grows with every change to the file, moves and renames included, and never repeats (Google: its
    #: ``version``; local drive: a counter in its row). The drive sensor puts it in each run key, so a file
    #: that changes back to earlier content, or leaves the folder and returns, gets a key never used before.
    revision: str | None = None


def listing_order(item: DriveItem) -> tuple[bool, str, str]:
    """The order List returns on both backends: folders first, then by name (code points), then by id.

    Google's ``orderBy`` is not used for this: its ``folder`` key is documented as "the folder ID" and its
    name collation is unspecified, so the Google backend sorts the (complete) listing itself."""
    return item.type != "folder", item.name, item.id


@dataclass(frozen=True)
class Grant:
    """A validated shared-link recipient (spec 2.3): who gets which role."""

    type: RecipientType
    role: Role
    email: str | None = None
    domain: str | None = None

    @classmethod
    def checked(cls, type: RecipientType, role: Role, email: str | None, domain: str | None, where: str) -> Grant:
        """Apply spec 2.3's conditional rules; ``where`` names the recipient in the error (``recipients[0]``)."""
        if type in ("user", "group"):
            try:
                address, _ = normalised_email(email or "")
            except ValueError as exc:
                raise InvalidInput(f"{where}.email", f"must be a valid e-mail address when type is {type!r} "
                                                     f"({exc})") from None
            return cls(type, role, email=address)
        if type == "domain":
            if not domain or not _DOMAIN.fullmatch(domain):
                raise InvalidInput(f"{where}.domain", "must be a domain name such as example.com when type is 'domain'")
            return cls(type, role, domain=domain.lower())
        if role == "owner":
            raise InvalidInput(f"{where}.role", "'owner' can only be given to a user")
        return cls(type, role)


@dataclass
class Download:
    """An open download: what to call the platform file and the bytes, streamed."""

    name: str
    content_type: str
    size: int | None
    chunks: Iterator[bytes] = field(repr=False)


@runtime_checkable
class DriveBackend(Protocol):
    """The operations the 11 drive actions need. Ids are strings; ``None`` folder means the root."""

    def rename(self, item_id: str, name: str) -> None: ...
    def create_file(self, name: str, folder_id: str | None, mime_type: str) -> str: ...
    def create_folder(self, name: str, parent_id: str | None) -> str: ...
    def move(self, item_id: str, folder_id: str) -> None: ...
    def delete_file(self, file_id: str) -> None: ...
    def delete_folder(self, folder_id: str) -> None: ...
    def share(self, item_id: str, grants: list[Grant]) -> str: ...
    def copy_file(self, file_id: str, folder_id: str | None, name: str | None,
                  keep_permissions: bool) -> tuple[str, str]: ...
    def upload(self, stream: IO[bytes], name: str, content_type: str, size: int | None,
               folder_id: str | None) -> str: ...
    def download(self, file_id: str) -> AbstractContextManager[Download]: ...
    def list_folder(self, folder_id: str | None) -> list[DriveItem]: ...
    def check_token(self) -> dict[str, object]: ...


#: a compressed tar keeps its double extension (``logs.tar.gz`` -> ``logs-copy.tar.gz``)
_DOUBLE_EXTENSIONS = (".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst")


def copy_name(source_name: str, name: str | None) -> str:
    """Spec 4.A rule 2: an empty name gives the source's name with the suffix ``-copy``.

    The spec does not say where the suffix goes; we put it before the extension (``report.csv`` ->
    ``report-copy.csv``) so the copy still opens with the same program and keeps its type. Names without
    an extension, and dot-files (``.env``), get it at the end (``Plan-copy``, ``.env-copy``)."""
    if name:
        return name
    lower = source_name.lower()
    double = next((ext for ext in _DOUBLE_EXTENSIONS if lower.endswith(ext) and len(source_name) > len(ext)), None)
    stem, ext = (source_name[:-len(double)], source_name[-len(double):]) if double else os.path.splitext(source_name)
    return f"{stem}-copy{ext}"


def export_name(name: str, extension: str) -> str:
    """The platform-file name of an exported document: the target extension added once."""
    return name if name.lower().endswith(extension) else name + extension


def exported(name: str, mime: str) -> tuple[str, str] | None:
    """The (name, content type) a Google-native file downloads as, ``None`` for a blob; a native kind Drive
    has no export for (forms, sites, maps …) is refused as Google refuses it. Shared so both backends agree."""
    if not mime.startswith(GOOGLE_APPS):
        return None
    if mime not in EXPORT_DEFAULTS:
        kind = mime.removeprefix(GOOGLE_APPS)
        raise InvalidInput("fileId", f"Google {kind} files cannot be downloaded (Drive has no export for them)")
    export_mime, extension = EXPORT_DEFAULTS[mime]
    return export_name(name, extension), export_mime
