"""bitsandbytes' ops answered from neurarch.fake.custom's entries equal FakeTensorMode's own answers.

FakeTensorMode never caches an op outside torch's namespaces; neurarch.fake.custom
keeps entries for six of bitsandbytes' ops.  The reference is FakeTensorMode's own
answer to the same call at the same moment (the op run through the dispatcher, its
fake kernel on its whole path, with no entry of neurarch's in it): every answer made
from an entry during real QLoRA simulations (a Llama, whose linears have no bias,
and a BERT, whose linears have one) at batches 1, 2 and 5 is compared with it:
type, shape, strides, storage offset, dtype, the storage's size and whether it is
an argument's, the dispatch keys and FakeTensor's attributes.  End to end, a QLoRA
plan's figures with the entries equal those without.
"""

from __future__ import annotations

import pytest
import torch
from test_hits import _described, _same_output
from torch._subclasses import fake_tensor as ft

from neurarch.build import build_from_config
from neurarch.fake import custom
from neurarch.inputs import InputOptions, plan_inputs
from neurarch.plan.memory import estimate_with_curve, with_batch
from neurarch.plan.train import TrainSetup
from plan_figures import with_and_without
from tiny_configs import BERT, LLAMA

pytest.importorskip("bitsandbytes")

ANSWERED = custom.answered


class _Compare:
    """Stands in for :func:`custom.answered`: where it answers from an entry, the op is run
    through the dispatcher too (FakeTensorMode's handler) and the two outputs compared; the
    simulation goes on with neurarch's."""

    def __init__(self):
        self.calls = self.from_entries = self.differ = 0
        self.ops: set = set()
        self.first_difference = None

    def function(self):
        def answered(mode, state, key, func, args, kwargs):
            self.calls += 1
            entry = custom._ENTRIES.get(key)
            mine = ANSWERED(mode, state, key, func, args, kwargs)
            if entry is None or entry is custom._NOT_CACHED:
                return mine
            self.from_entries += 1
            self.ops.add(str(func))
            theirs = func(*args, **kwargs)
            if not _same_output(mine, theirs, args):
                self.differ += 1
                self.first_difference = self.first_difference or (func, _described(mine), _described(theirs))
            return mine

        return answered


@pytest.mark.parametrize("cfg,name", [(LLAMA, "llama"), (BERT, "bert")])
def test_every_answer_from_an_entry_is_what_fake_tensor_mode_answers(cfg, name, monkeypatch):
    compare = _Compare()
    monkeypatch.setattr(custom, "answered", compare.function())
    ft.FakeTensorMode.cache_clear()
    custom.clear()
    built = build_from_config(dict(cfg), name)
    plan = plan_inputs(built.model, built.config, InputOptions(seq_len=16, batch=1))
    setup = TrainSetup(mode="qlora", precision="bf16")
    for batch in (1, 2, 5):
        estimate_with_curve(built, with_batch(plan, batch), setup, cache=False, cut_depth=False, steady_only=batch != 1)
    assert compare.from_entries > 50, (compare.calls, compare.from_entries)
    # the 4-bit matrix product and the two dequantizations of its backward
    assert {"bitsandbytes.gemm_4bit.default", "bitsandbytes.dequantize_4bit.default", "bitsandbytes.dequantize_blockwise.default"} <= compare.ops, compare.ops
    assert compare.differ == 0, compare.first_difference


def test_a_qlora_plans_figures_with_the_entries_are_those_without(monkeypatch):
    before = custom.HITS[0]
    fast, plain = with_and_without(TrainSetup(mode="qlora", precision="bf16"), lambda: monkeypatch.setattr(custom, "CACHE", False))
    assert custom.HITS[0] > before  # the entries answered in the first plan
    assert fast == plain


def test_only_ops_that_make_new_tensors_from_metadata_are_answered():
    import bitsandbytes  # noqa: F401  (registers its ops)

    bnb = torch.ops.bitsandbytes
    for op in (bnb.dequantize_4bit, bnb.quantize_4bit, bnb.gemm_4bit, bnb.gemv_4bit, bnb.dequantize_blockwise, bnb.quantize_blockwise):
        assert custom.cacheable(op.default), op
    assert not custom.cacheable(bnb.dequantize_4bit.out)  # writes its out= argument
    assert not custom.cacheable(bnb.optimizer_update_32bit.default)  # changes its arguments in place
    assert not custom.cacheable(bnb.int8_vectorwise_quant.default)  # an output's size depends on the values (its outliers)
    assert not custom.cacheable(torch.ops.aten.mm.default)  # torch caches its own
