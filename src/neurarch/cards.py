"""GPU cards: memory, dense tensor rate, bandwidth and price, each with its source.

The data lives in ``neurarch/data/cards.tsv`` (read from datasheets and price
pages, with the date).  Users override prices with ``--price NAME=USD`` and
add cards with ``--card NAME:GB``.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources

from .errors import NeurarchError

GIB = 1024**3


class CardError(NeurarchError, ValueError):
    """An unknown card name, or a --card/--price value that cannot be parsed."""


@dataclass(frozen=True)
class Card:
    name: str
    memory_gb: float  # nominal, datasheet GB (10^9 bytes)
    usable_gib: float | None  # what PyTorch can allocate, where a source reports it
    dense_bf16_tflops: float | None
    fp32_tflops: float | None
    bf16: bool
    bandwidth_gb_s: float | None
    usd_per_hour: float | None
    price_source: str = ""
    spec_source: str = ""
    date: str = ""
    custom: bool = False
    interconnect_gb_s: float | None = None  # card-to-card, bidirectional (datasheet); prices FSDP runs
    interconnect_source: str = ""

    @property
    def memory_bytes(self) -> int:
        """Bytes the planner may fill: the usable figure where known, else the nominal size."""
        if self.usable_gib is not None:
            return int(self.usable_gib * GIB)
        return int(self.memory_gb * 1e9)


def _f(x: str) -> float | None:
    x = (x or "").strip()
    return float(x) if x else None


@lru_cache(maxsize=1)
def builtin_cards() -> tuple[Card, ...]:
    text = resources.files("neurarch.data").joinpath("cards.tsv").read_text()
    rows = [line for line in text.splitlines() if line and not line.startswith("#")]
    out = []
    for r in csv.DictReader(rows, delimiter="\t"):
        out.append(
            Card(
                name=r["name"],
                memory_gb=float(r["memory_gb"]),
                usable_gib=_f(r["usable_gib"]),
                dense_bf16_tflops=_f(r["dense_bf16_tflops"]),
                fp32_tflops=_f(r["fp32_tflops"]),
                bf16=r["bf16"].strip() == "yes",
                bandwidth_gb_s=_f(r["bandwidth_gb_s"]),
                usd_per_hour=_f(r["usd_per_hour"]),
                price_source=r["price_source"],
                spec_source=r["spec_source"],
                date=r["date"],
                interconnect_gb_s=_f(r.get("interconnect_gb_s") or ""),
                interconnect_source=r.get("interconnect_source") or "",
            )
        )
    return tuple(out)


def find(name: str) -> Card:
    """A built-in card by name (case-insensitive; 'H100' finds 'H100-SXM-80GB')."""
    cards = builtin_cards()
    low = name.lower()
    exact = [c for c in cards if c.name.lower() == low]
    if exact:
        return exact[0]
    prefix = [c for c in cards if c.name.lower().startswith(low)]
    if len(prefix) == 1:
        return prefix[0]
    names = ", ".join(c.name for c in cards)
    if len(prefix) > 1:
        raise CardError(f"card {name!r} is ambiguous: {', '.join(c.name for c in prefix)}")
    raise CardError(f"unknown card {name!r}; known cards: {names} (or a custom one as NAME:GB)")


_CUSTOM = re.compile(r"^([A-Za-z0-9][\w.\-]*):(\d+(\.\d+)?)$")


def parse_card(spec: str) -> Card:
    """``H100`` (built-in) or ``MyCard:48`` (custom, 48 GB, no rate or price known)."""
    m = _CUSTOM.match(spec.strip())
    if not m:
        return find(spec.strip())
    gb = float(m.group(2))
    if not 0 < gb <= 10_000:
        raise CardError(f"--card {spec}: memory must be between 0 and 10,000 GB")
    return Card(name=m.group(1), memory_gb=gb, usable_gib=None, dense_bf16_tflops=None, fp32_tflops=None, bf16=True, bandwidth_gb_s=None, usd_per_hour=None, spec_source="custom (--card)", custom=True)


def with_price(card: Card, spec: str) -> Card:
    try:
        price = float(spec)
    except ValueError:
        raise CardError(f"--price for {card.name}: {spec!r} is not a number") from None
    if not price >= 0 or price == float("inf"):
        raise CardError(f"--price for {card.name}: must be a non-negative number, got {spec}")
    return replace(card, usd_per_hour=price, price_source="user (--price)")
