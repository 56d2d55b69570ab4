"""Fixtures of the revision tracker's tests (the repo they read is built in changes_fixtures.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # hubserver.py

from changes_fixtures import GitRepo, build_model_repo  # noqa: E402


@pytest.fixture(scope="session")
def model_repo(tmp_path_factory) -> GitRepo:
    return build_model_repo(tmp_path_factory.mktemp("repo") / "tiny-llama")


@pytest.fixture(scope="session")
def history(model_repo):
    from neurarch.changes import readers, track

    return track.track(readers.GitReader(model_repo.path))
