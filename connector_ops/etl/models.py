"""Input and output models of the ETL actions, field names exactly as in spec 4.C."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from connector_ops.models import PlatformFile, SpecModel


def _delimiter(value: str) -> str:
    """One character; ``\\t`` and ``tab`` are accepted for a tab because JSON users type them."""
    value = {"\\t": "\t", "tab": "\t", "TAB": "\t"}.get(value, value)
    if len(value) != 1 or value in "\r\n\"":
        raise ValueError("must be a single character other than a quote or a line break")
    return value


def _encoding(value: str) -> str:
    import codecs

    try:
        return codecs.lookup(value).name
    except LookupError:
        raise ValueError(f"unknown encoding {value!r}") from None


class PushFile(PlatformFile):
    """Push needs name, contentType and link (spec 2.1)."""

    name: str
    content_type: str
    link: str


class PushParameters(SpecModel):
    lines_to_ignore: int = Field(0, ge=0, description="physical lines skipped before parsing")
    use_first_row_as_schema: bool | None = Field(
        None, description="the first row gives the column names (default: true unless `schema` is given)"
    )
    csv_delimiter: str = ","
    schema_: list[str] | None = Field(None, alias="schema")
    encoding: str = Field("utf-8-sig", description="extension: text encoding of the file (BOM tolerated)")

    _check_delimiter = field_validator("csv_delimiter")(_delimiter)
    _check_encoding = field_validator("encoding")(_encoding)

    @model_validator(mode="after")
    def _schema_or_header(self) -> PushParameters:
        if self.use_first_row_as_schema is None:
            self.use_first_row_as_schema = self.schema_ is None
        return self


class PushInput(SpecModel):
    platform_file: PushFile
    parameters: PushParameters = Field(default_factory=PushParameters)


class VirtualFileOutput(SpecModel):
    virtual_file_id: str


class PullParameters(SpecModel):
    add_first_row_as_schema: bool = True
    csv_delimiter: str = ","
    encoding: str = "utf-8"
    schema_: list[str] | None = Field(None, alias="schema")

    _check_delimiter = field_validator("csv_delimiter")(_delimiter)
    _check_encoding = field_validator("encoding")(_encoding)


class PullInput(SpecModel):
    virtual_file_id: str = Field(min_length=1)
    export_type: Literal["json", "csv"]
    export_name: str = Field(min_length=1)
    parameters: PullParameters = Field(default_factory=PullParameters)


class PlatformFileOutput(SpecModel):
    platform_file: PlatformFile


class IterateInput(SpecModel):
    content: str | list[Any] = Field(description="a virtual file id, or an array to batch")
    max_batch_size: int = Field(ge=1, description="maximum elements returned by one call")


class IterateOutput(SpecModel):
    content: list[Any]
    has_next: bool


class QueryInput(SpecModel):
    virtual_file_id: str = Field(min_length=1, description="the virtual file to query (not shown in the spec)")
    query: dict[str, Any]
    extract_only_one_result: bool = False


class QueryOutput(SpecModel):
    result: list[dict[str, Any]]


class AppendRow(SpecModel):
    virtual_file_id: str = Field(min_length=1)
    content: dict[str, Any]


class AppendRowsInput(SpecModel):
    rows: list[AppendRow]


class CleanInput(SpecModel):
    virtual_file_id: str = Field(min_length=1)
