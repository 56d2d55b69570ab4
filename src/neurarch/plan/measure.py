"""Old name of :mod:`neurarch.plan.real_step`, kept until ``plan/__init__`` reads the new one."""

from .real_step import Measurement, measure_cpu, measure_cuda, measure_model, real_factory  # noqa: F401
