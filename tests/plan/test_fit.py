"""Multi-GPU arithmetic of the planner against hand computations."""

from neurarch.cards import Card
from neurarch.plan.fit import fsdp_plans
from neurarch.plan.memory import Curve

G = 10**9


def _card(name, gb):
    return Card(name, gb, None, None, None, True, None, None)


def test_fsdp_cards_and_batch_by_hand():
    # Two ops: an optimizer-phase op holding 30 GB (28 of it state FSDP shards)
    # that does not grow with the batch, and a backward op holding 20 GB (16
    # sharded) growing 2 GB per sample.  Largest layer 0.5 GB -> 1 GB gathered.
    c1 = Curve(1, {"opt": 30 * G, "bwd": 20 * G}, {"opt": 28 * G, "bwd": 16 * G})
    c2 = Curve(2, {"opt": 30 * G, "bwd": 22 * G}, {"opt": 28 * G, "bwd": 16 * G})
    # N = 3: max(30 - 28*2/3, 20 - 16*2/3) + 1 = 12.33 GB;  N = 4: max(9, 8) + 1 = 10 GB.
    (p10,) = fsdp_plans([_card("C10", 10)], "full", c1, c2, G // 2, headroom=1.0)
    assert p10.gpus == 4 and p10.per_gpu_bytes == 10 * G
    # At N = 4 the backward op leaves 10 - 1 - 8 = 1 GB: less than one more sample (2 GB).
    assert p10.max_batch_per_gpu == 1
    (p11,) = fsdp_plans([_card("C11", 11)], "full", c1, c2, G // 2, headroom=1.0)
    assert p11.gpus == 4 and p11.max_batch_per_gpu == 2  # 11 - 1 - 8 = 2 GB: one more sample
    # A card that holds batch 1 alone gets no plan.
    assert fsdp_plans([_card("Big", 40)], "full", c1, c2, G // 2, headroom=1.0) == []
    # One that no number of cards helps gets gpus 0 and what stays whole per card:
    # max(30 - 28, 20 - 16) + 1 = 5 GB (the backward op's unsharded 4 GB plus the gathered layers).
    (tiny,) = fsdp_plans([_card("Tiny", 3)], "full", c1, c2, G // 2, headroom=1.0)
    assert (tiny.gpus, tiny.per_gpu_bytes, tiny.max_batch_per_gpu) == (0, 5 * G, 0)
    # Just above that floor: 4 + 16/N + 1 <= 5.1 GB from N = 160 cards.
    (p51,) = fsdp_plans([_card("C5.1", 5.1)], "full", c1, c2, G // 2, headroom=1.0)
    assert p51.gpus == 160
    # Headroom divides the card: 11.5 GB / 1.15 = 10 GB -> as the 10 GB card.
    (ph,) = fsdp_plans([_card("C11.5", 11.5)], "full", c1, c2, G // 2, headroom=1.15)
    assert ph.gpus == 4 and ph.max_batch_per_gpu == 1


def test_pipeline_plan_by_hand():
    from neurarch.plan.fit import pipeline_plans

    # Segments 4, 3, 3, 6 GB: cuts give 4|12, 7|9, 10|6, so the best is after
    # "b".  Each card adds 1 GB (scratch + CUDA overhead): 8 and 10 GB.
    segs = [("a", 4 * G), ("b", 3 * G), ("c", 3 * G), ("d", 6 * G)]
    (p,) = pipeline_plans([_card("C12", 12)], "full", segs, G, full_peak=17 * G, headroom=1.0)
    assert (p.strategy, p.gpus, p.cut_after, p.stage_bytes, p.per_gpu_bytes) == ("pipeline", 2, "b", [8 * G, 10 * G], 10 * G)
    assert pipeline_plans([_card("C9", 9)], "full", segs, G, full_peak=17 * G, headroom=1.0) == []  # 10 GB > 9
    assert pipeline_plans([_card("C20", 20)], "full", segs, G, full_peak=17 * G, headroom=1.0) == []  # fits alone


def test_pipeline_segments_of_a_deep_model_cover_every_layer():
    # The cut simulation's per-layer split must still name every layer of the
    # full model once, in order, and its parameter share must add up to the
    # simulated weights + gradients + optimizer state (+ optimizer scratch).
    from neurarch.build import build_from_config
    from neurarch.inputs import InputOptions, plan_inputs
    from neurarch.plan.memory import estimate_with_curve
    from neurarch.plan.train import TrainSetup
    from tiny_configs import LLAMA

    cfg = dict(LLAMA, num_hidden_layers=7)  # the shared tiny Llama with a 7-layer stack
    built = build_from_config(cfg, "llama")
    plan = plan_inputs(built.model, built.config, InputOptions(seq_len=24, batch=1))
    m_cut, c_cut = estimate_with_curve(built, plan, TrainSetup(mode="full"))
    m_whole, c_whole = estimate_with_curve(built, plan, TrainSetup(mode="full"), cut_depth=False)
    names = [n for n, _ in c_cut.segments]
    layers = [n for n in names if n.startswith("model.layers.")]
    assert layers == [f"model.layers.{i}" for i in range(7)]
    assert names[0] == "model.embed_tokens" and names.index("lm_head") > names.index("model.layers.6")
    # The whole simulation's split is the reference: the same segments and bytes.
    assert c_cut.segments == c_whole.segments


def test_older_cards_need_the_smaller_cublas_workspace():
    from neurarch.cards import builtin_cards
    from neurarch.plan.fit import workspace_saving

    cards = {c.name: c for c in builtin_cards()}
    # CublasHandlePool.cpp: 32 MiB on Hopper, 4096 KiB x 2 + 16 KiB x 8 elsewhere; two handles in training.
    per = 32 * 2**20 - (2 * 4096 * 2**10 + 8 * 16 * 2**10)
    assert workspace_saving(cards["T4"], "full") == 2 * per
    assert workspace_saving(cards["A100-80GB"], "inference") == per
    assert workspace_saving(cards["H200-141GB"], "full") == 0


def test_jobs_run_in_workers_and_a_dead_worker_is_an_error_not_a_hang():
    import os

    from neurarch.jobs import run_jobs

    out = run_jobs({"pid": os.getpid, "square": lambda: 7 * 7, "boom": lambda: 1 / 0}, workers=2)
    assert out["square"] == (True, 49)
    assert out["boom"][0] is False and out["boom"][1][0] == "ZeroDivisionError"
    assert out["pid"][0] is True and out["pid"][1] != os.getpid()  # it ran in a worker process
    # A worker that dies breaks the pool: its job (and any still pending) is an error, and the call returns.
    dead = run_jobs({"die": lambda: os._exit(3), "other": lambda: 1}, workers=2)
    assert dead["die"] == (False, ("WorkerCrash", "the worker process simulating this died (out of memory?)"))
    assert run_jobs({"pid": os.getpid}, workers=1) == {"pid": (True, os.getpid())}  # one worker: in process


def test_neurarch_jobs_1_runs_in_process(monkeypatch):
    import os

    from neurarch.jobs import run_jobs

    monkeypatch.setenv("NEURARCH_JOBS", "1")
    assert run_jobs({"a": os.getpid, "b": os.getpid}) == {"a": (True, os.getpid()), "b": (True, os.getpid())}


def test_started_jobs_overlap_the_parent_and_close_kills_what_still_runs(tmp_path):
    import os
    import time

    from neurarch.jobs import Jobs

    # The jobs run while the parent works on: a job waits for a file the parent writes after starting them.
    flag = tmp_path / "parent-was-here"

    def wait_for_parent():
        for _ in range(500):
            if flag.exists():
                return os.getpid()
            time.sleep(0.01)
        return None

    jobs = Jobs({"wait": wait_for_parent, "pid": os.getpid}, workers=2)
    flag.write_text("1")
    out = jobs.results()
    jobs.close()
    assert out["wait"][0] is True and out["wait"][1] not in (None, os.getpid())

    # A trace that fails or times out closes the jobs: a worker still running is killed, close() returns at once.
    marker = tmp_path / "still-running"

    def slow():
        time.sleep(30)
        marker.write_text("finished")

    jobs = Jobs({"slow": slow, "other": lambda: 1}, workers=2)
    pids = [p.pid for p in jobs.pool._processes.values()]
    t0 = time.perf_counter()
    jobs.close()
    assert time.perf_counter() - t0 < 5
    time.sleep(0.2)
    for pid in pids:
        try:
            os.kill(pid, 0)
            alive = open(f"/proc/{pid}/stat").read().split()[2] != "Z"
        except (ProcessLookupError, FileNotFoundError):
            alive = False
        assert not alive
    assert not marker.exists()


def test_jobs_start_in_the_order_asked_and_come_back_in_their_own(tmp_path):
    import time

    from neurarch.jobs import Jobs

    log = tmp_path / "started"

    def job(name, wait):
        def run():
            with open(log, "a") as f:  # one line per job, written as it starts
                f.write(name + "\n")
            time.sleep(wait)
            return name

        return run

    # Two workers: the first two started run at once, the third only when one of them is done.
    jobs = Jobs({"a": job("a", 0), "b": job("b", 0.5), "c": job("c", 0.5)}, workers=2, start=["c", "b", "a"])
    out = jobs.results()
    jobs.close()
    assert list(out) == ["a", "b", "c"] and [v for _, v in out.values()] == ["a", "b", "c"]
    started = log.read_text().split()
    assert sorted(started[:2]) == ["b", "c"] and started[2] == "a"
    # one after another (one worker): the dict's order, the results the same
    log.unlink()
    out = Jobs({"a": job("a", 0), "b": job("b", 0), "c": job("c", 0)}, workers=1, start=["c", "b", "a"]).results()
    assert list(out) == ["a", "b", "c"] and log.read_text().split() == ["a", "b", "c"]
    # a start order that leaves a job out, or names one twice, is refused before anything starts
    import pytest

    for bad in (["a", "b"], ["a", "b", "b"], ["a", "b", "d"]):
        with pytest.raises(ValueError, match="start must name every job once"):
            Jobs({"a": job("a", 0), "b": job("b", 0), "c": job("c", 0)}, workers=1, start=bad)
