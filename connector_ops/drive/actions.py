"""The cloud drive actions (spec 4.A): the one implementation each entry point calls.

Each function takes its input model and the ``drive`` resource (Google Drive or the local-folder drive,
both :class:`~connector_ops.resources.drive.base.DriveBackend`) and, for uploads and downloads, the platform-file
store. Actions whose spec output is "204, no content" return ``None``. A missing item is a 404.
"""

from __future__ import annotations

from connector_ops.drive import models as m
from connector_ops.kernel.errors import InvalidInput, NotFound
from connector_ops.kernel.platform_file import name_from_elsewhere, served_media_type
from connector_ops.kernel.progress import track
from connector_ops.models import PlatformFileOutput
from connector_ops.registry import action
from connector_ops.resources.drive.base import DriveBackend
from connector_ops.resources.platform_files import PlatformFileStore, guess_content_type

DRIVE = ("drive",)
DRIVE_FILES = ("drive", "platform_files")


@action("drive.rename", m.RenameInput, None, resources=DRIVE, not_found_status=404)
def rename(inp: m.RenameInput, drive: DriveBackend) -> None:
    """Rename a file or folder."""
    drive.rename(inp.id, inp.name)


@action("drive.create_file", m.CreateFileInput, m.FileIdOutput, resources=DRIVE, not_found_status=404)
def create_file(inp: m.CreateFileInput, drive: DriveBackend) -> m.FileIdOutput:
    """Create an empty Google-type file (document, spreadsheet, …) in a folder or the root."""
    return m.FileIdOutput(file_id=drive.create_file(inp.name, inp.folder_id, inp.mime_type))


@action("drive.move", m.MoveInput, None, resources=DRIVE, not_found_status=404)
def move(inp: m.MoveInput, drive: DriveBackend) -> None:
    """Move a file or folder into another folder."""
    drive.move(inp.id, inp.folder_id)


@action("drive.delete_file", m.DeleteFileInput, None, resources=DRIVE, not_found_status=404)
def delete_file(inp: m.DeleteFileInput, drive: DriveBackend) -> None:
    """Delete a file permanently (folders are refused: use Delete Folder)."""
    drive.delete_file(inp.file_id)


@action("drive.create_shared_link", m.SharedLinkInput, m.SharedLinkOutput, resources=DRIVE, not_found_status=404)
def create_shared_link(inp: m.SharedLinkInput, drive: DriveBackend) -> m.SharedLinkOutput:
    """Share a file or folder with the recipients and return its link."""
    return m.SharedLinkOutput(shared_link=drive.share(inp.id, inp.grants()))


@action("drive.copy_file", m.CopyFileInput, m.CopyFileOutput, resources=DRIVE, not_found_status=404)
def copy_file(inp: m.CopyFileInput, drive: DriveBackend) -> m.CopyFileOutput:
    """Copy a file (default name ``<stem>-copy<.ext>``, default place the root), optionally with its sharing."""
    file_id, name = drive.copy_file(inp.file_id, inp.folder_id, inp.name, inp.keep_same_permissions)
    return m.CopyFileOutput(file_id=file_id, name=name)


@action("drive.create_folder", m.CreateFolderInput, m.FolderIdOutput, resources=DRIVE, not_found_status=404)
def create_folder(inp: m.CreateFolderInput, drive: DriveBackend) -> m.FolderIdOutput:
    """Create a folder in a folder or the root; returns the new folder's id.

    ``ifExists`` (an extension; default ``create`` as the spec) looks for a folder of that name in the
    parent first: ``reuse`` returns the first such folder listed, so a pipeline run again finds the folder
    it made instead of adding a twin; ``error`` refuses with a 400.
    """
    if inp.if_exists != "create":
        same = [item for item in drive.list_folder(inp.folder_id) if item.type == "folder" and item.name == inp.name]
        if same and inp.if_exists == "reuse":
            return m.FolderIdOutput(folder_id=same[0].id)
        if same:
            raise InvalidInput("name", f"a folder named {inp.name!r} already exists there (ifExists: error)")
    return m.FolderIdOutput(folder_id=drive.create_folder(inp.name, inp.folder_id))


@action("drive.upload_file", m.UploadFileInput, m.FileIdOutput, resources=DRIVE_FILES, not_found_status=404)
def upload_file(inp: m.UploadFileInput, drive: DriveBackend, platform_files: PlatformFileStore) -> m.FileIdOutput:
    """Upload a platform file's bytes (streamed) into a folder or the root."""
    pf = inp.platform_file
    local = platform_files.local_id(pf)
    try:
        stored = platform_files.describe(local) if local else None
    except NotFound as exc:  # which input names the missing file
        raise NotFound(f"platformFile: {exc}") from None
    name = pf.name or (stored.name if stored else None)
    if not name:
        raise InvalidInput("platformFile.name", "is required for a file that is not on this platform's file server")
    content_type = pf.content_type or (stored.content_type if stored else None) or guess_content_type(name)
    # only our own files have a size we can trust before reading; others are measured while sent
    size = platform_files.size_of(pf) if local else None
    with platform_files.open(pf) as stream:
        return m.FileIdOutput(file_id=drive.upload(stream, name, content_type, size, inp.folder_id))


@action("drive.download_file", m.DownloadFileInput, PlatformFileOutput, resources=DRIVE_FILES,
        not_found_status=404)
def download_file(inp: m.DownloadFileInput, drive: DriveBackend,
                  platform_files: PlatformFileStore) -> PlatformFileOutput:
    """Download a file (Google documents exported to Office/PNG formats) into a new platform file.

    The Drive's name is kept, made one a platform file takes (a tab or line break a space): the caller has
    no field to change it with, so refusing it would make the file impossible to download."""
    with drive.download(inp.file_id) as download:
        name = name_from_elsewhere(download.name, inp.file_id)
        # a type the drive holds that no header can carry (an item stored before types were checked): its
        # type/subtype, else guessed from the name
        with platform_files.create(name, served_media_type(download.content_type)) as sink, \
                track(f"download {name}", download.size, "B") as reporter:
            for chunk in download.chunks:
                sink.write(chunk)
                reporter.update(len(chunk))
    assert sink.descriptor is not None
    return PlatformFileOutput(platform_file=sink.descriptor)


@action("drive.list", m.ListInput, m.ListOutput, resources=DRIVE, not_found_status=404)
def list_folder(inp: m.ListInput, drive: DriveBackend) -> m.ListOutput:
    """List the files and folders directly inside a folder (the root without folderId)."""
    items = drive.list_folder(inp.folder_id)
    return m.ListOutput(content=[m.ListEntry(name=i.name, id=i.id, type=i.type) for i in items])


@action("drive.delete_folder", m.DeleteFolderInput, None, resources=DRIVE, not_found_status=404)
def delete_folder(inp: m.DeleteFolderInput, drive: DriveBackend) -> None:
    """Delete a folder with all its sub-folders and files."""
    drive.delete_folder(inp.folder_id)
