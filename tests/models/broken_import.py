"""Fixture: a file whose import fails (tests/sources/test_python_source.py)."""

raise RuntimeError("this file fails on import")
