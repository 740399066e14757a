"""Input and output models of the drive actions, field names exactly as in spec 4.A (and 2.3, 2.4)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, field_validator

from connector_ops.kernel.platform_file import REFERABLE, PlatformFile, SpecModel, check_file_name
from connector_ops.resources.drive.base import ETYPE_MIME, Grant, uncreatable_reason

#: ids are opaque strings; blank ones are refused with the field's name
Id = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
Name = Annotated[str, StringConstraints(min_length=1)]
EType = Literal[
    "audio", "document", "drive-sd", "drawing", "file", "form", "fusiontable", "jam", "map", "photo",
    "presentation", "script", "shortcut", "site", "spreadsheet", "unknown", "video",
]


def _optional_id(value: str | None) -> str | None:
    """Spec: "when folderId is empty" — an empty string means the same as no value (the root)."""
    return value.strip() or None if isinstance(value, str) else value


_name = check_file_name


class RenameInput(SpecModel):
    id: Id
    name: Name

    _check_name = field_validator("name")(_name)


class CreateFileInput(SpecModel):
    name: Name
    folder_id: str | None = None
    type: EType

    _check_name = field_validator("name")(_name)
    _check_folder = field_validator("folder_id")(_optional_id)

    @field_validator("type")
    @classmethod
    def _creatable(cls, value: str) -> str:
        reason = uncreatable_reason(value)
        if reason:
            raise ValueError(f"{value!r} cannot be created: {reason}")
        return value

    @property
    def mime_type(self) -> str:
        return ETYPE_MIME[self.type]


class FileIdOutput(SpecModel):
    file_id: Annotated[str, REFERABLE]


class MoveInput(SpecModel):
    id: Id
    folder_id: Id


class DeleteFileInput(SpecModel):
    file_id: Id


class Recipient(SpecModel):
    """Spec 2.3; the conditional rules (email for user/group, domain for domain) are checked by :class:`Grant`."""

    type: Literal["user", "group", "domain", "anyone"]
    role: Literal["owner", "fileOrganizer", "writer", "commenter", "reader"]
    domain: str | None = None
    email: str | None = None


class SharedLinkInput(SpecModel):
    id: Id
    recipients: list[Recipient] = Field(min_length=1)

    def grants(self) -> list[Grant]:
        return [Grant.checked(r.type, r.role, r.email, r.domain, f"recipients[{i}]")
                for i, r in enumerate(self.recipients)]


class SharedLinkOutput(SpecModel):
    shared_link: Annotated[str, REFERABLE]


class CopyFileInput(SpecModel):
    file_id: Id
    folder_id: str | None = None
    name: str | None = None
    keep_same_permissions: bool

    _check_folder = field_validator("folder_id")(_optional_id)

    @field_validator("name")
    @classmethod
    def _copy_name(cls, value: str | None) -> str | None:
        return _name(value) if value else None  # empty: "<source name>-copy" (spec rule 2)


class CopyFileOutput(SpecModel):
    file_id: Annotated[str, REFERABLE]
    name: str


class CreateFolderInput(SpecModel):
    folder_id: str | None = None
    name: Name
    if_exists: Literal["create", "reuse", "error"] = Field(
        default="create",
        description="extension: a folder of that name already in the parent folder is created again "
                    "(the spec's behaviour), reused (its id returned; re-runs converge), or an error (400)")

    _check_name = field_validator("name")(_name)
    _check_folder = field_validator("folder_id")(_optional_id)


class FolderIdOutput(SpecModel):
    folder_id: Annotated[str, REFERABLE] = Field(description="the id of the new folder")


class UploadFileInput(SpecModel):
    folder_id: str | None = None
    platform_file: PlatformFile

    _check_folder = field_validator("folder_id")(_optional_id)


class DownloadFileInput(SpecModel):
    file_id: Id


class ListInput(SpecModel):
    folder_id: str | None = None

    _check_folder = field_validator("folder_id")(_optional_id)


class ListEntry(SpecModel):
    name: str
    id: str
    type: Literal["folder", "file"]


class ListOutput(SpecModel):
    content: list[ListEntry]


class DeleteFolderInput(SpecModel):
    folder_id: Id
