import os
import sys
from pathlib import Path

import pytest

# Tests never reach the network: the hub tests start their own local hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

# tests/ itself: the shared helpers (tiny_configs, hubserver) import from any test folder.
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True)
def _fresh_cache_dir(tmp_path_factory, monkeypatch):
    """Every test gets an empty neurarch cache (simulations, hub headers): a hit left by another test
    would hide a regression.  Tests that test the cache set their own directory."""
    monkeypatch.setenv("NEURARCH_CACHE_DIR", str(tmp_path_factory.mktemp("neurarch-cache")))
