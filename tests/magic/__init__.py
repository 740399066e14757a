"""Tests of the notebook magics and the example notebooks."""
