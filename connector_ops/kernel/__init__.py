"""The bottom floor: what every other layer shares and nothing of the project it depends on.

Errors, the platform-file model, progress reporting, secret masking, address checks, atomic writes and
the base class of resources. Modules here import only the standard library and third-party packages;
``tests/test_floors.py`` holds that rule.
"""
