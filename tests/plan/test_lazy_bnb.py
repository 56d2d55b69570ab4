"""A LoRA plan does not import bitsandbytes (peft would, whenever it is installed),
and a QLoRA run after it in the same process gives what QLoRA gives alone.

Each case runs in a fresh interpreter: the import order is what is tested."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("peft")
pytest.importorskip("bitsandbytes")

TESTS = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from tiny_configs import LLAMA
from neurarch.build import build_from_config
from neurarch.inputs import InputOptions, plan_inputs
from neurarch.plan.memory import simulate
from neurarch.plan.train import TrainSetup

built = build_from_config(dict(LLAMA), "test")
plan = plan_inputs(built.model, built.config, InputOptions(batch=2, seq_len=64))
out = {}
for mode in sys.argv[2].split(","):
    sim = simulate(built, plan, TrainSetup(mode=mode, precision="bf16-mixed", lora_rank=8))
    out[mode] = {"peak": sim.peak.bytes, "steady": sim.steady.bytes, "trainable": sim.trainable_parameters,
                 "bnb_imported": "bitsandbytes" in sys.modules}
print(json.dumps(out))
"""


def _run(modes: str) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, str(TESTS), modes], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_lora_alone_leaves_bitsandbytes_unimported_and_qlora_after_it_is_unchanged():
    both = _run("lora,qlora")
    alone = _run("qlora")
    assert both["lora"]["bnb_imported"] is False
    # By hand: rank 8 adapters on every linear layer of the 2 decoder layers (the head excluded):
    # q 64->64, k and v 64->32, o 64->64, gate and up 64->128, down 128->64; r x (in + out) each.
    per_layer = 8 * ((64 + 64) + 2 * (64 + 32) + (64 + 64) + 2 * (64 + 128) + (128 + 64))
    assert both["lora"]["trainable"] == 2 * per_layer
    assert both["qlora"]["bnb_imported"] is True
    assert both["qlora"] == alone["qlora"]
