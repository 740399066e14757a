"""Tests of the transactional e-mail connector (issue 5)."""
