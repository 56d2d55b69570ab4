"""neurarch: rebuild a model from its config on fake tensors, without weights.

    >>> from neurarch import analyze
    >>> report = analyze("microsoft/resnet-50")
    >>> report.params.derived, report.params.checkpoint
    (25610152, 25610152)

The pipeline reads top to bottom in the package layout (``docs/architecture.md``):
``sources`` -> ``build`` -> ``inputs`` -> ``trace`` -> ``plan`` / ``cost`` / ``verify`` -> ``report``
-> ``render`` -> faces (``cli``, ``web``); ``options`` and ``errors`` are read by all.
"""

__version__ = "0.1.0"

__all__ = ["analyze", "Options", "InputOptions", "PlanOptions", "CostOptions", "Report", "SCHEMA_VERSION", "__version__"]

# Imported on first use: `neurarch-trace --help`, `catalog` and `checks` must not
# pay for torch and transformers (seconds) before they print a line.
_LAZY = {"analyze": "pipeline", "Options": "options", "InputOptions": "options", "PlanOptions": "options", "CostOptions": "options", "Report": "report", "SCHEMA_VERSION": "report"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_LAZY])
