"""Every drive action (spec 4.A) against both backends: the local-folder drive and Google Drive (a
loopback fake that follows research/drive.md and checks each request against the discovery document)."""

from __future__ import annotations

import hashlib
import os

import pytest

from connector_ops.kernel.errors import ConnectorError
from tests.drive.support import Drive


def names(result: dict) -> dict[str, str]:
    return {item["name"]: item["type"] for item in result["content"]}


def test_create_folder_returns_the_new_folder_and_list_defaults_to_the_root(drive: Drive) -> None:
    reports = drive.run("drive.create_folder", {"name": "Reports"})["folderId"]
    sub = drive.run("drive.create_folder", {"name": "2024", "folderId": reports})["folderId"]
    assert sub != reports
    assert names(drive.run("drive.list", {})) == {"Reports": "folder"}
    assert drive.run("drive.list", {"folderId": "my-drive"}) == drive.run("drive.list", {"folderId": ""})
    assert drive.run("drive.list", {"folderId": reports})["content"] == [{"name": "2024", "id": sub, "type": "folder"}]
    assert drive.run("drive.list", {"folderId": sub}) == {"content": []}


def test_create_file_maps_the_type(drive: Drive) -> None:
    folder = drive.run("drive.create_folder", {"name": "Docs"})["folderId"]
    file_id = drive.run("drive.create_file", {"name": "Budget", "type": "spreadsheet", "folderId": folder})["fileId"]
    listed = drive.run("drive.list", {"folderId": folder})["content"]
    assert listed == [{"name": "Budget", "id": file_id, "type": "file"}]
    if drive.fake:
        assert drive.fake.files[file_id]["mimeType"] == "application/vnd.google-apps.spreadsheet"
    with pytest.raises(ConnectorError) as err:
        drive.run("drive.create_file", {"name": "x", "type": "shortcut"})
    assert err.value.status == 400 and "type" in err.value.message
    with pytest.raises(ConnectorError) as err:
        drive.run("drive.create_file", {"name": "x", "type": "spreadsheet", "folderId": "nope"})
    assert err.value.status == 404


@pytest.mark.parametrize("etype", ["video", "unknown", "audio", "photo", "file", "map", "site", "drive-sd"])
def test_create_file_refuses_the_types_google_cannot_create(drive: Drive, etype: str) -> None:
    with pytest.raises(ConnectorError) as err:
        drive.run("drive.create_file", {"name": "x", "type": etype})
    assert err.value.status == 400 and "type" in err.value.message
    assert "Google Drive creates only empty document, spreadsheet" in err.value.message
    assert drive.run("drive.list", {}) == {"content": []}


def test_rename_move_and_no_content_outputs(drive: Drive) -> None:
    a = drive.run("drive.create_folder", {"name": "A"})["folderId"]
    b = drive.run("drive.create_folder", {"name": "B", "folderId": a})["folderId"]
    doc = drive.run("drive.create_file", {"name": "Notes", "type": "document"})["fileId"]
    assert drive.run("drive.rename", {"id": doc, "name": "Notes v2"}) is None
    assert drive.run("drive.move", {"id": doc, "folderId": b}) is None
    assert names(drive.run("drive.list", {"folderId": b})) == {"Notes v2": "file"}
    assert "Notes v2" not in names(drive.run("drive.list", {}))
    drive.run("drive.move", {"id": doc, "folderId": "my-drive"})
    assert names(drive.run("drive.list", {})) == {"A": "folder", "Notes v2": "file"}
    with pytest.raises(ConnectorError) as err:  # a folder cannot go inside itself
        drive.run("drive.move", {"id": a, "folderId": b})
    assert err.value.status == 400
    with pytest.raises(ConnectorError) as err:
        drive.run("drive.rename", {"id": "missing-id", "name": "x"})
    assert err.value.status == 404
    with pytest.raises(ConnectorError) as err:
        drive.run("drive.rename", {"id": doc, "name": ""})
    assert err.value.status == 400 and err.value.message.startswith("name")


def test_delete_file_and_delete_folder_with_its_contents(drive: Drive) -> None:
    top = drive.run("drive.create_folder", {"name": "Top"})["folderId"]
    inner = drive.run("drive.create_folder", {"name": "Inner", "folderId": top})["folderId"]
    deep = drive.run("drive.create_file", {"name": "Deep", "type": "document", "folderId": inner})["fileId"]
    loose = drive.run("drive.create_file", {"name": "Loose", "type": "document"})["fileId"]
    with pytest.raises(ConnectorError) as err:
        drive.run("drive.delete_file", {"fileId": top})
    assert err.value.status == 400 and "Delete Folder" in err.value.message
    with pytest.raises(ConnectorError) as err:
        drive.run("drive.delete_folder", {"folderId": loose})
    assert err.value.status == 400
    assert drive.run("drive.delete_file", {"fileId": loose}) is None
    assert drive.run("drive.delete_folder", {"folderId": top}) is None
    assert drive.run("drive.list", {}) == {"content": []}
    for gone in (top, inner, deep, loose):
        with pytest.raises(ConnectorError) as err:
            drive.run("drive.rename", {"id": gone, "name": "x"})
        assert err.value.status == 404
    with pytest.raises(ConnectorError) as err:
        drive.run("drive.delete_folder", {"folderId": "my-drive"})
    assert err.value.status == 400


def _grants(drive: Drive, item_id: str) -> set[tuple[str, str, str]]:
    if drive.fake:
        return {(p["type"], p["role"], p.get("emailAddress") or p.get("domain") or "")
                for p in drive.fake.permissions[item_id] if p["role"] != "owner"}
    return {(g.type, g.role, g.email or g.domain or "") for g in drive.drive.grants(item_id)}


def test_create_shared_link_validates_recipients_and_shares(drive: Drive) -> None:
    doc = drive.run("drive.create_file", {"name": "Plan", "type": "document"})["fileId"]
    for bad, field in (({"type": "user", "role": "reader"}, "recipients[0].email"),
                       ({"type": "group", "role": "reader", "email": "not-an-email"}, "recipients[0].email"),
                       ({"type": "user", "role": "reader", "email": "john..doe@example.com"}, "recipients[0].email"),
                       ({"type": "domain", "role": "reader", "domain": "no spaces.com"}, "recipients[0].domain"),
                       ({"type": "anyone", "role": "owner"}, "recipients[0].role"),
                       ({"type": "robot", "role": "reader"}, "recipients[0].type")):
        with pytest.raises(ConnectorError) as err:
            drive.run("drive.create_shared_link", {"id": doc, "recipients": [bad]})
        assert err.value.status == 400 and err.value.message.startswith(field), err.value.message
    assert _grants(drive, doc) == set()
    out = drive.run("drive.create_shared_link", {"id": doc, "recipients": [
        {"type": "user", "role": "writer", "email": "ann@example.com"},
        {"type": "domain", "role": "reader", "domain": "example.org"},
        {"type": "anyone", "role": "reader"},
    ]})
    link = out["sharedLink"]
    assert link.startswith("https://drive.google.com/" if drive.fake else "file://")
    assert doc in link
    assert _grants(drive, doc) == {("user", "writer", "ann@example.com"), ("domain", "reader", "example.org"),
                                   ("anyone", "reader", "")}
    with pytest.raises(ConnectorError) as err:
        drive.run("drive.create_shared_link", {"id": "missing", "recipients": [{"type": "anyone", "role": "reader"}]})
    assert err.value.status == 404


def test_copy_file_rules(drive: Drive) -> None:
    folder = drive.run("drive.create_folder", {"name": "Src"})["folderId"]
    dest = drive.run("drive.create_folder", {"name": "Dest"})["folderId"]
    doc = drive.run("drive.create_file", {"name": "Plan", "type": "document", "folderId": folder})["fileId"]
    drive.run("drive.create_shared_link", {"id": doc, "recipients": [
        {"type": "user", "role": "commenter", "email": "bob@example.com"}]})
    plain = drive.run("drive.copy_file", {"fileId": doc, "keepSamePermissions": False})
    assert plain["name"] == "Plan-copy" and plain["fileId"] != doc
    assert names(drive.run("drive.list", {}))["Plan-copy"] == "file"  # rule 1: the root, not the source's folder
    assert _grants(drive, plain["fileId"]) == set()
    shared = drive.run("drive.copy_file", {"fileId": doc, "folderId": dest, "name": "Plan 2",
                                           "keepSamePermissions": True})
    assert shared["name"] == "Plan 2"
    assert drive.run("drive.list", {"folderId": dest})["content"] == [
        {"name": "Plan 2", "id": shared["fileId"], "type": "file"}]
    assert _grants(drive, shared["fileId"]) == {("user", "commenter", "bob@example.com")}
    with pytest.raises(ConnectorError) as err:
        drive.run("drive.copy_file", {"fileId": folder, "keepSamePermissions": False})
    assert err.value.status == 400
    with pytest.raises(ConnectorError) as err:
        drive.run("drive.copy_file", {"fileId": doc})
    assert err.value.status == 400 and "keepSamePermissions" in err.value.message


def test_copy_keeps_the_extension(drive: Drive) -> None:
    """Our choice where the spec says only "the suffix -copy": before the extension, on every backend."""
    files = drive.resources["platform_files"]
    pf = files.add_bytes(b"a,b\n1,2\n", "report.csv", "text/csv").to_json()
    file_id = drive.run("drive.upload_file", {"platformFile": pf})["fileId"]
    copy = drive.run("drive.copy_file", {"fileId": file_id, "name": "", "keepSamePermissions": False})
    assert copy["name"] == "report-copy.csv"
    assert names(drive.run("drive.list", {}))["report-copy.csv"] == "file"


@pytest.mark.parametrize(("source", "copy"), [
    ("report.csv", "report-copy.csv"), ("Plan", "Plan-copy"), (".env", ".env-copy"),
    ("logs.tar.gz", "logs-copy.tar.gz"), ("v1.2 notes.txt", "v1.2 notes-copy.txt"),
])
def test_copy_name(source: str, copy: str) -> None:
    from connector_ops.resources.drive.base import copy_name

    assert copy_name(source, None) == copy == copy_name(source, "")
    assert copy_name(source, "chosen.csv") == "chosen.csv"


@pytest.mark.parametrize("size", [0, 1000, 1_300_000], ids=["empty", "multipart", "resumable"])
def test_upload_then_download_round_trip(drive: Drive, size: int) -> None:
    data = os.urandom(size)
    files = drive.resources["platform_files"]
    pf = files.add_bytes(data, "report.bin", "application/x-test")
    folder = drive.run("drive.create_folder", {"name": "Uploads"})["folderId"]
    file_id = drive.run("drive.upload_file", {"folderId": folder, "platformFile": pf.to_json()})["fileId"]
    assert drive.run("drive.list", {"folderId": folder})["content"] == [{"name": "report.bin", "id": file_id,
                                                                          "type": "file"}]
    if drive.fake:
        assert drive.fake.blob(file_id) == data
        assert len(drive.fake.named("report.bin")) == 1
    out = drive.run("drive.download_file", {"fileId": file_id})["platformFile"]
    assert set(out) == {"id", "name", "contentType", "link", "size", "lastModified"}
    assert (out["name"], out["contentType"], out["size"]) == ("report.bin", "application/x-test", size)
    assert hashlib.sha256(files.read_bytes(out)).digest() == hashlib.sha256(data).digest()


def test_upload_to_the_root_and_missing_platform_file(drive: Drive) -> None:
    pf = drive.resources["platform_files"].add_bytes(b"a,b\n1,2\n", "data.csv")
    drive.run("drive.upload_file", {"platformFile": pf.to_json()})
    assert names(drive.run("drive.list", {})) == {"data.csv": "file"}
    with pytest.raises(ConnectorError) as err:
        drive.run("drive.upload_file", {})
    assert err.value.status == 400 and "platformFile" in err.value.message
    gone = {**pf.to_json(), "link": pf.link[:-4] + "0000"}
    with pytest.raises(ConnectorError) as err:
        drive.run("drive.upload_file", {"platformFile": gone})
    assert err.value.status == 404 and err.value.message.startswith("platformFile: platform file '")


@pytest.mark.parametrize(("drive_name", "kept"), [("report\n2024.csv", "report 2024.csv"),
                                                   ("tab\there.csv", "tab here.csv"), ("a\r\n", "a ")])
def test_a_drive_name_with_control_characters_downloads_with_spaces(google: Drive, drive_name: str,
                                                                   kept: str) -> None:
    """Drive takes names with tabs and line breaks (the web UI, other clients); Download File has no field to
    change them, so they are made a name a platform file takes instead of a 400 about a field 'name'."""
    file_id = google.fake.add_file(drive_name, b"a,b\n1,2\n", "text/csv")
    out = google.run("drive.download_file", {"fileId": file_id})["platformFile"]
    assert (out["name"], out["contentType"]) == (kept, "text/csv")
    assert google.resources["platform_files"].read_bytes(out) == b"a,b\n1,2\n"
    only_controls = google.fake.add_file("\n\t", b"x", "text/plain")
    assert google.run("drive.download_file", {"fileId": only_controls})["platformFile"]["name"] == only_controls


def test_a_drive_type_no_header_can_carry_is_downloaded_as_its_type_subtype(google: Drive) -> None:
    """A type no header can carry (an item stored before Upload File checked types): the platform file's
    contentType is its type/subtype, so the file server can serve it."""
    file_id = google.fake.add_file("a.txt", b"x", "text/plain; charset=ütf-8")  # Latin-1: the fake can send it
    out = google.run("drive.download_file", {"fileId": file_id})["platformFile"]
    assert out["contentType"] == "text/plain"


def test_download_native_document_and_folders(drive: Drive) -> None:
    doc = drive.run("drive.create_file", {"name": "Budget", "type": "spreadsheet"})["fileId"]
    out = drive.run("drive.download_file", {"fileId": doc})["platformFile"]
    # exported to the default format (docs/drive.md), named and typed alike on both backends
    assert out["name"] == "Budget.xlsx"
    assert out["contentType"] == "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
    if drive.fake:
        assert drive.resources["platform_files"].read_bytes(out).startswith(b"exported Budget")
    else:  # the local drive keeps no document content: an empty file
        assert out["size"] == 0
    form = drive.run("drive.create_file", {"name": "Survey", "type": "form"})["fileId"]
    with pytest.raises(ConnectorError) as err:
        drive.run("drive.download_file", {"fileId": form})
    assert err.value.status == 400 and "form files cannot be downloaded" in err.value.message
    folder = drive.run("drive.create_folder", {"name": "F"})["folderId"]
    with pytest.raises(ConnectorError) as err:
        drive.run("drive.download_file", {"fileId": folder})
    assert err.value.status == 400 and "folder" in err.value.message
    with pytest.raises(ConnectorError) as err:
        drive.run("drive.download_file", {"fileId": "missing"})
    assert err.value.status == 404


def test_create_folder_if_exists_create_reuse_error(drive: Drive) -> None:
    """The ifExists extension: create (the spec's default) adds a twin, reuse converges, error refuses."""
    parent = drive.run("drive.create_folder", {"name": "Runs"})["folderId"]
    first = drive.run("drive.create_folder", {"name": "inbox", "folderId": parent})["folderId"]
    drive.run("drive.create_file", {"name": "inbox", "folderId": parent, "type": "document"})  # a file: no match
    assert drive.run("drive.create_folder", {"name": "inbox", "folderId": parent, "ifExists": "reuse"}) == \
        {"folderId": first}
    assert drive.run("drive.create_folder", {"name": "inbox", "folderId": parent, "ifExists": "reuse"}) == \
        {"folderId": first}
    with pytest.raises(ConnectorError) as refused:
        drive.run("drive.create_folder", {"name": "inbox", "folderId": parent, "ifExists": "error"})
    assert refused.value.status == 400 and "a folder named 'inbox' already exists" in refused.value.message
    fresh = drive.run("drive.create_folder", {"name": "outbox", "folderId": parent, "ifExists": "error"})["folderId"]
    twin = drive.run("drive.create_folder", {"name": "inbox", "folderId": parent})["folderId"]  # default: create
    assert twin != first and fresh not in (first, twin)
    listed = drive.run("drive.list", {"folderId": parent})["content"]
    assert sum(i["name"] == "inbox" and i["type"] == "folder" for i in listed) == 2
    with pytest.raises(ConnectorError) as bad:
        drive.run("drive.create_folder", {"name": "x", "ifExists": "sometimes"})
    assert bad.value.status == 400 and "ifExists" in bad.value.message


#: (action, payload, the field refused, status): ``{file}`` is a file, ``{folder}`` a folder, ``nope`` no item
BAD_IDS = [
    ("drive.rename", {"id": "nope", "name": "n"}, "id", 404),
    ("drive.move", {"id": "nope", "folderId": "{folder}"}, "id", 404),
    ("drive.move", {"id": "{file}", "folderId": "nope"}, "folderId", 404),
    ("drive.move", {"id": "{file}", "folderId": "{file}"}, "folderId", 400),
    ("drive.delete_file", {"fileId": "nope"}, "fileId", 404),
    ("drive.delete_folder", {"folderId": "nope"}, "folderId", 404),
    ("drive.create_shared_link", {"id": "nope", "recipients": [{"type": "anyone", "role": "reader"}]}, "id", 404),
    ("drive.copy_file", {"fileId": "nope", "keepSamePermissions": False}, "fileId", 404),
    ("drive.copy_file", {"fileId": "{file}", "folderId": "nope", "keepSamePermissions": False}, "folderId", 404),
    ("drive.copy_file", {"fileId": "{file}", "folderId": "{file}", "keepSamePermissions": False}, "folderId", 400),
    ("drive.create_folder", {"name": "n", "folderId": "nope"}, "folderId", 404),
    ("drive.create_folder", {"name": "n", "folderId": "{file}"}, "folderId", 400),
    ("drive.create_file", {"name": "n", "type": "document", "folderId": "nope"}, "folderId", 404),
    ("drive.create_file", {"name": "n", "type": "document", "folderId": "{file}"}, "folderId", 400),
    ("drive.upload_file", {"platformFile": "{pf}", "folderId": "nope"}, "folderId", 404),
    ("drive.upload_file", {"platformFile": "{pf}", "folderId": "{file}"}, "folderId", 400),
    ("drive.download_file", {"fileId": "nope"}, "fileId", 404),
    ("drive.list", {"folderId": "nope"}, "folderId", 404),
    ("drive.list", {"folderId": "{file}"}, "folderId", 400),
]


@pytest.mark.parametrize("name,payload,field,status", BAD_IDS,
                         ids=[f"{n.removeprefix('drive.')}-{f}-{s}" for n, _, f, s in BAD_IDS])
def test_a_refused_id_names_its_field(drive: Drive, name: str, payload: dict, field: str, status: int) -> None:
    """Drive's own 400/404 names no field (and a move or copy sends two ids): both backends say which."""
    folder = drive.run("drive.create_folder", {"name": "F"})["folderId"]
    file_id = drive.run("drive.create_file", {"name": "D", "type": "document"})["fileId"]
    pf = drive.resources["platform_files"].add_bytes(b"x", "a.txt", "text/plain").to_json()
    fill = {"{folder}": folder, "{file}": file_id, "{pf}": pf}
    with pytest.raises(ConnectorError) as err:
        drive.run(name, {k: fill.get(v, v) if isinstance(v, str) else v for k, v in payload.items()})
    assert (err.value.status, err.value.message.split(":")[0]) == (status, field), err.value.message
    assert names(drive.run("drive.list", {})) == {"F": "folder", "D": "file"}  # nothing made or moved
    assert drive.run("drive.list", {"folderId": folder}) == {"content": []}


@pytest.mark.parametrize("root", ["root", "my-drive", "real id"])
@pytest.mark.parametrize("name,payload,verb", [
    ("drive.rename", {"id": "{root}", "name": "n"}, "renamed"),
    ("drive.move", {"id": "{root}", "folderId": "{folder}"}, "moved"),
    ("drive.create_shared_link", {"id": "{root}", "recipients": [{"type": "anyone", "role": "reader"}]}, "shared"),
])
def test_the_root_cannot_be_renamed_moved_or_shared(drive: Drive, root: str, name: str, payload: dict,
                                                     verb: str) -> None:
    """The same 400 on both backends, before Drive is asked to change anything (it answers these with
    unrelated errors, or a shared root without a link)."""
    if root == "real id":
        root = drive.fake.root_id if drive.fake else "root"
    folder = drive.run("drive.create_folder", {"name": "F"})["folderId"]
    with pytest.raises(ConnectorError) as err:
        drive.run(name, {k: v.replace("{root}", root).replace("{folder}", folder) if isinstance(v, str) else v
                         for k, v in payload.items()})
    assert err.value.status == 400, err.value.message
    assert err.value.message.startswith(f"id: the drive root cannot be {verb}"), err.value.message
    if drive.fake:
        assert [r for r in drive.fake.requests if r[0] == "PATCH" or "/permissions" in r[1]] == []
        assert [p["role"] for p in drive.fake.permissions[drive.fake.root_id]] == ["owner"]
    else:
        assert drive.drive.grants("root") == []
    assert names(drive.run("drive.list", {})) == {"F": "folder"}


@pytest.mark.parametrize("odd", [".", ".."])
@pytest.mark.parametrize("name,payload", [
    ("drive.download_file", {"fileId": "{id}"}), ("drive.delete_file", {"fileId": "{id}"}),
    ("drive.delete_folder", {"folderId": "{id}"}), ("drive.rename", {"id": "{id}", "name": "n"}),
    ("drive.copy_file", {"fileId": "{id}", "keepSamePermissions": False}), ("drive.list", {"folderId": "{id}"}),
    ("drive.move", {"id": "{id}", "folderId": "root"}),
    ("drive.create_shared_link", {"id": "{id}", "recipients": [{"type": "anyone", "role": "reader"}]}),
])
def test_dot_ids_are_not_found_and_reach_no_other_endpoint(drive: Drive, odd: str, name: str, payload: dict) -> None:
    drive.run("drive.create_folder", {"name": "Keep"})
    before = len(drive.fake.requests) if drive.fake else 0
    with pytest.raises(ConnectorError) as err:
        drive.run(name, {k: v.replace("{id}", odd) if isinstance(v, str) else v for k, v in payload.items()})
    field = next(k for k, v in payload.items() if v == "{id}")
    assert err.value.status == 404 and err.value.message.startswith(f"{field}: "), err.value.message
    assert [i["name"] for i in drive.run("drive.list", {})["content"]] == ["Keep"]
    if drive.fake:
        allowed = {"/drive/v3/files", "/drive/v3/files/root"}  # the listing above; move reads the root
        assert [r for r in drive.fake.requests[before:] if r[1] not in allowed] == []


def test_list_order_is_the_same_on_both_backends(drive: Drive) -> None:
    folder = drive.run("drive.create_folder", {"name": "Mixed"})["folderId"]
    for name in ["b.txt", "a", "Z", "B.txt", "a.txt", "b"]:
        if "." in name:
            drive.run("drive.create_file", {"name": name, "type": "document", "folderId": folder})
        else:
            drive.run("drive.create_folder", {"name": name, "folderId": folder})
    if drive.fake:
        drive.fake.max_page = 2  # the order holds across pages
    listed = [(i["type"], i["name"]) for i in drive.run("drive.list", {"folderId": folder})["content"]]
    assert listed == [("folder", "Z"), ("folder", "a"), ("folder", "b"),
                      ("file", "B.txt"), ("file", "a.txt"), ("file", "b.txt")]
