"""Recipes of torch 1.x and the transformers Trainer of 2022: gradients kept
between steps (``zero_grad(set_to_none=False)``) and reentrant gradient
checkpointing (``use_reentrant=True``), against real CPU steps and hand counts.

The configs are tiny so the real steps take well under a second.
"""

import pytest
import torch

from neurarch.build import build_from_config
from neurarch.errors import InputError
from neurarch.inputs import InputOptions, InputPlan, TensorSpec, plan_inputs
from neurarch.options import PlanOptions
from neurarch.plan.memory import simulate
from neurarch.plan.real_step import measure_cpu
from neurarch.plan.train import PlanOptionError, TrainSetup, prepare
from tiny_configs import LLAMA
from tiny_modules import WideForward, meta_built


def _wide():
    return meta_built(WideForward), InputPlan([TensorSpec("x", (64, 256))], main="x", batch=64)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_kept_gradients_add_their_bytes_to_a_forward_peak(optimizer):
    built, plan = _wide()
    freed = simulate(built, plan, TrainSetup(mode="full", precision="fp32", optimizer=optimizer, device="cpu"))
    kept = simulate(built, plan, TrainSetup(mode="full", precision="fp32", optimizer=optimizer, device="cpu", zero_grad_set_to_none=False))
    assert freed.steady.phase == kept.steady.phase == "forward"
    # By hand: the trainable weights are 256*256 + 256 = 65,792 fp32, 263,168 bytes of gradients,
    # alive through step 2's forward when zero_grad keeps them.
    grads = 4 * (256 * 256 + 256)
    assert kept.steady.bytes - freed.steady.bytes == grads
    assert kept.steady.breakdown["gradients"] == grads and freed.steady.breakdown["gradients"] == 0
    # Step 1 has no gradients yet in its forward either way.
    assert kept.step_peaks[0].bytes == freed.step_peaks[0].bytes
    # The batch search's shortcut (a warm-up in place of step 1) leaves the same state.
    assert simulate(built, plan, kept.setup, steady_only=True).steady.bytes == kept.steady.bytes


def test_kept_gradients_match_a_real_cpu_step():
    built, plan = _wide()
    setup = TrainSetup(mode="full", precision="fp32", optimizer="adamw", device="cpu", zero_grad_set_to_none=False)
    sim = simulate(built, plan, setup)
    meas = measure_cpu(WideForward, None, plan, setup)
    assert abs(sim.steady.bytes - meas.step_peaks[1]) <= 64


def _llama(batch=2, seq=64):
    built = build_from_config(dict(LLAMA), "test")
    return built, plan_inputs(built.model, built.config, InputOptions(batch=batch, seq_len=seq))


def _real(built):
    def make():
        with torch.device("cpu"):
            return type(built.model)(built.config)

    return make


@pytest.mark.parametrize("mode,precision", [("full", "fp32"), ("lora", "fp32"), ("full", "bf16-mixed")])
def test_kept_gradients_on_a_transformer_match_a_real_cpu_step(mode, precision):
    built, plan = _llama()
    freed = simulate(built, plan, TrainSetup(mode=mode, precision=precision, device="cpu"))
    setup = TrainSetup(mode=mode, precision=precision, device="cpu", zero_grad_set_to_none=False)
    sim = simulate(built, plan, setup)
    meas = measure_cpu(_real(built), built.config, plan, setup, onednn=False)
    # The second step's peak, the allocator's own count; 512 B: the measurement's CPU-only odds and ends.
    assert abs(sim.steady.bytes - meas.step_peaks[1]) <= 512
    # The kept gradients cost at most one fp32 copy of the trained weights.
    assert 0 < sim.steady.bytes - freed.steady.bytes <= 4 * sim.trainable_parameters


@pytest.mark.parametrize("mode", ["full", "lora"])
def test_reentrant_checkpointing_matches_a_real_cpu_step(mode):
    built, plan = _llama()
    setup = TrainSetup(mode=mode, precision="bf16-mixed", grad_checkpointing=True, grad_checkpointing_reentrant=True, device="cpu")
    with torch.device("meta"):
        model = prepare(type(built.model)(built.config), setup)
    funcs = {getattr(m, "_gradient_checkpointing_func", None) for m in model.modules() if getattr(m, "gradient_checkpointing", False)}
    assert funcs and all(f.keywords == {"use_reentrant": True} for f in funcs)
    sim = simulate(built, plan, setup)
    meas = measure_cpu(_real(built), built.config, plan, setup, onednn=False)
    # As for non-reentrant checkpointing (test_recipes.py): torch.utils.checkpoint stashes the CPU
    # RNG state, 5,056 bytes per checkpointed layer (2 here), host memory a CUDA card does not hold.
    assert 0 <= meas.step_peaks[1] - sim.steady.bytes <= 2 * 5056 + 512
    # Fewer activations than without checkpointing.
    assert sim.steady.bytes < simulate(built, plan, TrainSetup(mode=mode, precision="bf16-mixed", device="cpu")).steady.bytes


@pytest.mark.parametrize("mode", ["full", "lora", "qlora"])
def test_reentrant_checkpointing_simulates_with_cuda_kernels(mode):
    built, plan = _llama()
    on = simulate(built, plan, TrainSetup(mode=mode, grad_checkpointing=True, grad_checkpointing_reentrant=True))
    off = simulate(built, plan, TrainSetup(mode=mode))
    assert on.trainable_parameters == off.trainable_parameters
    assert on.steady.bytes < off.steady.bytes


def test_reentrant_needs_checkpointing():
    with pytest.raises(InputError, match="--grad-checkpointing-reentrant needs --grad-checkpointing") as e:
        PlanOptions(grad_checkpointing_reentrant=True)
    assert e.value.field == "grad_checkpointing_reentrant"
    with pytest.raises(PlanOptionError, match="--grad-checkpointing-reentrant needs --grad-checkpointing"):
        TrainSetup(grad_checkpointing_reentrant=True).validate()
    with pytest.raises(InputError, match="--zero-grad-set-to-none must be true or false"):
        PlanOptions(zero_grad_set_to_none="no")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "setup,message",
    [
        (TrainSetup(lora_rank=0), "--lora-rank must be an integer from 1 to 4096, got 0"),
        (TrainSetup(grad_accumulation=0), "--grad-accumulation must be an integer from 1 to 65,536, got 0"),
        (TrainSetup(optimizer="lion"), "unknown --optimizer 'lion'"),
        (TrainSetup(mode="full", precision="fp32", attn_implementation="flash_attention_2"), "flash_attention_2 runs in fp16/bf16 only"),
    ],
)
def test_the_setup_is_checked_by_plan_options_with_its_messages(setup, message):
    # One check: TrainSetup.validate says what PlanOptions says to a CLI or API user.
    with pytest.raises(PlanOptionError) as e:
        setup.validate()
    assert str(e.value).startswith(message)
    assert "\n" not in str(e.value)
