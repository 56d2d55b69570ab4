"""neurarch: rebuild a model from its config on fake tensors, without weights.

    >>> from neurarch import analyze
    >>> report = analyze("microsoft/resnet-50")
    >>> report.params.derived, report.params.checkpoint
    (25610152, 25610152)

The pipeline reads top to bottom in the package layout:
``sources`` -> ``build`` -> ``inputs`` -> ``trace`` -> ``report`` -> ``render`` -> ``cli``.
"""

__version__ = "0.1.0"

from .pipeline import Options, analyze  # noqa: E402
from .report import SCHEMA_VERSION, Report  # noqa: E402

__all__ = ["analyze", "Options", "Report", "SCHEMA_VERSION", "__version__"]
