"""LoRA and QLoRA runs copy a model prepared once (neurarch.plan.simulation.prepared_copy).

The reference is the old way: every run prepares its own copy (peft's injection,
bitsandbytes' layers).  A plan's figures, cut short and simulated whole, at several
batches, are the same both ways; the kept model is never run (its weights stay on
meta, no gradient); two runs' copies share no module and no tensor; and a model cut
to another depth gets a prepared model of its own.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch._subclasses import fake_tensor as ft

from neurarch.build import build_from_config
from neurarch.fake.convert import meta_copy
from neurarch.inputs import InputOptions, plan_inputs
from neurarch.plan import depth, simulation
from neurarch.plan.memory import estimate_with_curve, with_batch
from neurarch.plan.train import TrainSetup, prepare
from tiny_configs import BERT, LLAMA

SETUPS = [TrainSetup(mode="lora", precision="bf16-mixed"), TrainSetup(mode="qlora", precision="bf16"), TrainSetup(mode="lora", precision="fp32", grad_checkpointing=True)]


def _fresh(model: nn.Module, setup: TrainSetup) -> nn.Module:
    return prepare(meta_copy(model), setup)  # what every run did before


@pytest.mark.parametrize("cfg,name,layers", [(LLAMA, "llama", 6), (BERT, "bert", 2)], ids=["llama-cut", "bert-whole"])
@pytest.mark.parametrize("setup", SETUPS, ids=["lora", "qlora", "lora-checkpointing"])
def test_a_plans_figures_are_those_of_a_fresh_preparation_each_run(cfg, name, layers, setup, monkeypatch):
    def figures():
        built = build_from_config(dict(cfg, num_hidden_layers=layers), name)
        plan = plan_inputs(built.model, built.config, InputOptions(seq_len=16, batch=1))
        return [estimate_with_curve(built, with_batch(plan, b), setup, steady_only=b != 1, cache=False) for b in (1, 2, 3, 9)]

    ft.FakeTensorMode.cache_clear()
    kept = figures()
    ft.FakeTensorMode.cache_clear()
    monkeypatch.setattr(simulation, "prepared_copy", _fresh)
    fresh = figures()
    assert kept == fresh


def test_the_kept_model_is_never_run_and_copies_share_nothing():
    built = build_from_config(dict(LLAMA, num_hidden_layers=6), "llama")
    setup = SETUPS[0]
    plan = plan_inputs(built.model, built.config, InputOptions(seq_len=16, batch=1))
    estimate_with_curve(built, with_batch(plan, 2), setup, steady_only=True, cache=False)
    books = simulation._PREPARED[built.model]
    assert len(books) == 2  # the two cut runs: 2 and 3 repeats of the stack
    for kept in books.values():
        assert all(p.device.type == "meta" and not isinstance(p, ft.FakeTensor) and p.grad is None for p in kept.parameters())
    a, b = simulation.prepared_copy(built.model, setup), simulation.prepared_copy(built.model, setup)
    assert not {id(m) for m in a.modules()} & {id(m) for m in b.modules()}
    assert not {id(p) for p in a.parameters()} & {id(p) for p in b.parameters()}
    assert [n for n, _ in a.named_parameters()] == [n for n, _ in _fresh(built.model, setup).named_parameters()]
    assert [p.requires_grad for p in a.parameters()] == [p.requires_grad for p in _fresh(built.model, setup).parameters()]


def test_a_model_cut_to_another_depth_is_prepared_again():
    built = build_from_config(dict(LLAMA, num_hidden_layers=6), "llama")
    setup = SETUPS[0]
    stacks = depth.stacks_of(built.model)
    sizes = {}
    for units in (2, 3, 2):
        with depth.cut(built.model, stacks, units) as short:
            copy = simulation.prepared_copy(short, setup)
            sizes.setdefault(units, set()).add(sum(1 for n, _ in copy.named_modules() if n.endswith("lora_A")))
    assert sizes[2] != sizes[3] and len(sizes[2]) == 1  # more adapted layers at 3 repeats; the same at 2 both times
    assert len(simulation._PREPARED[built.model]) == 2
    whole = simulation.prepared_copy(built.model, setup)
    assert sum(1 for n, _ in whole.named_modules() if n.endswith("lora_A")) == sum(1 for n, _ in _fresh(built.model, setup).named_modules() if n.endswith("lora_A"))
    assert torch.is_grad_enabled()
