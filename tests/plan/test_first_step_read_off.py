"""The input batch's first step read off a run of step 2 alone (``first_read_off``).

A plan simulates its input batch's two steps for one figure of step 1, the first
step's peak.  Where the recipe allows (torch's Adam or AdamW, gradients set to
None) and the run shows step 2 leaves nothing behind, that figure is read off a
run of step 2 after the optimizer-state warm-up instead.  The references here
are independent of that reading: the two steps simulated (every figure, the
curve the batch search reads, the pipeline segments), and a real training step
on CPU measured at the allocator (step 1's peak).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from neurarch.build import build_from_config
from neurarch.inputs import InputOptions, InputPlan, TensorSpec, plan_inputs
from neurarch.plan import memory
from neurarch.plan.memory import estimate_with_curve, with_batch
from neurarch.plan.real_step import measure_cpu
from neurarch.plan.simulation import first_step_bytes, first_step_derivable, leaves_nothing, simulate
from neurarch.plan.train import TrainSetup
from tiny_configs import BERT
from tiny_configs import LLAMA as TINY_LLAMA
from tiny_modules import MLP, WideForward, meta_built

LLAMA = dict(TINY_LLAMA, num_hidden_layers=7)  # deep enough to be simulated cut (2 and 3 layers)

READ_OFF = [
    TrainSetup(mode="full", precision="bf16-mixed"),
    TrainSetup(mode="full", precision="fp32", optimizer="adamw-fused"),  # its update allocates nothing
    TrainSetup(mode="full", precision="bf16-mixed", grad_checkpointing=True),
    TrainSetup(mode="lora", precision="fp32"),
    TrainSetup(mode="lora", precision="bf16-mixed", grad_accumulation=2),
    TrainSetup(mode="qlora", precision="bf16"),  # Llama's linear layers have no bias
]
TWO_STEPS = [
    TrainSetup(mode="full", precision="fp32", optimizer="sgd"),  # its step 1 makes the momentum otherwise
    TrainSetup(mode="full", precision="bf16-mixed", zero_grad_set_to_none=False),  # step 2 starts with gradients
]


def _llama(batch: int):
    built = build_from_config(dict(LLAMA), "llama")
    return built, plan_inputs(built.model, built.config, InputOptions(seq_len=24, batch=batch))


def _ids(s: TrainSetup) -> str:
    return f"{s.mode}-{s.precision}-{s.optimizer}-ckpt{int(s.grad_checkpointing)}-acc{s.grad_accumulation}-none{int(s.zero_grad_set_to_none)}"


def _both(setup: TrainSetup, batch: int, cut_depth: bool):
    """The input batch's figures both ways, each on a model of its own (nothing learnt shared)."""
    out = []
    for read_off in (False, True):
        built, plan = _llama(batch)
        before = memory.first_steps_read_off()
        mem, curve = estimate_with_curve(built, with_batch(plan, batch), setup, cut_depth=cut_depth, first_read_off=read_off)
        out.append((mem, curve, memory.first_steps_read_off() - before))
    return out


def _same(a, b) -> None:
    (mem_a, curve_a, _), (mem_b, curve_b, _) = a, b
    assert mem_a == mem_b
    assert curve_a.values == curve_b.values and curve_a.exact == curve_b.exact and curve_a.sharded == curve_b.sharded
    assert getattr(curve_a, "segments", None) == getattr(curve_b, "segments", None)


@pytest.mark.parametrize("cut_depth", [True, False], ids=["cut", "whole"])
@pytest.mark.parametrize("setup", READ_OFF, ids=_ids)
def test_the_first_step_read_off_step_2_is_the_two_simulated_steps(setup, cut_depth):
    two, read = _both(setup, batch=1, cut_depth=cut_depth)
    assert two[2] == 0 and read[2] == 1  # read off in one, simulated in the other
    assert two[0].first_step_peak_tensor_bytes is not None
    _same(two, read)


@pytest.mark.parametrize("setup", READ_OFF[:2], ids=_ids)
def test_an_input_batch_above_one(setup):
    two, read = _both(setup, batch=3, cut_depth=True)
    assert read[2] == 1
    _same(two, read)


@pytest.mark.parametrize("setup", TWO_STEPS, ids=_ids)
def test_other_recipes_simulate_two_steps(setup):
    assert not first_step_derivable(setup)
    two, read = _both(setup, batch=1, cut_depth=True)
    assert read[2] == 0
    _same(two, read)


@pytest.mark.parametrize("cls, batch, phase", [(WideForward, 64, "forward"), (MLP, 8, "optimizer")], ids=["peak-in-forward", "peak-in-optimizer"])
def test_the_first_step_read_off_matches_a_real_cpu_step(cls, batch, phase):
    built = meta_built(cls)
    plan = InputPlan([TensorSpec("x", (batch, 256))], main="x", batch=batch)
    setup = TrainSetup(mode="full", precision="fp32", device="cpu")
    two = simulate(built, plan, setup)
    assert two.first.phase == phase
    steady = simulate(built, plan, setup, steady_only=True)
    got = first_step_bytes(steady)
    assert got == two.first.bytes
    meas = measure_cpu(cls, None, plan, setup)
    # The measured first step at the allocator; the few bytes allowed are the 0-d step
    # counters torch makes outside the dispatcher (as in test_memory.py).
    assert abs(got - meas.step_peaks[0]) <= 64
    # In forward step 1 has no optimizer state yet; in AdamW's step it holds what step 2 does.
    assert got < steady.steady.bytes if phase == "forward" else got == steady.steady.bytes


class _KeepsACache(nn.Module):
    """Makes a tensor in its first forward and keeps it (a cache made once): its step 1 is not its step 2."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(128, 128)
        self.cache: torch.Tensor | None = None

    def forward(self, x):
        if self.cache is None:
            self.cache = torch.ones(4096, device=x.device)
        return self.lin(x) * self.cache[:128]


def test_a_model_that_keeps_something_from_its_first_step_simulates_two():
    plan = InputPlan([TensorSpec("x", (4, 128))], main="x", batch=4)
    setup = TrainSetup(mode="full", precision="fp32")
    steady = simulate(meta_built(_KeepsACache), plan, setup, steady_only=True)
    assert not leaves_nothing(steady.lives)
    # By hand: what the run's only step keeps is the cache, 4096 fp32 = 16,384 bytes.
    assert sum(x.nbytes for x in steady.lives if x.step == 2 and x.end is None) == 4096 * 4
    assert first_step_bytes(steady) is None
    before = memory.first_steps_read_off()
    read, _ = estimate_with_curve(meta_built(_KeepsACache), plan, setup, cut_depth=False, first_read_off=True)
    assert memory.first_steps_read_off() == before
    two, _ = estimate_with_curve(meta_built(_KeepsACache), plan, setup, cut_depth=False)
    assert read == two


class _UnusedParameter(nn.Module):
    """A trainable parameter the forward does not use (DINOv2's mask_token without a mask): no gradient
    reaches it, so AdamW makes no state for it, in step 1 or step 2, while the warm-up makes one."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(128, 128)
        self.unused = nn.Parameter(torch.zeros(384))

    def forward(self, x):
        return self.lin(x)


# By hand: AdamW's state for the linear layer alone, exp_avg and exp_avg_sq of 128 x 128 + 128 fp32
# and a 0-d fp32 step per parameter: 132,104 bytes.  The unused parameter's would be 3,076 more.
_USED_STATE = 2 * (128 * 128 + 128) * 4 + 2 * 4


@pytest.mark.parametrize("batch", [4, 32])
def test_a_parameter_without_a_gradient_has_no_state_and_is_read_off(batch):
    plan = InputPlan([TensorSpec("x", (batch, 128))], main="x", batch=batch)
    setup = TrainSetup(mode="full", precision="fp32", device="cpu")
    steady = simulate(meta_built(_UnusedParameter), plan, setup, steady_only=True)
    two = simulate(meta_built(_UnusedParameter), plan, setup)
    # The steady-state run (a card's check) holds the state a real step 2 holds, not the warm-up's.
    assert steady.steady.breakdown["optimizer"] == two.steady.breakdown["optimizer"] == _USED_STATE
    assert steady.steady.bytes == two.steady.bytes
    meas = measure_cpu(_UnusedParameter, None, plan, setup)
    assert list(meas.without_state) == ["unused"] and meas.without_state["unused"].shape == (384,)  # the real AdamW's view
    assert abs(steady.steady.bytes - meas.step_peaks[1]) <= 64
    # And the input batch's first step is read off it, as for any other model.
    assert first_step_bytes(steady) == two.first.bytes
    assert abs(first_step_bytes(steady) - meas.step_peaks[0]) <= 64
    before = memory.first_steps_read_off()
    read, _ = estimate_with_curve(meta_built(_UnusedParameter), plan, setup, cut_depth=False, first_read_off=True)
    assert memory.first_steps_read_off() == before + 1
    assert read == estimate_with_curve(meta_built(_UnusedParameter), plan, setup, cut_depth=False)[0]


@pytest.mark.parametrize("optimizer", ["sgd", "adamw-8bit", "adafactor"])
def test_other_optimizers_make_no_state_for_an_unused_parameter_either(optimizer):
    # SGD's momentum (0.9), bitsandbytes' 8-bit blocks and Adafactor's factors: each skips a parameter without a
    # gradient, so a card's check holds what two simulated steps hold at step 2.  8-bit AdamW's quantization
    # maps are shared by every parameter's state: kept.
    plan = InputPlan([TensorSpec("x", (4, 128))], main="x", batch=4)
    setup = TrainSetup(mode="full", precision="fp32", optimizer=optimizer)
    steady = simulate(meta_built(_UnusedParameter), plan, setup, steady_only=True)
    two = simulate(meta_built(_UnusedParameter), plan, setup)
    assert steady.steady.breakdown["optimizer"] == two.steady.breakdown["optimizer"] > 0
    assert steady.steady.bytes == two.steady.bytes


_FIRST_8BIT = """
import sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, sys.argv[1])
from tiny_modules import MLP, meta_built
from neurarch.inputs import InputPlan, TensorSpec
from neurarch.plan.simulation import simulate
from neurarch.plan.train import TrainSetup
assert "bitsandbytes" not in sys.modules
plan = InputPlan([TensorSpec("x", (4, 256))], main="x", batch=4)
setup = TrainSetup(mode="full", precision="fp32", optimizer="adamw-8bit")
first = simulate(meta_built(MLP), plan, setup, steady_only=True)
second = simulate(meta_built(MLP), plan, setup, steady_only=True)
two = simulate(meta_built(MLP), plan, setup)
print(first.steady.bytes, second.steady.bytes, two.steady.bytes)
"""


def test_the_first_8bit_simulation_in_a_process_counts_no_import_time_tensors():
    # bitsandbytes makes module constants as it is imported (its 4-bit code tables, 2 x 16 fp32 = 128 bytes);
    # a process's first 8-bit AdamW simulation imports it and once counted them.  A fresh process, where
    # bitsandbytes is not imported yet: the first run equals the second and step 2 of two steps.
    import subprocess
    import sys
    from pathlib import Path

    out = subprocess.run([sys.executable, "-c", _FIRST_8BIT, str(Path(__file__).resolve().parents[1])], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    first, second, two = (int(x) for x in out.stdout.split())
    assert first == second == two


def test_kept_gradients_keep_the_warm_ups_state_for_an_unused_parameter():
    # With the gradients kept (zeroed) between steps, the warm-up's zeroed gradients hide which parameter
    # got none: its state stays, 3,076 bytes more than a real step 2 holds, and no first step is read off.
    plan = InputPlan([TensorSpec("x", (4, 128))], main="x", batch=4)
    setup = TrainSetup(mode="full", precision="fp32", zero_grad_set_to_none=False)
    steady = simulate(meta_built(_UnusedParameter), plan, setup, steady_only=True)
    assert steady.steady.breakdown["optimizer"] == _USED_STATE + 2 * 384 * 4 + 4
    assert first_step_bytes(steady) is None


GPT2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 128, "vocab_size": 500}


@pytest.mark.parametrize("config, model_type", [(BERT, "bert"), (GPT2, "gpt2")], ids=["bert-linear", "gpt2-conv1d"])
def test_qlora_carries_the_biases_its_step_casts_back_to_step_1(config, model_type):
    # bitsandbytes' Linear4bit casts its bias to the dtype it computes in, in place, on its first
    # forward: a real step 1 makes the cast biases and step 2 finds them.  BERT's linear layers have
    # biases, and so have GPT-2's Conv1D layers, which QLoRA quantizes as transformers does.  The
    # steady-state run casts them in its own forward and carries them back to step 1.
    built = build_from_config(dict(config), model_type)
    plan = plan_inputs(built.model, built.config, InputOptions(seq_len=16, batch=2))
    setup = TrainSetup(mode="qlora", precision="bf16-mixed")
    steady = simulate(built, plan, setup, steady_only=True)
    carried = [x for x in steady.lives if x.step == 1 and x.phase == "forward" and x.end is None]
    assert carried and all(x.module.endswith("base_layer") for x in carried)
    assert {id(c.new) for c in steady.carried} == {id(x) for x in carried}
    assert all(c.old.role == "weights" and c.old.nbytes == 2 * c.new.nbytes for c in steady.carried)  # fp32 -> bf16
    assert leaves_nothing(steady.lives) and first_step_bytes(steady) is not None


def _qlora_figures(config: dict, model_type: str, batch: int, *, steady: bool, cut_depth: bool, carry: bool = True):
    from neurarch.plan import simulation

    built = build_from_config(dict(config), model_type)  # a model of its own: nothing learnt shared
    plan = plan_inputs(built.model, built.config, InputOptions(seq_len=16, batch=batch))
    simulation.CARRY_BACK = carry
    try:
        mem, curve = estimate_with_curve(built, plan, TrainSetup(mode="qlora", precision="bf16-mixed"), steady_only=steady, cut_depth=cut_depth)
    finally:
        simulation.CARRY_BACK = True
    return (mem.peak_tensor_bytes, mem.peak_bytes, mem.breakdown, mem.phase), curve


BIASED = [(dict(BERT, num_hidden_layers=6), "bert"), (dict(GPT2, n_layer=6), "gpt2")]


@pytest.mark.parametrize("cut_depth", [True, False], ids=["cut", "whole"])
@pytest.mark.parametrize("config, model_type", BIASED, ids=["bert-linear", "gpt2-conv1d"])
def test_a_qlora_check_is_two_steps_step_2_with_biased_layers(config, model_type, cut_depth):
    # A card's check runs step 2 alone; its forward casts the biases a real step 1 would have cast.
    # Carried back, its figures are step 2's of two simulated steps: the peak, the rounded peak, its
    # breakdown, and every label of the curve the cards are read off.  Before (not carried), the
    # curve had labels of its own (the casts' allocations), so it did not line up with the input
    # batch's step 2, and the fp32 biases counted until their cast.
    two, two_curve = _qlora_figures(config, model_type, 2, steady=False, cut_depth=cut_depth)
    check, check_curve = _qlora_figures(config, model_type, 2, steady=True, cut_depth=cut_depth)
    assert check == two
    assert check_curve.values == two_curve.values and check_curve.exact == two_curve.exact and check_curve.sharded == two_curve.sharded
    _, old_curve = _qlora_figures(config, model_type, 2, steady=True, cut_depth=cut_depth, carry=False)
    assert old_curve.values != two_curve.values


@pytest.mark.parametrize("config, model_type", BIASED, ids=["bert-linear", "gpt2-conv1d"])
def test_a_qlora_check_lines_up_with_the_input_batch(config, model_type):
    # The input batch's two steps (batch 1) and a check at batch 2 make the same labelled ops, so the
    # cards' batches are read off the lines through them: no third batch simulated.
    _, one = _qlora_figures(config, model_type, 1, steady=False, cut_depth=True)
    _, two = _qlora_figures(config, model_type, 2, steady=True, cut_depth=True)
    assert one.values.keys() == two.values.keys()


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("cut_depth", [True, False], ids=["cut", "whole"])
@pytest.mark.parametrize("config, model_type", BIASED, ids=["bert-linear", "gpt2-conv1d"])
def test_qlora_with_biased_layers_reads_the_first_step_off_step_2(config, model_type, cut_depth, batch):
    # The input batch's first step read off the steady-state run as it ran (the casts where it made
    # them), its step 2 with the biases carried back: every figure equals two simulated steps'.
    setup = TrainSetup(mode="qlora", precision="bf16-mixed")
    out = []
    for read_off in (False, True):
        built = build_from_config(dict(config), model_type)
        plan = plan_inputs(built.model, built.config, InputOptions(seq_len=16, batch=batch))
        before = memory.first_steps_read_off()
        mem, curve = estimate_with_curve(built, plan, setup, cut_depth=cut_depth, first_read_off=read_off)
        out.append((mem, curve, memory.first_steps_read_off() - before))
    assert out[0][2] == 0 and out[1][2] == 1
    assert out[0][0].first_step_peak_tensor_bytes is not None
    _same(out[0], out[1])
