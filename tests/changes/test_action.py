"""action.yml: its steps' shell scripts run here as GitHub would run them (env, RUNNER_TEMP, GITHUB_OUTPUT).

The diff step runs the real neurarch-trace on two commits of a git model repo;
the comment step runs against a stand-in ``gh`` on PATH that records its calls.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ACTION = Path(__file__).resolve().parents[2] / "action.yml"


def step(name_start: str) -> dict:
    spec = yaml.safe_load(ACTION.read_text())
    return next(s for s in spec["runs"]["steps"] if s.get("name", "").startswith(name_start))


def test_composite_with_cpu_torch():
    spec = yaml.safe_load(ACTION.read_text())
    assert spec["runs"]["using"] == "composite"
    install = step("Install neurarch")["run"]
    assert "--index-url https://download.pytorch.org/whl/cpu" in install
    assert 'neurarch-trace diff "$MODEL_PATH@$BASE" "$MODEL_PATH@$HEAD" --plan --format markdown' in step("neurarch-trace diff")["run"]


def _bin_dir(tmp: Path) -> Path:
    """PATH entries: this venv's neurarch-trace, and a gh that logs its arguments."""
    b = tmp / "bin"
    b.mkdir()
    exe = shutil.which("neurarch-trace") or str(Path(sys.executable).with_name("neurarch-trace"))
    (b / "neurarch-trace").symlink_to(exe)
    return b


@pytest.mark.slow
def test_diff_step_writes_the_marker_and_the_plan_diff(model_repo, tmp_path):
    env = {**os.environ, "PATH": f"{_bin_dir(tmp_path)}:{os.environ['PATH']}", "RUNNER_TEMP": str(tmp_path),
           "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"), "GITHUB_OUTPUT": str(tmp_path / "output"),
           "MODEL_PATH": ".", "BASE": model_repo.commits[0], "HEAD": model_repo.commits[1],
           "EXTRA_ARGS": "--modes full --seq-len 16 --no-verify", "NEURARCH_CACHE_DIR": str(tmp_path / "cache")}  # fmt: skip
    run = subprocess.run(["bash", "-c", step("neurarch-trace diff")["run"]], cwd=model_repo.path, env=env,
                         capture_output=True, text=True, timeout=400)  # fmt: skip
    assert run.returncode == 0, run.stderr
    body = (tmp_path / "neurarch-diff.md").read_text()
    assert body.startswith("<!-- neurarch-diff: . -->\n### neurarch: `.@")
    assert "| Parameters | 202,048 | 551,808 | +349,760 (+173.1 %) |" in body  # hand figures, test_git_history.py
    assert "| GPU memory, full fine-tuning (batch 1) |" in body and "**Largest batch per card** (A → B)" in body
    assert (tmp_path / "output").read_text() == f"file={tmp_path / 'neurarch-diff.md'}\n"
    assert (tmp_path / "summary.md").read_text() == body


@pytest.mark.parametrize("existing, method", [("", "POST"), ("4242", "PATCH")])
def test_comment_step_posts_once_then_updates(tmp_path, existing, method):
    b = tmp_path / "bin"
    b.mkdir()
    log = tmp_path / "gh.log"
    # the stand-in answers the comment listing (--jq already applied) with `existing`, and logs every call
    (b / "gh").write_text(f'#!/bin/bash\necho "$@" >> {log}\ncase "$*" in *--paginate*) [ -n "{existing}" ] && echo {existing};; esac\nexit 0\n')
    (b / "gh").chmod(0o755)
    body = tmp_path / "body.md"
    body.write_text("<!-- neurarch-diff: models/x -->\n### neurarch: ...\n")
    env = {**os.environ, "PATH": f"{b}:{os.environ['PATH']}", "GH_TOKEN": "t", "PR": "7", "REPO": "org/repo",
           "MODEL_PATH": "models/x", "FILE": str(body)}  # fmt: skip
    run = subprocess.run(["bash", "-c", step("Post or update")["run"]], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    calls = log.read_text().splitlines()
    assert calls[0].startswith("api --paginate repos/org/repo/issues/7/comments --jq")
    assert 'startswith("<!-- neurarch-diff: models/x -->")' in calls[0]
    if method == "PATCH":
        assert calls[1] == f"api --method PATCH repos/org/repo/issues/comments/4242 -F body=@{body}"
    else:
        assert calls[1] == f"api --method POST repos/org/repo/issues/7/comments -F body=@{body}"
    assert len(calls) == 2
