"""Dagster resources that own all I/O: platform files, virtual files, the drive and mail clients."""
