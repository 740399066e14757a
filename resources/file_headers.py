"""The headers the file server sends with a stored file, so that opening a link never runs its bytes.

A stored file may be anyone's: Download File copies whatever a stranger put in a shared Drive folder, and
its link goes into mails and outputs. Served inline as ``text/html`` or ``image/svg+xml`` it was a page of
the file server's origin: its script read the other files it knew the ids of, and the cookies every
service of the host shares (cookies are per host, not per port). Two layers stop that:

* every file carries a Content-Security-Policy (:func:`security_policy`): :data:`FILE_POLICY`, whose
  ``sandbox`` gives the document an opaque origin with no script, form, popup or plugin, and whose
  ``default-src 'none'`` lets it load nothing (no script, image, style sheet, font, frame or connection);
* an active type, one a browser would run script in or render as a document of its own
  (:func:`is_active`), is sent as an ``attachment``: the browser saves it, it never opens as a page.

What stays inline is what a browser only shows (images, PDF, plain text, CSV, JSON, audio, video …) in
a viewer of its own making, which the policy must leave working (checked in Chromium 156):

* its PDF viewer runs apart from the page and shows a PDF under the policy as it is;
* an image or text document needs the inline ``style`` attributes the browser writes
  (``style-src 'unsafe-inline'``): CSS alone loads nothing under ``default-src 'none'``, and it is never the
  stranger's, whose markup is an attachment;
* its audio and video player plays nothing in a sandboxed document, whatever the sandbox allows short of
  scripts with the same origin, nor under ``default-src 'none'`` without ``media-src``. So audio and
  video get :data:`MEDIA_POLICY`: no sandbox, only the browser's player loading the file. That page has
  no markup of anyone's, and under ``default-src 'none'`` no script could run in it anyway.
"""

from __future__ import annotations

from urllib.parse import quote

from connector_ops.kernel.media_types import media_type

#: sent with every file but audio and video: sandboxed (opaque origin, no script, form or popup), nothing
#: loaded, the browser's own viewer styled
FILE_POLICY = "sandbox; default-src 'none'; style-src 'unsafe-inline'"
#: sent with audio and video (inline only): no script, nothing loaded but the file by the browser's player
MEDIA_POLICY = "default-src 'none'; media-src 'self'; style-src 'unsafe-inline'"

#: types a browser renders as a document of its own or runs (HTML, XML and XSLT, SVG, JavaScript — WHATWG's
#: list of JavaScript MIME type essences — and a multipart stream whose parts may be HTML); ``*/*+xml`` too
_ACTIVE = frozenset({
    "text/html", "application/xhtml+xml", "image/svg+xml", "text/xml", "application/xml", "text/xsl",
    "application/xml-dtd", "text/xml-external-parsed-entity", "application/xml-external-parsed-entity",
    "multipart/x-mixed-replace",
    "application/ecmascript", "application/javascript", "application/x-ecmascript", "application/x-javascript",
    "text/ecmascript", "text/javascript", "text/javascript1.0", "text/javascript1.1", "text/javascript1.2",
    "text/javascript1.3", "text/javascript1.4", "text/javascript1.5", "text/jscript", "text/livescript",
    "text/x-ecmascript", "text/x-javascript",
})



def is_active(content_type: str) -> bool:
    """Whether a browser would open ``content_type`` as a page that runs or loads things (its essence in
    :data:`_ACTIVE` or ending ``+xml``), rather than only show it."""
    essence = media_type(content_type)
    return essence in _ACTIVE or essence.endswith("+xml")


def security_policy(content_type: str) -> str:
    """The Content-Security-Policy of a file of ``content_type``: :data:`MEDIA_POLICY` for audio and video
    (a browser plays neither in a sandbox), :data:`FILE_POLICY` for everything else."""
    media = media_type(content_type).split("/", 1)[0] in ("audio", "video") and not is_active(content_type)
    return MEDIA_POLICY if media else FILE_POLICY


def content_disposition(name: str, content_type: str) -> str:
    """``attachment`` for an active type (:func:`is_active`), else ``inline``, with the name twice
    (RFC 6266): ``filename*`` in UTF-8 for clients that read it, and a plain ASCII ``filename`` (other
    characters as ``_``) for those that do not."""
    disposition = "attachment" if is_active(content_type) else "inline"
    fallback = "".join(c if " " <= c < "\x7f" and c not in '"\\' else "_" for c in name)
    return f"{disposition}; filename=\"{fallback}\"; filename*=UTF-8''{quote(name, safe='')}"


def file_headers(name: str, content_type: str) -> dict[str, str]:
    """The headers of a stored file's response (200, 206 and HEAD alike), whichever backend holds it."""
    return {"Content-Disposition": content_disposition(name, content_type), "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": security_policy(content_type),
            # as a header, not Starlette's media_type, which adds "; charset=utf-8" to every text/* type
            # whatever the bytes are (a Latin-1 Pull says so in its contentType)
            "Content-Type": content_type}
