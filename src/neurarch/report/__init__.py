"""The report contract: every section's schema, importing no stage.

The stages fill these types (trace fills :mod:`.model`, the memory planner
:mod:`.memory` and :mod:`.fit`, the cost estimate :mod:`.cost`, the verifier
:mod:`.verify`); renderers and faces read only :class:`Report`.

``python -m neurarch.report`` prints the JSON Schema (``docs/report.schema.json``).
"""

from .base import ReportModel
from .cost import CostAssumptions, CostCard, CostHeadline, CostSection
from .fit import CardFit, MultiGpuPlan
from .memory import MemoryAssumptions, MemoryBreakdown, MemoryMode, MemorySection
from .model import CountDifference, InputInfo, InputTensor, ModelInfo, Node, Params, PassResult, Structure
from .report import SCHEMA_VERSION, Report
from .verify import SEVERITIES, Finding, RuleFailure, Severity, Verifier

__all__ = [
    "SCHEMA_VERSION",
    "Report",
    "ReportModel",
    "ModelInfo",
    "InputInfo",
    "InputTensor",
    "PassResult",
    "Node",
    "Structure",
    "CountDifference",
    "Params",
    "MemoryAssumptions",
    "MemoryBreakdown",
    "MemoryMode",
    "MemorySection",
    "CardFit",
    "MultiGpuPlan",
    "CostAssumptions",
    "CostCard",
    "CostHeadline",
    "CostSection",
    "Finding",
    "RuleFailure",
    "Severity",
    "SEVERITIES",
    "Verifier",
]
