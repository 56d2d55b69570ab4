"""A LoRA plan does not import bitsandbytes (peft would, whenever it is installed),
and a QLoRA run after it in the same process gives what QLoRA gives alone; in a
process that only simulates (a plan's worker), bitsandbytes is imported without
torch's compiler, and its kernels, run for real, give what they give otherwise.

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

if sys.argv[3] == "simulation-only":
    from neurarch.plan.train import adapters
    adapters.simulation_only()
built = build_from_config(dict(LLAMA), "test")
plan = plan_inputs(built.model, built.config, InputOptions(batch=2, seq_len=64))
out = {}
for mode in sys.argv[2].split(","):
    sim = simulate(built, plan, TrainSetup(mode=mode, precision="bf16-mixed", lora_rank=8))
    out[mode] = {"peak": sim.peak.bytes, "steady": sim.steady.bytes, "trainable": sim.trainable_parameters,
                 "bnb_imported": "bitsandbytes" in sys.modules,
                 "births": [(x.nbytes, x.start, x.phase, x.module) for x in sim.lives]}
    # bytes freed at each event (storages freed together may be freed in either order)
    freed = {}
    for x in sim.lives:
        if x.end is not None:
            freed[x.end] = freed.get(x.end, 0) + x.nbytes
    out[mode]["freed"] = sorted(freed.items())
out["compiler_imported"] = "torch._inductor.compile_fx" in sys.modules
if "qlora" in out:  # bitsandbytes' NF4 kernels on real tensors, after the simulations
    import hashlib, torch
    import bitsandbytes.functional as F
    w = torch.linspace(-1, 1, 64 * 128).reshape(64, 128)
    packed, state = F.quantize_4bit(w, blocksize=64, quant_type="nf4")
    back = F.dequantize_4bit(packed, state)
    out["kernels"] = hashlib.sha256(packed.numpy().tobytes() + back.numpy().tobytes()).hexdigest()
print(json.dumps(out))
"""


def _run(modes: str, process: str = "plain") -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, str(TESTS), modes, process], capture_output=True, text=True, timeout=600)
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


def test_a_simulation_only_process_imports_no_compiler_and_gives_the_same_qlora_and_kernels():
    plain = _run("qlora")
    lazy = _run("qlora", "simulation-only")
    assert plain["compiler_imported"] is True  # bitsandbytes' import compiles its CPU kernels: the reference
    assert lazy["compiler_imported"] is False
    assert lazy["qlora"] == plain["qlora"]  # the same storages born, the same bytes freed, at the same events
    assert lazy["kernels"] == plain["kernels"]  # NF4 quantized and back, on real tensors: the same bytes
