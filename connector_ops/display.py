"""How action outputs look in a notebook, without changing what they are.

A magic returns :class:`ActionOutput`, a ``dict`` that *is* the action's JSON output (it compares equal
to it, indexes, serialises and pickles like one) and only adds rich displays: lists of rows (Query's
``result``, Iterate's ``content``, Validate's ``validated``/``rejected``, Drive's ``content``) render as
pandas tables, platform files as name, size and link, and a small pulled CSV/JSON file with a preview
of its rows. Rendering happens only when the frontend asks for it, so calls that are not displayed
(``out = %etl …;``) pay nothing for it.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

#: rows shown in a table by default, and the largest pulled file previewed
MAX_ROWS = 20
PREVIEW_BYTES = 256 * 1024
TEXT_WIDTH = 100
LONGEST_TEXT_CELL = 40


@dataclass
class DisplayOptions:
    """How tables look; ``%config ConnectorMagics.displaylimit = N`` / ``displaywidth = N`` set these.

    ``rows``: rows shown per table (``0`` or ``None``: all, as JupySQL's ``displaylimit``); ``width``: the
    widest line of a text/plain table — wider tables wrap their columns into blocks instead of running
    off a terminal or a ``nbconvert --to markdown`` page."""

    rows: int | None = MAX_ROWS
    width: int = TEXT_WIDTH

    @property
    def limit(self) -> int | None:
        return self.rows if self.rows and self.rows > 0 else None


OPTIONS = DisplayOptions()


def _more_rows(total: int) -> int:
    limit = OPTIONS.limit
    return total - limit if limit is not None and total > limit else 0


def human_size(size: Any) -> str:
    if not isinstance(size, int):
        return "size unknown"
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{size} B"  # pragma: no cover - the loop always returns


def is_platform_file(value: Any) -> TypeGuard[Mapping[str, Any]]:
    return isinstance(value, Mapping) and "link" in value and "name" in value


def is_rows(value: Any) -> bool:
    return isinstance(value, list)


def frame(rows: list[Any]) -> Any:
    """A DataFrame of rows (objects give columns; other values one ``value`` column)."""
    import pandas as pd

    if rows and all(isinstance(r, Mapping) for r in rows):
        return pd.DataFrame.from_records(rows)
    return pd.DataFrame({"value": rows})


def _file_line_text(pf: Mapping[str, Any]) -> str:
    return f"{pf.get('name')} ({human_size(pf.get('size'))}, {pf.get('contentType') or 'no type'}) {pf.get('link')}"


def _file_line_html(pf: Mapping[str, Any]) -> str:
    link = html.escape(str(pf.get("link") or ""), quote=True)
    return (f"<b>{html.escape(str(pf.get('name')))}</b> · {human_size(pf.get('size'))} · "
            f"{html.escape(str(pf.get('contentType') or 'no type'))} · <a href=\"{link}\" target=\"_blank\">{link}</a>")


_MORE_HINT = "%config ConnectorMagics.displaylimit = N shows more"
#: a missing value (a key a row lacks, a null) as pandas shows one, so that it differs from ""
NA_TEXT = "<NA>"
#: to_html's ``na_rep``, and the fence around every text (private-use characters: see :func:`html_table`)
_NA_MARK, _FENCE = "\ue000", "\ue001"


def html_table(table: Any, **options: Any) -> str:
    """``table.to_html`` with missing values a grey ``<NA>`` and every cell's spaces kept (``" lead"``:
    to_html strips them, so each text is fenced by a mark first; HTML would collapse them, hence pre-wrap).

    The marks are private-use characters, which data holds too (icon fonts, U+F8FF): a text equal to the
    missing mark showed as ``<NA>`` and fence characters in a text vanished. So every text is fenced, and
    can never equal the missing mark, and the fences are removed only where they are, right after
    ``<td>`` and right before ``</td>`` (to_html escapes ``<`` inside a cell): a cell shows what it holds."""
    fenced = table.map(lambda value: f"{_FENCE}{value}{_FENCE}" if isinstance(value, str) else value)
    text = fenced.to_html(index=False, na_rep=_NA_MARK, **options)
    text = text.replace(f"<td>{_NA_MARK}</td>", f'<td style="color: #999">{html.escape(NA_TEXT)}</td>')
    text = text.replace(f"<td>{_FENCE}", "<td>").replace(f"{_FENCE}</td>", "</td>")
    return text.replace("<td>", '<td style="white-space: pre-wrap">')


def _table_html(rows: list[Any]) -> str:
    more = _more_rows(len(rows))
    shown = frame(rows[:len(rows) - more])
    note = f"<p><i>{more} more rows not shown ({html.escape(_MORE_HINT)})</i></p>" if more else ""
    return html_table(shown, max_cols=30) + note


def _table_text(rows: list[Any]) -> str:
    if not rows:
        return "(no rows)"
    more = _more_rows(len(rows))
    text = frame(rows[:len(rows) - more]).to_string(index=False, na_rep=NA_TEXT, max_colwidth=LONGEST_TEXT_CELL,
                                                     line_width=OPTIONS.width)
    return text + (f"\n… {more} more rows ({_MORE_HINT})" if more else "")


class ActionOutput(dict):
    """An action's JSON output (a plain ``dict`` to every consumer) with notebook displays."""

    def __init__(self, action: str, value: Mapping[str, Any],
                 preview: Callable[[Mapping[str, Any]], list[dict[str, Any]] | None] | None = None) -> None:
        super().__init__(value)
        self.action = action
        self._preview = preview

    def __reduce__(self) -> tuple[Any, ...]:  # pickles as the plain output
        return (dict, (dict(self),))

    def file_preview(self) -> list[dict[str, Any]] | None:
        """The first rows of the platform file in the output, when it is a small CSV/JSON file."""
        pf = self if is_platform_file(self) else self.get("platformFile")
        if self._preview is None or not is_platform_file(pf):
            return None
        return self._preview(pf)

    def _sections(self) -> list[tuple[str, str, Any]]:
        """(field, kind, value) with kind ``rows``, ``file`` or ``value``."""
        if is_platform_file(self):  # a descriptor itself (``%connectors add-file``)
            return [("platformFile", "file", self)]
        return [(k, "rows" if is_rows(v) else "file" if is_platform_file(v) else "value", v) for k, v in self.items()]

    def _repr_html_(self) -> str:
        parts = [f"<div><small><code>{html.escape(self.action)}</code></small></div>"]
        for key, kind, value in self._sections():
            label = f"<b>{html.escape(key)}</b>"
            if kind == "rows":
                parts.append(f"<div>{label}: {len(value)} item(s)</div>" + (_table_html(value) if value else ""))
            elif kind == "file":
                parts.append(f"<div>{label}: {_file_line_html(value)}</div>")
            else:
                parts.append(f"<div>{label}: <code>{html.escape(repr(value))}</code></div>")
        preview = self.file_preview()
        if preview is not None:
            parts.append("<div><i>first rows of the file</i></div>" + _table_html(preview))
        return "\n".join(parts)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        if cycle:
            printer.text("{...}")
            return
        lines = []
        for key, kind, value in self._sections():
            if kind == "rows":
                lines.append(f"{key}: {len(value)} item(s)")
                if value:
                    lines.append(_table_text(value))
            elif kind == "file":
                lines.append(f"{key}: {_file_line_text(value)}")
            else:
                lines.append(f"{key}: {value!r}")
        preview = self.file_preview()
        if preview is not None:
            lines += ["first rows of the file:", _table_text(preview)]
        printer.text("\n".join(lines) if lines else "{}")


class StatusTable:
    """A titled table (``%connectors``, ``%etl`` without an action, pipeline steps) for both displays."""

    def __init__(self, title: str, rows: list[dict[str, Any]], notes: list[str] | None = None) -> None:
        self.title, self.rows, self.notes = title, rows, notes or []

    def _repr_html_(self) -> str:
        notes = "".join(f"<div>{html.escape(n)}</div>" for n in self.notes)
        body = html_table(frame(self.rows)) if self.rows else "<p>(none)</p>"
        return f"<div><b>{html.escape(self.title)}</b></div>{notes}{body}"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        body = frame(self.rows).to_string(index=False, na_rep=NA_TEXT, line_width=OPTIONS.width) if self.rows \
            else "(none)"
        printer.text("\n".join([self.title, *self.notes, body]))
