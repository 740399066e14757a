"""Sample data shipped with the package, stored as platform files for the demo jobs."""

from importlib import resources as importlib_resources

import dagster as dg

from connector_ops.ops.factory import failing_as
from connector_ops.resources.platform_files import PlatformFileStore

SAMPLES = ("sales.csv", "customers.csv")


def sample_path(name: str) -> str:
    if name not in SAMPLES:
        raise ValueError(f"unknown sample {name!r}; samples are {SAMPLES}")
    return str(importlib_resources.files("connector_ops.pipelines") / "data" / name)


class SampleConfig(dg.Config):
    name: str = "sales.csv"


@dg.op(tags={"connector": "etl"})
def sample_file(
    context: dg.OpExecutionContext, config: SampleConfig, platform_files: dg.ResourceParam[PlatformFileStore]
) -> dict:
    """Store a bundled sample CSV as a platform file and return its descriptor."""
    with failing_as("sample_file"):  # the disk guard, an unwritable home: their words, not Dagster's wrapper
        descriptor = platform_files.add_file(sample_path(config.name)).to_json()
    context.add_output_metadata({"link": dg.MetadataValue.url(descriptor["link"]), "size": descriptor["size"]})
    return descriptor
