"""Modules imported on first use, so that listing rules or options never pays for torch.

    from .._lazy import nn, torch     # in a module whose functions use them
    isinstance(m, nn.Linear)          # torch is imported here, the first time

Only attribute access imports; annotations (``from __future__ import
annotations``) and the module's own import do not.
"""

from __future__ import annotations

import importlib
import types


class LazyModule(types.ModuleType):
    """Stands for the module ``name`` and imports it on the first attribute read."""

    def __init__(self, name: str):
        super().__init__(name)
        self.__dict__["_lazy_target"] = name

    def __getattr__(self, attr: str):
        module = importlib.import_module(self.__dict__["_lazy_target"])
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self.__dict__['_lazy_target']!r}>"


torch = LazyModule("torch")
nn = LazyModule("torch.nn")
