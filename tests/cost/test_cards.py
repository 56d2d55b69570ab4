"""The card table (neurarch/data/cards.tsv): the usable-memory column and its sources."""

import re

import pytest

from neurarch.cards import GIB, builtin_cards, find, parse_card

URL = re.compile(r"https?://\S+")


def _usable_note(card) -> str:
    m = re.search(r"usable:(.*)$", card.spec_source)
    return m.group(1) if m else ""


def test_every_usable_figure_names_a_url():
    filled = [c for c in builtin_cards() if c.usable_gib is not None]
    assert filled, "no card has a usable figure"
    for c in filled:
        note = _usable_note(c)
        assert URL.search(note), f"{c.name}: usable_gib {c.usable_gib} without a source URL in spec_source"
        assert f"{c.usable_gib:.2f}" in note, f"{c.name}: the note does not quote the figure {c.usable_gib}"


@pytest.mark.parametrize("card", builtin_cards(), ids=lambda c: c.name)
def test_usable_is_plausible_for_the_nominal_size(card):
    if card.usable_gib is None:
        return
    # PyTorch's total is below the marketed size read as GiB (16 GB T4 -> 14.74 GiB; 80 GB A100 -> 79.14 GiB)
    # and above 90 % of it (no card loses a tenth to the driver and ECC).
    assert 0.9 * card.memory_gb < card.usable_gib < card.memory_gb
    # two decimals, rounded down from the source (the header says so)
    assert round(card.usable_gib, 2) == card.usable_gib


def test_planner_fills_the_usable_figure_where_known():
    t4 = find("T4")
    assert t4.usable_gib == 14.74
    assert t4.memory_bytes == int(14.74 * GIB)  # 15,826,954,485 bytes, not 16e9
    h200 = find("H200")
    assert h200.memory_bytes == int(139.80 * GIB)


def test_unknown_usable_falls_back_to_nominal():
    l4 = find("L4")
    assert l4.usable_gib is None
    assert l4.memory_bytes == 24 * 10**9
    custom = parse_card("Mine:48")
    assert custom.usable_gib is None and custom.memory_bytes == 48 * 10**9
