"""The ETL connector (spec 4.C): virtual files pushed from, transformed and pulled to platform files."""

from connector_ops.etl.map_functions import map_action

__all__ = ["map_action"]
