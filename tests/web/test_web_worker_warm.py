"""A warm worker imports, before any plan, what the plan's forked mode jobs
would otherwise import again for every plan (peft, bitsandbytes, the cost's
op count, transformers' modeling base), and the figures do not move: the
app's LoRA and QLoRA plan of a tiny Llama equals the CLI's for the same
config, apart from the ``seconds`` fields and the paste's name."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from web_fixtures import no_seconds

from neurarch.web.pool import Pool

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: tiny_configs
from tiny_configs import LLAMA  # noqa: E402

PRE_IMPORTED = ("peft", "bitsandbytes", "bitsandbytes.functional", "transformers.modeling_utils", "neurarch.cost.estimate", "neurarch.plan.curve", "neurarch.plan.fit")


def _ask_worker(names: list[str]) -> dict:
    """A fresh pool's worker, warm, answers which of ``names`` it holds (``test:modules``)."""

    async def scenario():
        pool = Pool(1, time_limit_s=60.0, queue_size=2, test_jobs=True)
        await pool.start()
        try:
            answer = await pool.submit({"kind": "test:modules", "names": names, "timeout_s": 60})
        finally:
            await pool.close()
        return json.loads(answer[1])

    return asyncio.run(scenario())


def test_a_worker_has_imported_what_the_mode_jobs_need_before_any_plan():
    want = [m for m in PRE_IMPORTED if importlib.util.find_spec(m.split(".")[0]) is not None]
    assert "peft" in want and "bitsandbytes" in want  # both are dependencies of neurarch (pyproject)

    seen = _ask_worker(want + ["neurarch.web.app"])
    assert seen == {**{m: True for m in want}, "neurarch.web.app": False}  # a control: the worker never imports the app


def test_a_worker_has_built_transformers_renaming_table_before_any_plan():
    """peft reads transformers' checkpoint renaming table when it injects adapters; the table is built on
    first use, so a worker builds it once, before the fork, for every LoRA/QLoRA child."""
    table = "transformers.conversion_mapping:_checkpoint_conversion_mapping_cache"

    assert _ask_worker([table, "json:no_such_attribute"]) == {table: True, "json:no_such_attribute": False}  # the second: a control


def test_lora_and_qlora_figures_equal_the_clis(web_client, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA))
    out = tmp_path / "cli.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "neurarch.cli", str(cfg), "--plan", "--modes", "lora,qlora", "--format", "json", "-o", str(out)],
        env=dict(os.environ, NO_COLOR="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        r = web_client.post("/api/v1/plan", json={"config": LLAMA, "options": {"modes": ["lora", "qlora"]}})
        _, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert r.status_code == 200, r.text[:500]
    web, cli = r.json(), json.loads(out.read_text())
    assert web["memory"]["lora"] and web["memory"]["qlora"] and not web["errors"]
    for rep in (web, cli):  # the paste is named, the CLI's report names its file
        rep["model"].pop("id")
        rep["model"].pop("provenance")
    assert no_seconds(web) == no_seconds(cli)


def test_a_broken_optional_import_does_not_stop_a_worker(tmp_path):
    """A bitsandbytes whose import raises (a broken install) fails the plans' modes that import it, as
    before the worker imported it at start-up; the worker itself still starts."""
    broken = tmp_path / "bitsandbytes"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise RuntimeError('a broken native library')\n")

    async def scenario():
        pool = Pool(1, time_limit_s=60.0, queue_size=2, test_jobs=True)
        sys.path.insert(0, str(tmp_path))  # a spawned worker starts with its parent's sys.path
        try:
            await pool.start()
        finally:
            sys.path.remove(str(tmp_path))
        try:
            answer = await pool.submit({"kind": "test:modules", "names": ["bitsandbytes", "peft", "transformers.modeling_utils"], "timeout_s": 60})
        finally:
            await pool.close()
        return json.loads(answer[1])

    # Whether peft imports beside a broken bitsandbytes depends on peft's version (0.21 imported bitsandbytes in
    # peft.helpers and failed with it; 0.22 does not): the worker must hold peft exactly where a plain
    # `import peft` with the same path succeeds, asked of a fresh interpreter.
    plain = subprocess.run([sys.executable, "-c", "import peft"], env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True, timeout=120)
    # The worker started and answers, with the rest of its start-up done.
    assert asyncio.run(scenario()) == {"bitsandbytes": False, "peft": plain.returncode == 0, "transformers.modeling_utils": True}
