"""The ETL connector (spec 4.C): virtual files pushed from, transformed and pulled to platform files."""
