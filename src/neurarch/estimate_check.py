"""``neurarch-trace measure``: a real training step beside the estimate.

Builds the model with random weights on this machine, runs real training
steps, and puts the measured peak next to the simulated one with the error
in percent.  The simulation is run with the measured device's kernel
semantics (``cpu`` or ``cuda``), so the two compare like with like: on CPU,
attention with dropout takes the math kernel and dropout keeps a float mask,
and the optimizer is the single-tensor loop; on CUDA, the fused kernels, a
bool mask and the multi-tensor (foreach) AdamW.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from typing import Optional

from pydantic import BaseModel, Field

from .errors import InputError
from .inputs.prepare import prepare
from .options import InputOptions, Options, PlanOptions


class MeasureResult(BaseModel):
    model_config = {"extra": "forbid"}

    model: str
    mode: str
    precision: str
    optimizer: str
    device: str
    input_shape: list[int]
    steps: int
    estimated_peak_tensor_bytes: int = Field(description="Simulated steady-state peak of live tensor bytes, with this device's kernel semantics.")
    estimated_first_step_bytes: int
    measured_peak_bytes: int = Field(description="Allocator peak of the last step (CPU: profiler memory events; CUDA: max_memory_allocated).")
    measured_first_step_bytes: int
    error_pct: float = Field(description="100 x (estimated - measured) / measured, last step.")
    measured_phase: Optional[str] = None
    estimated_phase: str
    method: str


@contextlib.contextmanager
def _quiet_stderr():
    """The profiler's C++ side prints start/stop lines straight to fd 2; keep the terminal to our output."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _ram_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 * 2**30


def run(
    spec: str,
    *,
    inputs: InputOptions,
    mode: str = "full",
    precision: str = "bf16-mixed",
    optimizer: str = "adamw",
    lora_rank: int = 16,
    grad_checkpointing: bool = False,
    grad_checkpointing_reentrant: bool = False,
    zero_grad_set_to_none: bool = True,
    device: str = "cpu",
    steps: int = 2,
    trust_remote_code: bool = False,
    lora_targets: tuple[str, ...] | None = None,
    lora_dropout: float = 0.0,
    adapter_dtype: str | None = None,
    attn_implementation: str | None = None,
    task: str | None = None,
    num_labels: int = 2,
    grad_accumulation: int = 1,
) -> MeasureResult:
    from .plan.memory import simulate
    from .plan.real_step import measure_model
    from .plan.train import TrainSetup

    if mode == "inference":
        raise InputError("measure runs training steps: --mode full, lora or qlora")
    if not 1 <= steps <= 20:
        raise InputError(f"--steps must be between 1 and 20, got {steps}")
    if attn_implementation == "flash_attention_2":
        raise InputError("measure runs the real model: flash_attention_2 needs the flash-attn package on a CUDA card; measure sdpa or eager, or plan flash_attention_2 with --plan")
    recipe = PlanOptions(
        modes=(mode,),
        optimizer=optimizer,
        lora_rank=lora_rank,
        grad_checkpointing=grad_checkpointing,
        grad_checkpointing_reentrant=grad_checkpointing_reentrant,
        zero_grad_set_to_none=zero_grad_set_to_none,
        grad_accumulation=grad_accumulation,
        attn_implementation=attn_implementation,
        lora_targets=lora_targets,
        lora_dropout=lora_dropout,
        adapter_dtype=adapter_dtype,
        task=task,
        num_labels=num_labels,
    )
    prepared = prepare(spec, Options(inputs=inputs, trust_remote_code=trust_remote_code, precision=precision, plan=recipe, verify=False))
    source, built, plan = prepared.source, prepared.trained, prepared.plan
    setup = TrainSetup.from_plan(recipe, mode=mode, precision=precision, device=device)
    setup.validate()
    sim = simulate(built, plan, setup, steps=max(steps, 2))
    # Refuse a real run that cannot fit this machine.
    if device == "cpu" and sim.steady.bytes > 0.8 * _ram_bytes():
        raise InputError(
            f"a real step needs about {sim.steady.bytes / 2**30:.1f} GiB, more than this machine's memory allows "
            f"({_ram_bytes() / 2**30:.1f} GiB); measure a smaller configuration (--seq-len, --batch, fewer layers)"
        )

    with warnings.catch_warnings(), _quiet_stderr() if device == "cpu" else contextlib.nullcontext():
        warnings.simplefilter("ignore")
        m = measure_model(built, plan, setup, device=device, source=source, steps=steps)
    if device == "cuda":
        method = "torch.cuda.max_memory_allocated per step (allocator-rounded tensor bytes; the CUDA context is not counted)"
    else:
        method = "torch.profiler memory events: running sum of CPU allocations and frees, peak per step (1 thread)"
    measured = m.step_peaks[-1]
    return MeasureResult(
        model=source.id,
        mode=mode,
        precision=precision,
        optimizer=optimizer,
        device=device,
        input_shape=list(plan.main_shape),
        steps=steps,
        estimated_peak_tensor_bytes=sim.steady.bytes,
        estimated_first_step_bytes=sim.first.bytes,
        measured_peak_bytes=measured,
        measured_first_step_bytes=m.step_peaks[0],
        error_pct=round(100.0 * (sim.steady.bytes - measured) / measured, 3) if measured else 0.0,
        measured_phase=m.phase,
        estimated_phase=f"{sim.steady.phase}" + (f" ({sim.steady.module})" if sim.steady.module else ""),
        method=method,
    )


def render_text(r: MeasureResult) -> str:
    g = 2**30
    return "\n".join(
        [
            f"{r.model}: {r.mode} fine-tune, {r.precision}, {r.optimizer}, input {r.input_shape}, {r.steps} real steps on {r.device}",
            f"  estimated peak (tensors): {r.estimated_peak_tensor_bytes / g:.3f} GiB  [{r.estimated_phase}]",
            f"  measured peak:            {r.measured_peak_bytes / g:.3f} GiB  [{r.measured_phase or '?'}]",
            f"  error:                    {r.error_pct:+.2f} %",
            f"  first step: estimated {r.estimated_first_step_bytes / g:.3f} GiB, measured {r.measured_first_step_bytes / g:.3f} GiB",
            f"  measured with {r.method}; the estimate used {r.device} kernel semantics.",
        ]
    )
