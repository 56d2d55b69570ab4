"""What a CUDA card needs beyond the live tensor bytes: sourced constants.

``peak_bytes = peak of live bytes with every allocation rounded up by the
caching allocator + cuBLAS workspaces + CUDA context``.

* Rounding: PyTorch's CUDA caching allocator rounds every request up to a
  multiple of 512 bytes (``kMinBlockSize``, c10/core/AllocatorConfig.h:
  "all sizes are rounded to at least 512 bytes").  The simulator replays the
  run with rounded sizes, so this part is exact for ``max_memory_allocated``.
* cuBLAS workspace: one per (handle, stream); PyTorch's default is
  ``4096 KiB * 8 = 32 MiB`` on Hopper and Blackwell and
  ``4096 KiB * 2 + 16 KiB * 8`` elsewhere (aten/src/ATen/cuda/CublasHandlePool.cpp,
  parseChosenWorkspaceSize, ":4096:2:16:8 default, 32MiB for Hopper and
  Blackwell").  Training runs backward on the autograd engine's device thread,
  which holds its own handle, so training counts two workspaces, inference one.
  They are allocated through the caching allocator.
* CUDA context: not a PyTorch allocation and not in ``max_memory_allocated``,
  but on the card.  With lazy module loading (PyTorch sets
  CUDA_MODULE_LOADING=LAZY since 1.13) the PR that made it the default measured
  287,047,680 bytes (pytorch/pytorch#86509); it varies with GPU, driver and the
  kernels a run loads.

Not included (and said so in the report): fragmentation of the caching
allocator (reserved - allocated), which depends on the allocation order and
is typically a few percent; NCCL buffers for multi-GPU runs.
"""

from __future__ import annotations

CUDA_MIN_BLOCK = 512  # c10/core/AllocatorConfig.h kMinBlockSize
CUBLAS_WORKSPACE_HOPPER = 4096 * 8 * 1024  # CublasHandlePool.cpp, sm90 / sm100 / sm120
CUBLAS_WORKSPACE_OTHER = 4096 * 1024 * 2 + 16 * 1024 * 8  # CublasHandlePool.cpp, ":4096:2:16:8"
CUDA_CONTEXT_LAZY = 287_047_680  # pytorch/pytorch#86509, CUDA_MODULE_LOADING=LAZY


def cuda_round(nbytes: int) -> int:
    """Bytes the caching allocator hands out for a request of ``nbytes``."""
    if nbytes <= 0:
        return 0
    return -(-nbytes // CUDA_MIN_BLOCK) * CUDA_MIN_BLOCK


def fixed_overhead(training: bool, hopper: bool = True) -> int:
    """cuBLAS workspaces (two threads in training) plus the CUDA context."""
    ws = CUBLAS_WORKSPACE_HOPPER if hopper else CUBLAS_WORKSPACE_OTHER
    return ws * (2 if training else 1) + CUDA_CONTEXT_LAZY
