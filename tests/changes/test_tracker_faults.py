"""The revision tracker under faults, as a user runs it (``neurarch-trace
changes``, a real process in its own process group, on a git repo the test
builds):

* killed with SIGKILL mid-run, twice, then run again: the store ends with
  exactly the revisions and typed changes a run without faults stores (none
  lost, none twice), the rows stored before the kills untouched, and SQLite's
  ``PRAGMA integrity_check`` ok;
* a repo whose files are code (``modeling_evil.py``, ``configuration_evil.py``,
  pickled ``pytorch_model.bin``/``training_args.bin``) and whose config names
  it (``auto_map``, ``trust_remote_code``, module-path ``architectures``):
  ``changes`` and ``diff`` run with the repo as the working directory and on
  ``PYTHONPATH`` (an import would find the code), and the marker the code
  writes never appears.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from changes_fixtures import BASE_CONFIG, GitRepo, js, model_revisions

pytestmark = pytest.mark.slow


def changes_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "neurarch.cli", "changes", *args]


def run_until(argv: list[str], needle: str, log: Path, timeout: float = 300) -> bool:
    """Start ``argv`` in its own process group; SIGKILL the group once stderr shows ``needle``.
    True if it was killed there, False if it finished first."""
    with open(log, "w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if needle in log.read_text():
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
                return True
            if proc.poll() is not None:
                return False
            time.sleep(0.05)
        raise AssertionError(f"{needle!r} not seen in {timeout} s: {log.read_text()[-1000:]}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def stored(db: Path) -> tuple[list, list, list]:
    with sqlite3.connect(db) as con:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        revs = con.execute('SELECT id, "commit", vanished FROM repo_revisions ORDER BY id').fetchall()
        changes = con.execute('SELECT id, osv_id, "commit", kind, file, summary, fixed FROM repo_changes ORDER BY id').fetchall()
        files = con.execute("SELECT revision_id, path, blob FROM repo_files ORDER BY revision_id, path").fetchall()
    return revs, changes, files


def test_killed_mid_run_then_rerun_loses_and_duplicates_nothing(tmp_path):
    revisions = model_revisions()
    repo = GitRepo(tmp_path / "tiny-llama")
    for files, title, date in revisions[:4]:
        repo.commit(files, title, date)
    db = tmp_path / "store.db"
    store = ["--store", f"sqlite:///{db}"]
    # 1. the first four revisions, stored by a run that finishes
    subprocess.run(changes_cmd(str(repo.path), *store, "-q"), check=True, timeout=300, capture_output=True)
    revs_before, changes_before, files_before = stored(db)
    assert [c for _, c, _ in revs_before] and {c for _, c, _ in revs_before} == set(repo.commits)

    # 2. two more revisions; the runs that read them are killed: once while reading, once while building both sides
    for files, title, date in revisions[4:]:
        repo.commit(files, title, date)
    argv = changes_cmd(str(repo.path), *store)
    assert run_until(argv, f"reading {repo.commits[4][:12]}", tmp_path / "run2.log")
    assert run_until(argv, f"building both sides of config.json at {repo.commits[5][:12]}", tmp_path / "run3.log")
    revs_mid, changes_mid, files_mid = stored(db)
    assert (revs_mid, changes_mid, files_mid) == (revs_before, changes_before, files_before)  # nothing half-written

    # 3. run again to the end; and a fresh store from one run without faults
    out = subprocess.run(argv[:-2] + [*store, "-q", "--format", "json"], check=True, timeout=300, capture_output=True, text=True)
    fresh = tmp_path / "fresh.db"
    ref = subprocess.run(changes_cmd(str(repo.path), "--store", f"sqlite:///{fresh}", "-q", "--format", "json"), check=True, timeout=300, capture_output=True, text=True)
    revs, changes, files = stored(db)
    ref_revs, ref_changes, ref_files = stored(fresh)
    assert sorted(c for _, c, _ in revs) == sorted(repo.commits)  # six, each once
    assert len({c for _, c, _ in revs}) == len(revs) == 6
    assert sorted(r[1:] for r in changes) == sorted(r[1:] for r in ref_changes)  # the same typed changes, each once
    assert len({r[1] for r in changes}) == len(changes) == 5  # c2..c6: one typed change each (changes_fixtures)
    assert revs[: len(revs_before)] == revs_before  # the rows stored before the kills keep their ids
    assert files[: len(files_before)] == files_before
    got, want = json.loads(out.stdout), json.loads(ref.stdout)
    assert [c["id"] if "id" in c else c["commit"] for c in got["changes"]] == [c["id"] if "id" in c else c["commit"] for c in want["changes"]]
    assert [r["commit"] for r in got["revisions"]] == [r["commit"] for r in want["revisions"]] == list(reversed(repo.commits))


class _WritesMarker:
    def __init__(self, marker: Path):
        self.code = f"open({str(marker)!r}, 'a').write('pickle ran')"

    def __reduce__(self):
        return (exec, (self.code,))


def test_tracker_runs_no_repo_code(tmp_path):
    marker = tmp_path / "MARKER"
    repo = GitRepo(tmp_path / "evil-repo")
    code = f"open({str(marker)!r}, 'a').write('module ran')\nclass EvilForCausalLM: pass\nclass EvilConfig: pass\n"
    auto_map = {"AutoConfig": "configuration_evil.EvilConfig", "AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}
    blob = pickle.dumps(_WritesMarker(marker))
    evil = {"modeling_evil.py": code.encode(), "configuration_evil.py": code.encode(), "__init__.py": code.encode(), "pytorch_model.bin": blob, "training_args.bin": blob}
    configs = [
        dict(BASE_CONFIG, auto_map=auto_map),
        dict(BASE_CONFIG, auto_map=auto_map, trust_remote_code=True, hidden_size=128),
        dict(BASE_CONFIG, architectures=["modeling_evil.EvilForCausalLM"], num_hidden_layers=3),
        dict(BASE_CONFIG, architectures=[f"__import__('modeling_evil') or open({str(marker)!r}, 'w')"]),
        dict(BASE_CONFIG),
    ]
    for i, cfg in enumerate(configs):
        repo.commit({**(evil if i == 0 else {}), "config.json": js(cfg)}, f"rev {i}", f"2026-0{i + 1}-01T10:00:00+00:00")
    # Control: the repo's code is live where the tracker runs (an import from the repo writes the marker).
    env = dict(os.environ, PYTHONPATH=str(repo.path))
    subprocess.run([sys.executable, "-c", "import modeling_evil"], env=env, cwd=repo.path, check=True, timeout=60)
    subprocess.run([sys.executable, "-c", f"import pickle; pickle.load(open({str(repo.path / 'pytorch_model.bin')!r}, 'rb'))"], check=True, timeout=60)
    assert marker.read_text() == "module ranpickle ran"
    marker.unlink()

    runs = [
        changes_cmd(str(repo.path), "--no-store", "--format", "json"),
        changes_cmd(str(repo.path), "--store", f"sqlite:///{tmp_path / 's.db'}", "--format", "osv"),
        [sys.executable, "-m", "neurarch.cli", "diff", f"{repo.path / 'config.json'}@{repo.commits[1]}", f"{repo.path / 'config.json'}@{repo.commits[4]}"],
        [sys.executable, "-m", "neurarch.cli", "diff", str(repo.path), f"{repo.path / 'config.json'}@{repo.commits[2]}"],
    ]
    for argv in runs:
        r = subprocess.run(argv, env=env, cwd=repo.path, capture_output=True, text=True, timeout=300)
        assert r.returncode in (0, 2), (argv, r.stderr[-1500:])  # a result, or one clean line
        if r.returncode == 2:
            assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr[-1500:]
        assert not marker.exists(), (argv, r.stderr[-500:])
