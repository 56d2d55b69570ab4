"""FakeTensor's cache key built by neurarch.fake.cachekey equals torch's own, element for element.

The reference is torch's ``FakeTensorMode._prep_args_for_hash``, run on the same
arguments: on every op of real simulations (training modes, inference, a CNN),
and on arguments made by hand for the cases the fast path hands back to torch
(symbolic sizes aside: a simulation has none).  The values and their types
must match (``1 == 1.0 == True`` in a tuple, not in a key), as must the bypass
torch raises.  End to end, a plan's figures with the fast keys equal those with
torch's keys.
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses import fake_tensor as ft

from neurarch.build import build_from_config
from neurarch.fake import cachekey
from neurarch.inputs import InputOptions, plan_inputs
from neurarch.plan.memory import estimate_with_curve, with_batch
from neurarch.plan.train import TrainSetup
from plan_figures import with_and_without
from tiny_configs import BERT, LLAMA

RESNET = {
    "model_type": "resnet",
    "architectures": ["ResNetForImageClassification"],
    "embedding_size": 16,
    "hidden_sizes": [16, 32],
    "depths": [1, 1],
    "layer_type": "bottleneck",
    "num_labels": 10,
}


def _torch_key(mode, args):
    out: list = []
    try:
        cachekey._TORCH_PREP(mode, out, args, ft._CacheKeyState(mode.shape_env), [])
    except ft._BypassDispatchCache as e:
        return out, e.reason
    return out, None


FAST = cachekey.prep_args_for_hash  # the function itself, whatever a test puts in its place


def _fast_key(mode, args):
    out: list = []
    try:
        FAST(mode, out, args, ft._CacheKeyState(mode.shape_env), [])
    except ft._BypassDispatchCache as e:
        return out, e.reason
    return out, None


def _same(a, b) -> bool:
    (ka, ra), (kb, rb) = a, b
    return ra == rb and (ra is not None or (ka == kb and [type(x) for x in ka] == [type(x) for x in kb]))


class _Compare:
    """What stands in for the fast function during a simulation (:meth:`function`): builds
    both keys, counts the calls that differ, and gives the cache torch's key."""

    def __init__(self):
        self.calls = self.fast = self.differ = 0
        self.first_difference = None

    def function(self):
        def prep(mode, result, args, state, id_hashed_objects):
            self.calls += 1
            mine = _fast_key(mode, args)
            theirs = _torch_key(mode, args)
            if not _same(mine, theirs):
                self.differ += 1
                self.first_difference = self.first_difference or (mine, theirs)
            try:
                cachekey._append_args(mode, [], args)
                self.fast += 1
            except cachekey._Unusual:
                pass
            cachekey._TORCH_PREP(mode, result, args, state, id_hashed_objects)

        return prep


def test_this_torch_is_the_one_the_fields_were_written_for():
    assert cachekey.matches_torch(), "TensorMetadata's fields changed: update cachekey.FIELDS and the fast path"


CASES = [
    (LLAMA, "llama", TrainSetup(mode="full", precision="bf16-mixed")),
    (LLAMA, "llama", TrainSetup(mode="lora", precision="fp32")),
    (LLAMA, "llama", TrainSetup(mode="qlora", precision="bf16")),
    (LLAMA, "llama", TrainSetup(mode="inference", precision="bf16-mixed")),
    (BERT, "bert", TrainSetup(mode="full", precision="fp32", optimizer="sgd")),
    (RESNET, "resnet", TrainSetup(mode="full", precision="bf16-mixed")),
]


@pytest.mark.parametrize("cfg,name,setup", CASES, ids=[f"{c[1]}-{c[2].mode}" for c in CASES])
def test_every_key_of_a_simulation_is_torchs(cfg, name, setup, monkeypatch):
    compare = _Compare()
    monkeypatch.setattr(cachekey, "prep_args_for_hash", compare.function())
    built = build_from_config(dict(cfg), name)
    plan = plan_inputs(built.model, built.config, InputOptions(seq_len=16, batch=2))
    estimate_with_curve(built, with_batch(plan, 3), setup, cache=False, cut_depth=False)
    assert compare.calls > 500
    assert compare.differ == 0, compare.first_difference
    assert compare.fast > 0.8 * compare.calls  # most ops take the fast path: the test exercises it


@pytest.mark.parametrize("setup", [TrainSetup(mode="lora", precision="bf16-mixed"), TrainSetup(mode="inference", precision="bf16")], ids=["lora", "inference"])
def test_a_plans_figures_with_the_fast_keys_are_those_with_torchs(setup, monkeypatch):
    fast, plain = with_and_without(setup, lambda: monkeypatch.setattr(cachekey, "matches_torch", lambda: False))  # fast_keys leaves torch's function
    assert fast == plain


def _args_by_hand(mode):
    with mode:
        x = torch.empty(2, 3, 8, 8)
        return [
            (x, 1, 2.5, True, None, "mean"),
            (x.to(memory_format=torch.channels_last), [1, 2], (3, 4)),
            (x.transpose(1, 2), x[:, 1:], x.view(6, 64)[1]),
            (torch.empty(5, requires_grad=True), torch.empty((), dtype=torch.int64), x.shape),
            (torch.empty(3, dtype=torch.complex64).conj(), torch.float16, torch.device("cpu"), torch.strided, torch.contiguous_format),
            ({"dim": [0, 1], "keepdim": False, "dtype": torch.bfloat16}, [[1, 2], (3,)]),
            ((x, [x, 7]),),
        ]


def test_keys_by_hand_are_torchs():
    mode = ft.FakeTensorMode(allow_non_fake_inputs=True)
    for args in _args_by_hand(mode):
        mine, theirs = _fast_key(mode, args), _torch_key(mode, args)
        assert theirs[1] is None
        assert _same(mine, theirs), (args, mine, theirs)
        probe: list = []
        cachekey._append_args(mode, probe, args)  # each of these takes the fast path


def test_what_the_fast_path_hands_back_to_torch_gets_torchs_key_or_bypass():
    mode = ft.FakeTensorMode(allow_non_fake_inputs=True)
    other = ft.FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        x = torch.empty(4, 4)
        sparse = torch.empty(4, 4).to_sparse()
    with other:
        y = torch.empty(4, 4)
    const = mode.from_tensor(torch.ones(2))
    const.constant = torch.ones(2)

    class Named(tuple):
        pass

    cases = [
        ((x, torch.ones(3)), "non-fake tensor"),
        ((x, y), "not our fake"),
        ((const,), "constant attribute"),
        ((sparse,), "torch.sparse_coo tensor"),
        ((x, lambda t: t), "function argument"),
        ((x, Named((1, 2))), None),
        ((x, 3 + 0j, slice(1, 2)), None),
    ]
    for args, reason in cases:
        mine, theirs = _fast_key(mode, args), _torch_key(mode, args)
        assert theirs[1] == reason, (args, theirs[1])
        assert _same(mine, theirs), (args, mine, theirs)
        with pytest.raises(cachekey._Unusual):
            cachekey._append_args(mode, [], args)


def test_fast_keys_nests_and_puts_torchs_function_back():
    outside = cachekey._DEPTH[0] == 0  # no block open elsewhere in this process (a plan on another thread)
    with cachekey.fast_keys():
        with cachekey.fast_keys():
            assert ft.FakeTensorMode._prep_args_for_hash is cachekey.prep_args_for_hash
        assert ft.FakeTensorMode._prep_args_for_hash is cachekey.prep_args_for_hash
    if outside:
        assert ft.FakeTensorMode._prep_args_for_hash is cachekey._TORCH_PREP


def test_layouts_remembered_give_torchs_key_after_the_book_is_emptied(monkeypatch):
    # The flattened shape, strides and memory format are kept per (shape, strides): a second
    # tensor of the same layout reads them back, a new layout fills the book, a full book empties.
    monkeypatch.setattr(cachekey, "_LAYOUTS", {})
    monkeypatch.setattr(cachekey, "_LAYOUTS_MAX", 3)
    mode = ft.FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        x = torch.empty(2, 3, 8, 8)
        layouts = [x, x.to(memory_format=torch.channels_last), x.transpose(2, 3), torch.empty(2, 3, 8, 8), x[:, :2], x.view(6, 64), x.contiguous()]
    for args in [(t,) for t in layouts] + [tuple(layouts)]:
        assert _same(_fast_key(mode, args), _torch_key(mode, args)), args
    assert len(cachekey._LAYOUTS) <= 3
