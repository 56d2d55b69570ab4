"""Stage 3: trace the built model on fake tensors.

* :mod:`.fake` — meta parameters to fake tensors;
* :mod:`.recorder` — hooks that record module calls, shapes and functional ops;
* :mod:`.run` — the forward and backward pass;
* :mod:`.structure` — the layer table at a chosen granularity;
* :mod:`.counts` — parameter/buffer counts and the checkpoint comparison;
* :mod:`.types` — readable layer types.
"""

from .run import TraceResult, trace

__all__ = ["trace", "TraceResult"]
