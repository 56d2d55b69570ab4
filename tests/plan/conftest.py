"""Fixtures the plan's cache tests share."""

import json

import pytest

from tiny_configs import LLAMA


@pytest.fixture
def model(tmp_path, monkeypatch):
    """A 2-layer Llama folder (small: simulated whole), its own cache directory, the jobs in this process."""
    monkeypatch.setenv("NEURARCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("NEURARCH_JOBS", "1")
    monkeypatch.delenv("NEURARCH_NO_CACHE", raising=False)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(LLAMA))
    return str(tmp_path / "m")
