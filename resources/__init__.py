"""Plain clients and stores that own all I/O: platform files, virtual files, the drive and mail clients.

Installed as ``connector_ops.resources``. They import only ``connector_ops.kernel`` and third-party
libraries (no Dagster: the op layer adapts them), which ``tests/test_floors.py`` holds.
"""
