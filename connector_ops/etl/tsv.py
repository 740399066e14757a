"""Tab-separated files: a ``.tsv`` name (or the ``text/tab-separated-values`` type) means a tab between fields.

Push and Pull once read and wrote ``report.tsv`` with the default ``,``, silently: a real TSV pushed became
one column with tabs in its name, and Pull's ``report.tsv`` held commas, which every spreadsheet and
``csv.excel_tab`` read as one column. Now such a name defaults ``csvDelimiter`` to a tab on both sides (the
name without a compression's suffix: ``report.tsv.gz``, a zip archive's ``report.tsv``); a ``csvDelimiter``
given in the input still wins, so a file misnamed ``.tsv`` can be read as it is. A content type says more
than the name: ``text/csv`` means the default ``,`` whatever the name (Pull's ``report.tsv`` written with
``csvDelimiter: ","`` says ``text/csv``, and was read back by its name as one column); the name decides only
under a type that does not say (none, ``application/octet-stream``, ``text/plain``, a compression's).

Any other delimiter is named by a ``delimiter`` parameter of the content type (our extension), which Pull
writes whenever its type and name would say another one: ``report.tsv`` or ``report.csv`` written with
``csvDelimiter: ";"`` is ``text/csv; delimiter=";"``, ``report.tsv.gz`` written with commas
``application/gzip; delimiter=","``. Such a file once said ``text/csv`` (or only its ``.tsv`` name) and was
pushed back by commas (or tabs) unless ``csvDelimiter`` was given again: one column named ``id;name``. Push
reads the parameter before the type and the name; a ``csvDelimiter`` given still wins.
"""

from __future__ import annotations

from typing import TypeVar

from connector_ops.etl.models import PullParameters, PushParameters, check_delimiter
from connector_ops.etl.suffixes import ends_with
from connector_ops.kernel.errors import InvalidInput
from connector_ops.kernel.media_types import media_type, parameter, parameter_text

Parameters = TypeVar("Parameters", PushParameters, PullParameters)

TSV_SUFFIX = ".tsv"
#: the names of delimited text, as Push tells formats (:mod:`.compressed`'s ``TYPE_SUFFIXES``)
CSV_SUFFIXES = (".csv", TSV_SUFFIX)
#: IANA's media type for TSV (what ``mimetypes`` gives ``.tsv``, so ``files add`` of one already says it)
TSV_TYPE = "text/tab-separated-values"
CSV_TYPE = "text/csv"
#: the content type's parameter naming a delimiter its type and name do not imply (Pull's ``report.csv``
#: written with ``;``)
DELIMITER = "delimiter"


def is_tsv(name: str, content_type: str = "") -> bool:
    """Whether a file's content type says tab-separated values, or, unless it says ``text/csv``, its
    (uncompressed) name does."""
    said = media_type(content_type)
    if said in (TSV_TYPE, CSV_TYPE):
        return said == TSV_TYPE
    return ends_with(name, TSV_SUFFIX)


def is_csv(name: str, content_type: str = "") -> bool:
    """Whether a file says it is delimited text: its media type is ``text/csv`` or TSV's (parameters aside),
    or its (uncompressed) name ends in ``.csv`` or ``.tsv``. Push reads every file that is neither Parquet nor
    JSON as CSV, whatever it says; this is for what must know the file *is* one (the notebook's preview, which
    once took any name or type holding the letters ``csv``: ``csv_notes.txt``, ``text/csv-schema``)."""
    return media_type(content_type) in (CSV_TYPE, TSV_TYPE) or ends_with(name, CSV_SUFFIXES)


def csv_delimiter(parameters: PushParameters | PullParameters, name: str, content_type: str = "") -> str:
    """The delimiter a CSV Push or Pull uses: ``csvDelimiter`` when the input gives it, else the one the
    content type's ``delimiter`` parameter names, else a tab for a TSV (:func:`is_tsv`), else the default
    ``,``."""
    if "csv_delimiter" in parameters.model_fields_set:
        return parameters.csv_delimiter
    labelled = labelled_delimiter(content_type)
    if labelled is not None:
        return labelled
    return "\t" if is_tsv(name, content_type) else parameters.csv_delimiter


def labelled_delimiter(content_type: str) -> str | None:
    """The delimiter a content type's ``delimiter`` parameter names (spelled as ``csvDelimiter`` is: ``tab``
    for a tab), else ``None``; a 400 naming ``platformFile.contentType`` for one no CSV can have."""
    value = parameter(content_type, DELIMITER)
    if value is None:
        return None
    try:
        return check_delimiter(value)
    except ValueError as exc:
        raise InvalidInput("platformFile.contentType", f"names delimiter {value!r}, which no CSV can have ({exc}); "
                                                       "set parameters.csvDelimiter to the file's") from None


def delimiter_label(name: str, delimiter: str, content_type: str) -> str:
    """What a CSV export written with ``delimiter`` adds to its ``content_type`` (the type it says, without
    parameters) for Push to read it back as written: ``""`` when the type and the name already say that
    delimiter (:func:`csv_delimiter`'s defaults), else ``; delimiter=…``."""
    if csv_delimiter(PullParameters(), name, content_type) == delimiter:
        return ""
    return parameter_text(DELIMITER, "tab" if delimiter == "\t" else delimiter)


def with_csv_delimiter(parameters: Parameters, name: str, content_type: str = "") -> Parameters:
    """``parameters`` with :func:`csv_delimiter`'s delimiter (a copy when it changes)."""
    delimiter = csv_delimiter(parameters, name, content_type)
    if delimiter == parameters.csv_delimiter:
        return parameters
    return parameters.model_copy(update={"csv_delimiter": delimiter})


def csv_content_type(name: str, delimiter: str) -> str:
    """A CSV export's media type: TSV's for a ``.tsv`` name written with tabs, else ``text/csv`` (and another
    delimiter than ``,`` is named by :func:`delimiter_label`)."""
    return TSV_TYPE if delimiter == "\t" and ends_with(name, TSV_SUFFIX) else CSV_TYPE
