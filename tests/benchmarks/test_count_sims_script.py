"""benchmarks/count_sims.py: the names it counts are the ones every planner simulation goes through.

The script counts simulations by replacing ``neurarch.plan.by_depth.simulate`` and
``simulate_inference``.  A plan's memory modes simulate only through
``by_depth.simulate_mode`` (cut runs in ``simulate_by_depth``, whole runs beside it), which
look both names up in by_depth's module at call time; if the code moves a call elsewhere,
the counts silently drop, and this test fails first, without running a plan.
"""

from __future__ import annotations

import inspect
import re

import neurarch.plan.by_depth as by_depth
import neurarch.plan.memory as memory
from benchmark_script import load


def test_the_planner_simulates_through_the_names_it_counts():
    load("count_sims")  # the script imports
    for fn in (by_depth.simulate_by_depth, by_depth.simulate_mode):
        body = inspect.getsource(fn)
        assert re.search(r"\bsimulate\(", body) and re.search(r"\bsimulate_inference\(", body), fn.__name__
    # The memory section reaches them through simulate_mode alone.
    body = inspect.getsource(memory._estimate_with_curve)
    assert "simulate_mode(" in body and not re.search(r"\bsimulate\(|simulate_inference\(", body)
