"""``serve --warm``'s sweep items start from a supervisor that imported what a pool worker imports.

The supervisor imports ``neurarch.web.preload`` once; every item is forked from
it, so a module the supervisor imported is in the item's ``sys.modules`` before
the item imports anything.  The control: a supervisor that preloads only the
worker module leaves peft and bitsandbytes for each item to import.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from neurarch.supervise import Supervisor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sweep"))
import sweep_jobs as jobs  # noqa: E402

MODULES = ("peft", "bitsandbytes", "transformers.modeling_utils", "neurarch.cost.estimate")


@pytest.mark.skipif(importlib.util.find_spec("peft") is None or importlib.util.find_spec("bitsandbytes") is None, reason="peft and bitsandbytes are installed by the dev extra")
def test_warm_items_fork_with_the_libraries_imported():
    with Supervisor(preload=("neurarch.web.preload",)) as sup:
        for name in MODULES:
            out = sup.run(jobs.preloaded, (name,), time_limit_s=60)
            assert out.ok and out.value is True, (name, out)
    with Supervisor(preload=("neurarch.web.worker",)) as sup:  # the control: the worker module alone
        out = sup.run(jobs.preloaded, ("peft",), time_limit_s=60)
        assert out.ok and out.value is False
