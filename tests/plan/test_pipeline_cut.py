"""The memory-balanced contiguous pipeline cut, against hand computations and brute force."""

import itertools
import random

import pytest

from neurarch.errors import InputError
from neurarch.plan.pipeline_cut import Cut, balanced_cut

GB = 10**9


def test_two_stages_hand_computed():
    segs = [("embed", 4), ("layer.0", 3), ("layer.1", 3), ("layer.2", 3), ("head", 5)]
    # total 18; cuts after i segments: 4|14, 7|11, 10|8, 13|5 -> the best largest stage is 10 (cut before layer.2)
    cut = balanced_cut(segs)
    assert cut.boundaries == [3]
    assert cut.cut_after == ["layer.1"] and cut.cut_before == ["layer.2"]
    assert cut.stage_segments == [["embed", "layer.0", "layer.1"], ["layer.2", "head"]]
    assert cut.stage_bytes == [10, 8]
    assert cut.max_stage_bytes == 10 and cut.bottleneck_stage == 0
    assert cut.total_bytes == 18


def test_two_stages_bottleneck_on_second_card():
    segs = [("a", 1), ("b", 1), ("c", 1), ("d", 10)]
    # 1|12, 2|11, 3|10: the heavy last layer alone on card 2 is best
    cut = balanced_cut(segs, stages=2)
    assert cut.boundaries == [3]
    assert cut.stage_bytes == [3, 10]
    assert cut.bottleneck_stage == 1


def test_realistic_bytes_llm_shape():
    # A decoder: embedding 1 GB, 8 equal blocks of 2 GB, final norm ~0, head 1 GB (untied) = 18 GB.
    segs = [("embed", 1 * GB)] + [(f"layers.{i}", 2 * GB) for i in range(8)] + [("norm", 8192), ("lm_head", 1 * GB)]
    cut = balanced_cut(segs, 2)
    # embed + 4 blocks = 9 GB | 4 blocks + norm + head = 9 GB + 8192 B; any other cut puts >= 10 GB on one side
    assert cut.cut_before == ["layers.4"]
    assert cut.stage_bytes == [9 * GB, 9 * GB + 8192]
    assert cut.max_stage_bytes == 9 * GB + 8192


def test_three_stages_hand_computed():
    segs = [("s0", 7), ("s1", 2), ("s2", 5), ("s3", 10), ("s4", 8)]
    # total 32, lower bound ceil(32/3) = 11 but s3 = 10 with a neighbour exceeds 11.
    # Every 3-way split (boundaries b1 < b2):
    # (1,2): 7|2|23   (1,3): 7|7|18   (1,4): 7|17|8   (2,3): 9|5|18   (2,4): 9|15|8   (3,4): 14|10|8
    # largest stages: 23, 18, 17, 18, 15, 14 -> best is (3,4) with 14
    cut = balanced_cut(segs, stages=3)
    assert cut.boundaries == [3, 4]
    assert cut.stage_bytes == [14, 10, 8]
    assert cut.stage_segments == [["s0", "s1", "s2"], ["s3"], ["s4"]]
    assert cut.cut_after == ["s2", "s3"] and cut.cut_before == ["s3", "s4"]


def test_tie_on_largest_broken_by_next_largest():
    segs = [("a", 5), ("b", 1), ("c", 1), ("d", 5)]
    # 3 stages: (1,2): 5|1|6  (1,3): 5|2|5  (2,3): 6|1|5 -> largest 6, 5, 6: (1,3) wins outright.
    assert balanced_cut(segs, 3).boundaries == [1, 3]
    segs = [("a", 9), ("b", 1), ("c", 1), ("d", 1), ("e", 1)]
    # 3 stages: the 9 is alone in every optimal split (largest = 9); then the rest, 4 bytes in two stages:
    # (1,2): 9|1|3  (1,3): 9|2|2  (1,4): 9|3|1 -> sorted 9,3,1 / 9,2,2 / 9,3,1: (1,3) has the smaller second stage
    cut = balanced_cut(segs, 3)
    assert cut.boundaries == [1, 3]
    assert cut.stage_bytes == [9, 2, 2]


def test_exact_tie_takes_the_earliest_boundary():
    segs = [("a", 1), ("b", 0), ("c", 1)]
    # 1|1 with the zero-byte segment on either side: both [1,1]; the earlier boundary wins
    cut = balanced_cut(segs, 2)
    assert cut.boundaries == [1]
    assert cut.stage_segments == [["a"], ["b", "c"]]


def test_dominant_segment_sets_the_floor():
    segs = [("big", 100), ("x", 1), ("y", 1), ("z", 1)]
    # big alone on stage 1 = 100 whatever the cut; second stage smallest as 3 (cut right after big)
    cut = balanced_cut(segs, 2)
    assert cut.max_stage_bytes == 100
    assert cut.boundaries == [1]
    assert cut.stage_bytes == [100, 3]


def test_one_stage_and_as_many_stages_as_segments():
    segs = [("a", 3), ("b", 4), ("c", 5)]
    one = balanced_cut(segs, 1)
    assert one.boundaries == [] and one.stage_bytes == [12] and one.cut_after == [] and one.stage_segments == [["a", "b", "c"]]
    each = balanced_cut(segs, 3)
    assert each.boundaries == [1, 2] and each.stage_bytes == [3, 4, 5]
    assert each.max_stage_bytes == 5 and each.bottleneck_stage == 2


def test_all_zero_bytes():
    cut = balanced_cut([("a", 0), ("b", 0), ("c", 0)], 2)
    assert cut.stage_bytes == [0, 0] and cut.boundaries == [1]


def _brute(sizes, k):
    """Every contiguous split, ranked as balanced_cut ranks them."""
    n = len(sizes)
    best = None
    for bounds in itertools.combinations(range(1, n), k - 1):
        edges = [0, *bounds, n]
        parts = [sum(sizes[a:b]) for a, b in zip(edges, edges[1:])]
        key = (sorted(parts, reverse=True), list(bounds))
        if best is None or key < best:
            best = key
    return best


@pytest.mark.parametrize("seed", range(6))
def test_matches_brute_force(seed):
    rng = random.Random(seed)
    for _ in range(60):
        n = rng.randint(1, 9)
        k = rng.randint(1, min(n, 5))
        sizes = [rng.choice([0, 1, 2, 3, 5, 8, 13, 40, rng.randint(0, 1000)]) for _ in range(n)]
        cut = balanced_cut([(f"s{i}", s) for i, s in enumerate(sizes)], k)
        want_sorted, want_bounds = _brute(sizes, k)
        assert sorted(cut.stage_bytes, reverse=True) == want_sorted, (sizes, k)
        assert cut.boundaries == want_bounds, (sizes, k)
        assert sum(cut.stage_bytes) == cut.total_bytes == sum(sizes)
        assert [len(s) for s in cut.stage_segments] == [b - a for a, b in zip([0, *cut.boundaries], [*cut.boundaries, n])]


def test_many_segments_is_quick():
    segs = [(f"layers.{i}", 1_000_000 + (i * 7919) % 1000) for i in range(400)]
    cut = balanced_cut(segs, 4)
    assert len(cut.stage_bytes) == 4
    assert cut.max_stage_bytes <= -(-cut.total_bytes // 4) + 1_001_000  # within one segment of the even split


def test_result_is_a_frozen_typed_object():
    cut = balanced_cut([("a", 1), ("b", 2)], 2)
    assert isinstance(cut, Cut)
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen-instance error (a ValidationError) is the point
        cut.max_stage_bytes = 0
    assert Cut.model_validate(cut.model_dump()) == cut


@pytest.mark.parametrize(
    "segments, stages, match",
    [
        ([], 2, "no segments"),
        ([("a", 1)], 2, "at least 2 segments"),
        ([("a", 1), ("b", 2)], 0, "positive integer"),
        ([("a", 1), ("b", 2)], True, "positive integer"),
        ([("a", 1), ("b", -2)], 2, "non-negative integer"),
        ([("a", 1), ("b", 2.5)], 2, "non-negative integer"),
        ([("a", 1), ("b",)], 2, r"\(name, bytes\) pair"),
    ],
)
def test_bad_input(segments, stages, match):
    with pytest.raises(InputError, match=match):
        balanced_cut(segments, stages)
    with pytest.raises(ValueError):  # InputError is a ValueError too
        balanced_cut(segments, stages)
