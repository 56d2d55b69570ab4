"""The batch search (plan.fit.largest_batch) against a brute-force answer.

Each fake "simulation" is a set of op labels whose bytes are sums of tensor sizes
rounded up to 512 bytes, the allocator's rule, so the per-op lines through two
batches are not exact.  The reference answer is the brute force: the largest batch
whose peak is within the budget, found by evaluating every batch.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from neurarch.plan.curve import Curve
from neurarch.plan.fit import largest_batch


def _round(n: int) -> int:
    return -(-n // 512) * 512


class FakeModel:
    """Labels, each a list of tensors (fixed bytes, bytes per sample); batch 1 may run one op less."""

    def __init__(self, labels: dict[str, list[tuple[int, int]]], one_differs: bool = False):
        self.labels = labels
        self.one_differs = one_differs
        self.runs: list[int] = []

    def label_bytes(self, b: int) -> dict[tuple, tuple[int, int]]:
        out = {}
        for name, tensors in self.labels.items():
            if self.one_differs and b == 1 and name == "extra":
                continue
            out[(2, "forward", name, 0)] = (sum(_round(f + k * b) for f, k in tensors), sum(f + k * b for f, k in tensors))
        return out

    def peak(self, b: int) -> int:
        return max(r for r, _ in self.label_bytes(b).values())

    def sim_at(self, b: int):
        self.runs.append(b)
        lb = self.label_bytes(b)
        curve = Curve(b, {k: r for k, (r, _) in lb.items()}, exact={k: u for k, (_, u) in lb.items()})
        return SimpleNamespace(peak_bytes=max(r for r, _ in lb.values())), (None if self.no_curve else curve)

    no_curve = False  # a simulation without per-op figures: only its peak

    def brute(self, budget: float, limit: int = 65_536) -> int:
        best = 0
        for b in range(1, limit + 1):
            if self.peak(b) > budget:
                break
            best = b
        return best


ROUNDED = {  # per-sample sizes that are not multiples of 512: the lines miss by up to a few KB
    "attn": [(10_000_000, 1_862_832), (0, 605_184), (0, 77 * 4 * 7)],
    "mlp": [(10_000_000, 2_420_736), (3_000, 4_100)],
    "extra": [(20_000_000, 300 * 4 + 3)],
}


@pytest.mark.parametrize("one_differs", [False, True])
def test_the_largest_batch_with_rounding(one_differs):
    model = FakeModel(ROUNDED, one_differs)
    wrong = 0
    for budget in range(200_000_000, 20_000_000_000, 97_654_321):
        model.runs.clear()
        found, checked = largest_batch(model.sim_at, budget)
        assert checked
        assert found == model.brute(budget), budget
        assert found in model.runs  # the answer was itself simulated
        wrong += len(model.runs) > 6
    assert wrong == 0  # and it took a handful of simulations, not a scan


def test_linear_models_take_one_check():
    # Sizes that are multiples of 512: the lines are exact, one simulation beyond batch 1 and 2.
    model = FakeModel({"a": [(1 << 20, 512 * 1000)], "b": [(1 << 21, 512 * 900), (0, 512)]})
    for budget in (3e8, 7.7e9, 1.3e11):
        model.runs.clear()
        found, _ = largest_batch(model.sim_at, budget)
        assert found == model.brute(budget)
        assert model.runs[:2] == [1, 2] and len(model.runs) == 3


def test_the_next_batch_is_shown_not_to_fit():
    # A budget just above batch n's peak: the search must not stop at a batch below n.
    model = FakeModel(ROUNDED)
    n = 1_234
    budget = model.peak(n)
    assert largest_batch(model.sim_at, budget)[0] == n == model.brute(budget)
    assert largest_batch(model.sim_at, budget - 1)[0] == n - 1


def test_a_peak_that_does_not_grow_at_small_batches():
    # The peak is a fixed optimizer-step label until activations outgrow it (a ViT's full
    # fine-tuning at batch 1 to 3) and there are no per-op lines: the peaks' line is flat.
    # The old search answered the largest batch searched, unchecked.
    model = FakeModel({"optimizer": [(5_000_000_000, 0)], "act": [(1_000_000, 40_000_000 + 3)]})
    model.no_curve = True  # only peaks to go by
    for budget in (5.1e9, 1.3e10, 1.5e11):
        model.runs.clear()
        found, checked = largest_batch(model.sim_at, budget)
        assert checked and found == model.brute(budget) and found in model.runs


def test_cards_are_searched_the_largest_first_and_come_back_in_their_order():
    # mode_result searches the card with the most memory first (after it, a cut model's smaller
    # cards' batches lie between simulated ones: neurarch.plan.by_depth._between); the rows keep
    # the cards' order, and every answer is the brute force's, as when each is searched alone.
    from neurarch.cards import Card
    from neurarch.plan.fit import DEFAULT_HEADROOM, mode_result

    model = FakeModel(ROUNDED)
    cards = [Card(name, gb, None, None, None, True, None, None, custom=True) for name, gb in (("small", 16), ("large", 80), ("mid", 40))]
    out = mode_result(model.sim_at, 1, cards, "full")
    assert list(out.fits) == ["small", "large", "mid"]
    first = next(b for b in model.runs if b > 2)  # the first batch past the lines' two: the large card's
    assert out.fits["mid"][0] + 1 < first <= 2 * out.fits["large"][0]
    for card in cards:
        assert out.fits[card.name][0] == model.brute(card.memory_bytes / DEFAULT_HEADROOM)
