"""neurarch.sweep on a real dask LocalCluster: limits per item, the results file, resume, a real model."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sweep_jobs as jobs

from neurarch.sweep import read_results, run_sweep

MB = 1 << 20
ROOT = Path(__file__).resolve().parents[2]


def _job(item):
    """One job with a behaviour per item name (module-level: dask pickles it by reference)."""
    kind, _, arg = item.partition(":")
    if kind == "sleep":
        return jobs.sleeps_forever()
    if kind == "cblock":
        return jobs.blocks_in_c(arg)
    if kind == "grow":
        return jobs.grows(20, 4000)
    if kind == "raise":
        return jobs.raises()
    if kind == "pool":
        return jobs.forks_a_pool(4)
    return jobs.answer(item)


def test_two_workers_limits_per_item_and_the_file(tmp_path):
    out = tmp_path / "results.jsonl"
    marker = tmp_path / "cblock.pid"
    items = ["sleep", f"cblock:{marker}", "grow", "raise", "a", "b", "c"]
    t0 = time.monotonic()
    seen = []
    records = run_sweep(items, job=_job, results_path=out, time_limit_s=2.0, grace_s=1.0, memory_limit_bytes=250 * MB, workers=2, on_record=seen.append)
    wall = time.monotonic() - t0
    by = {r.key: r for r in records}
    assert [r.key for r in records] == items  # in the items' order
    assert by["sleep"].status == "timeout" and by["sleep"].progress == {"stage": "about to sleep"}
    assert by[f"cblock:{marker}"].status == "hang" and 3.0 <= by[f"cblock:{marker}"].seconds < 5.0
    assert by["grow"].status == "memory" and by["grow"].peak_rss_bytes > 250 * MB
    assert by["raise"].status == "error" and by["raise"].error == "ValueError: first line second line"
    for k in "abc":
        assert by[k].ok and by[k].value["item"] == k
    assert len({by[k].value["pid"] for k in "abc"}) == 3  # each item in its own process
    assert len({r.worker for r in records}) == 2  # both dask workers took items
    assert {r.key for r in seen} == set(items)
    # the file has one JSON line per item, written as each finished
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(d["key"] for d in lines) == sorted(items)
    assert wall < 60


def test_resume_runs_only_the_missing_items(tmp_path):
    out, log = tmp_path / "results.jsonl", tmp_path / "calls.log"
    job = functools.partial(jobs.logged, log=str(log))
    run_sweep(["a", "b"], job=job, results_path=out, time_limit_s=20, workers=1)
    assert sorted(log.read_text().split()) == ["a", "b"]
    with open(out, "a") as fh:  # a record cut short by a kill: not a record
        fh.write('{"key": "c", "item": "c", "sta')
    records = run_sweep(["a", "b", "c", "d"], job=job, results_path=out, time_limit_s=20, workers=1)
    calls = log.read_text().split()
    assert sorted(calls[:2]) == ["a", "b"] and sorted(calls[2:]) == ["c", "d"]  # a and b did not run again
    assert [r.key for r in records] == ["a", "b", "c", "d"] and all(r.ok for r in records)
    assert set(read_results(out)) == {"a", "b", "c", "d"}
    # nothing missing: no cluster is started, nothing runs
    assert run_sweep(["a", "d"], job=job, results_path=out, time_limit_s=20, workers=1)[1].key == "d"
    assert len(log.read_text().split()) == 4
    # --no-resume: the file starts afresh
    run_sweep(["b"], job=job, results_path=out, time_limit_s=20, workers=1, resume=False)
    assert set(read_results(out)) == {"b"} and log.read_text().split()[-1] == "b"


def test_retry_failed_runs_only_the_failures_again(tmp_path):
    out, flag = tmp_path / "results.jsonl", tmp_path / "fixed"
    job = functools.partial(jobs.fails_until, flag=str(flag))
    first = run_sweep(["x", "y"], job=job, results_path=out, time_limit_s=20, workers=1)
    assert [r.status for r in first] == ["ok", "error"]
    flag.write_text("")
    again = run_sweep(["x", "y"], job=job, results_path=out, time_limit_s=20, workers=1, retry_failed=True)
    assert [r.status for r in again] == ["ok", "ok"]
    assert again[0].finished == first[0].finished  # x was not run again


def test_a_catalog_model_through_the_command_line(tmp_path):
    out = tmp_path / "results.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "neurarch.sweep", "sentence-transformers/all-MiniLM-L6-v2", "--no-backward", "--no-verify", "--out", str(out), "--workers", "1", "--timeout", "120"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "NEURARCH_JOBS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "1 models in" in proc.stdout and "1 ok" in proc.stdout
    rec = read_results(out)["sentence-transformers/all-MiniLM-L6-v2"]
    params = rec.value["params"]
    # BERT, 6 layers, hidden 384, FFN 1536, vocab 30522, 512 positions:
    # embeddings 30522*384 + 512*384 + 2*384 + 2*384 = 11,918,592
    # per layer 4*(384*384+384) + 384*1536+1536 + 1536*384+384 + 2*2*384 = 1,774,464; x6 = 10,646,784
    # pooler 384*384+384 = 147,840 -> 22,713,216
    assert params["derived"] == 22_713_216
    # the published checkpoint (Hub safetensors.total) also stores embeddings.position_ids: 512 more
    assert params["checkpoint"] == 22_713_728 == params["derived"] + 512


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--out", "x.jsonl"], "no models"),
        (["gpt2", "--out", "x.jsonl", "--memory-limit", "12XB"], "--memory-limit must look like"),
        (["gpt2", "--out", "x.jsonl", "--workers", "0"], "--workers must be 1 or more"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(tmp_path, argv, message):
    proc = subprocess.run([sys.executable, "-m", "neurarch.sweep", *argv], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.jsonl").exists()


def test_a_scheduler_address_sends_the_items_to_that_cluster(tmp_path):
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None, memory_limit=0) as cluster:
        records = run_sweep(["p", "q", "pool"], job=_job, results_path=tmp_path / "r.jsonl", time_limit_s=20, scheduler=cluster.scheduler_address)
        assert [r.status for r in records] == ["ok", "ok", "ok"]
        assert records[2].value == [4, 3, 2, 1]  # abs over range(-4, 0): its own pool ran in the item
        with Client(cluster) as client:
            worker_pids = set(client.run(os.getpid).values())
            # the same job run directly in the (daemonic) dask worker cannot start its pool
            with pytest.raises(AssertionError, match="daemonic processes are not allowed to have children"):
                client.submit(jobs.forks_a_pool, pure=False).result(timeout=30)
        assert {int(r.worker.rsplit(":", 1)[1]) for r in records} == worker_pids  # ran on that cluster's worker
