"""Input and output models of the ETL actions, field names exactly as in spec 4.C."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from connector_ops.kernel.errors import InvalidInput
from connector_ops.kernel.limits import MAX_BATCH_SIZE, text_encoding
from connector_ops.kernel.platform_file import (
    ANY_CASE,
    REFERABLE,
    FileName,
    MediaType,
    PlatformFile,
    PresentWhen,
    SpecModel,
)


def refuse_given(parameters: SpecModel, fields: frozenset[str], why: str, *, unless_default: bool = False) -> None:
    """A 400 naming the first (by input name) of ``fields`` the caller gave: ``why`` they do not apply.

    With ``unless_default``, one given at its default value passes: the docs' examples, the scaffold and the
    shipped pipelines spell ``csvDelimiter: ","`` out, and a file switched from CSV to JSON keeps it, meaning
    nothing by it; another value means something the file cannot do."""
    known = type(parameters).model_fields
    given = sorted(known[f].alias or f for f in parameters.model_fields_set & fields
                   if not (unless_default and getattr(parameters, f) == known[f].default))
    if given:
        raise InvalidInput(f"parameters.{given[0]}", f"does not apply to {why}")


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("holds a NUL character (\\u0000)")
    return value


#: The virtual file of an action that lets a NUL into its input for the values (``nul_in_values``: Append
#: Rows' row values, Query's and Delete Rows' filter operands, which SQLite keeps): an id never holds one
#: (PostgreSQL would refuse it as a parameter, not find nothing).
NulFreeId = Annotated[str, Field(min_length=1), AfterValidator(_no_nul)]


def check_delimiter(value: str) -> str:
    """One character; ``\\t`` and ``tab`` are accepted for a tab because JSON users type them."""
    value = {"\\t": "\t", "tab": "\t", "TAB": "\t"}.get(value, value)
    if len(value) != 1 or value in "\r\n\"":
        raise ValueError("must be a single character other than a quote or a line break")
    return value


def _encoding(value: str) -> str:
    return text_encoding(value)


def _batch_size(value: int) -> int:
    """Larger than any virtual file means "all": clamped to what every database's LIMIT takes."""
    return min(value, MAX_BATCH_SIZE)


class PushFile(PlatformFile):
    """Push needs name, contentType and link (spec 2.1)."""

    name: str
    content_type: MediaType
    link: str


class PushParameters(SpecModel):
    lines_to_ignore: int = Field(0, ge=0, description="physical lines skipped before parsing")
    use_first_row_as_schema: bool | None = Field(
        None, description="the first row gives the column names (default: true unless `schema` is given)"
    )
    csv_delimiter: str = ","
    schema_: list[str] | None = Field(None, alias="schema")
    encoding: str = Field("utf-8-sig", description="extension: text encoding of the file (BOM tolerated); "
                                                    "when not given, the charset of platformFile.contentType if it "
                                                    "names one")
    on_row_error: Literal["fail", "quarantine"] = Field(
        "fail", description="extension: `fail` (the spec) refuses the file at its first bad row; `quarantine` "
                            "loads the good rows and writes each bad line (a ragged CSV row, an NDJSON line that "
                            "is not a JSON object) with its line number and reason to a rejects virtual file")

    _check_delimiter = field_validator("csv_delimiter")(check_delimiter)
    _check_encoding = field_validator("encoding")(_encoding)

    @model_validator(mode="after")
    def _schema_or_header(self) -> PushParameters:
        if self.use_first_row_as_schema is None:
            self.use_first_row_as_schema = self.schema_ is None
        return self


class PushInput(SpecModel):
    platform_file: PushFile = Field(
        description="a CSV, JSON or NDJSON file (extension: Parquet; any of them compressed by gzip, bzip2, xz or "
                    "zstd, or the one data file of a zip archive)")
    parameters: PushParameters = Field(default_factory=PushParameters)


class VirtualFileOutput(SpecModel):
    virtual_file_id: Annotated[str, REFERABLE]


class PushOutput(VirtualFileOutput):
    rejects_file_id: Annotated[str | None, REFERABLE, PresentWhen("parameters.onRowError", "quarantine")] = Field(
        None, description="extension, only with onRowError: quarantine: the virtual file of the refused lines "
                          "(columns line, reason, text; empty when every line loaded)")


#: the parameters of a Push or Pull that only CSV reads: a JSON file's values are not separated by one
FOR_CSV_ONLY = frozenset({"csv_delimiter"})
#: and of a Pull: a JSON export's objects name their columns, so it has no header row to leave out; nor does
#: a spreadsheet open it, whose formulas ``escapeFormulas`` is for
FOR_CSV_EXPORT_ONLY = FOR_CSV_ONLY | {"add_first_row_as_schema", "escape_formulas"}


class PullParameters(SpecModel):
    add_first_row_as_schema: bool = True
    csv_delimiter: str = ","
    encoding: str = "utf-8"
    schema_: list[str] | None = Field(None, alias="schema")
    escape_formulas: bool = Field(
        False, description="extension, CSV only: a cell or column name starting with =, +, -, @, a tab or a "
                           "carriage return gets a ' before it, so a spreadsheet shows it as text instead of "
                           "running it as a formula (default: values written exactly)")

    _check_delimiter = field_validator("csv_delimiter")(check_delimiter)
    _check_encoding = field_validator("encoding")(_encoding)


class PullInput(SpecModel):
    virtual_file_id: str = Field(min_length=1)
    export_type: Literal["json", "csv", "parquet"] = Field(
        description="`csv` or `json` (the spec); extension: `parquet`, every column a string column")
    export_name: FileName = Field(
        description="the new file's name; extension: ending in .gz, .bz2, .xz or .zst compresses the export, "
                    "in .zip writes a zip archive holding it")
    parameters: PullParameters = Field(default_factory=PullParameters)


class IterateInput(SpecModel):
    content: str | list[Any] = Field(description="a virtual file id, or an array to batch")
    max_batch_size: int = Field(ge=1, description="maximum elements returned by one call")

    _clamp_batch_size = field_validator("max_batch_size")(_batch_size)


class IterateOutput(SpecModel):
    content: Annotated[list[Any], REFERABLE]
    has_next: bool


class QueryInput(SpecModel):
    virtual_file_id: NulFreeId = Field(description="the virtual file to query (not shown in the spec)")
    query: dict[str, Any]
    extract_only_one_result: bool = False


class QueryOutput(SpecModel):
    result: Annotated[list[dict[str, Any]], REFERABLE]


class AppendRow(SpecModel):
    virtual_file_id: NulFreeId
    content: dict[str, Any]

    # a column name never holds a NUL (only a value may: :func:`~connector_ops.etl.actions.append_rows`)
    @field_validator("content")
    @classmethod
    def _no_nul_in_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        if (key := next((k for k in value if "\x00" in k), None)) is not None:
            raise ValueError(f"a key holds a NUL character: {key!r}")
        return value


class AppendRowsInput(SpecModel):
    rows: list[AppendRow]


class CleanInput(SpecModel):
    virtual_file_id: str = Field(min_length=1)


# -- transforms: Delete Rows, Map, Validate, Join ------------------------------------------------------
class DeleteRowsInput(SpecModel):
    virtual_file_id: NulFreeId
    request: dict[str, Any] = Field(description="a MongoDB query filter; keys are (literal) column names")
    dry_run: bool = Field(False, description="our extension: count the rows that would be deleted, delete nothing")


class DeleteRowsOutput(SpecModel):
    deleted_count: int


class MapInput(SpecModel):
    virtual_file_id: str = Field(min_length=1)
    overwrite_virtual_file: bool = Field(False, description="replace the rows of the same virtual file")
    action: str = Field(min_length=1, description="built-in steps joined by |, a map_action name, or pkg.mod:fn")


class ValidateInput(SpecModel):
    content: list[dict[str, Any]] | str = Field(description="rows, or a virtual file id (then the outputs are ids)")
    schema_: dict[str, Any] = Field(alias="schema", description="column name -> rule (spec 2.7)")


class RejectedRow(SpecModel):
    error: str
    content: str


class ValidateOutput(SpecModel):
    validated: Annotated[list[dict[str, Any]] | str, REFERABLE]  # rows or a virtual file id, as the input's
    rejected: Annotated[list[RejectedRow] | str, REFERABLE]


class JoinSide(SpecModel):
    virtual_file_id: str = Field(min_length=1)
    custom_id: str = Field(min_length=1, description="short name used in outputSchema (no dot)")
    key: str = Field(description="the column to match on")

    @field_validator("custom_id")
    @classmethod
    def _no_dot(cls, value: str) -> str:
        if "." in value:
            raise ValueError("must not contain a dot (outputSchema references are '<customId>.<column>')")
        return value


class JoinSpec(SpecModel):
    left: JoinSide
    right: JoinSide
    type: Literal["INNER", "LEFT"] = Field("INNER", json_schema_extra={ANY_CASE: True})

    @field_validator("type", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _distinct_ids(self) -> JoinSpec:
        if self.left.custom_id == self.right.custom_id:
            raise ValueError("left.customId and right.customId must differ")
        return self


class JoinInput(SpecModel):
    join: JoinSpec
    output_schema: dict[str, str] | None = Field(None, description="output column -> '<customId>.<column>'")


class JoinOutput(SpecModel):
    rejection_file_id: Annotated[str, REFERABLE]
    virtual_file_id: Annotated[str, REFERABLE]
