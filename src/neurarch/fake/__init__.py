"""Fake-tensor mechanics, in one place: what lets the real module run without weights.

* :mod:`.tensors` — a model's meta parameters and buffers made fake
  (:func:`~.tensors.to_fake`), a fresh ``FakeTensorMode`` (:func:`~.tensors.new_mode`),
  and :class:`~.tensors.ValueMode`, which computes the few values a forward
  needs from its inputs (token ids, masks, grids) instead of guessing them.
* :mod:`.convert` — the memory planner's conversion: a meta copy of the model
  per simulation (:func:`~.convert.meta_copy`), made fake without values, its
  plain tensor attributes returned to count as weights (the module's docstring
  says why the trace's and the planner's conversions differ).
* :mod:`.cuda` — :class:`~.cuda.CudaKernels`: CUDA's kernel choices (dropout,
  attention, autocast) followed while simulating on fake CPU tensors.
* :mod:`.gaps` — :class:`~.gaps.FakeGaps`: the few ops whose meta kernels
  refuse what real kernels accept, answered with the real kernel's output shape;
  and the fix for transformers' unpacked sequences on fake tensors.

The trace, the memory planner and the cost count all import from here.
"""
