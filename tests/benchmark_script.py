"""One of ``benchmarks/*.py`` loaded as a module, for the tests of those scripts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str, module_name: str | None = None) -> ModuleType:
    """``benchmarks/<name>.py``, run once as the module ``module_name`` (registered, so its
    dataclasses and pickled functions find their module)."""
    module_name = module_name or f"neurarch_bench_{name}"
    spec = importlib.util.spec_from_file_location(module_name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = mod
    spec.loader.exec_module(mod)
    return mod
