"""The input plan: tensor specs, made into tensors when traced, and their alternatives."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .defaults import SEED
from .features import _count_features

# mm_token_type_ids: which modality each token is (transformers' convention).
MODALITY_CODES = {"text": 0, "image": 1, "video": 2, "audio": 3}


@dataclass
class TokenRun:
    """``count`` copies of ``token_id`` at the start of each row of a token tensor.

    ``count`` None: not known yet; :meth:`InputPlan.resolve` asks the model
    how many ``modality`` features one sample makes.
    """

    token_id: int
    count: int | None
    modality: str = "image"


@dataclass
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    high: int | None = None  # token ids are drawn from [0, high)
    avoid: tuple[int, ...] = ()  # ids never drawn (special tokens)
    data: list | None = None  # an exact value (grids, sizes): small index tensors
    fill: float | None = None  # a constant value (masks)
    runs: list[TokenRun] = field(default_factory=list)
    text: bool = False  # dim 1 is the text length (resized with the text)
    run_codes: bool = False  # zeros, with each run written as its modality code (mm_token_type_ids)
    modality: str | None = None  # "image", "video", "audio": dropped with its tokens if the model cannot use it

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def real(self, gen: torch.Generator) -> torch.Tensor:
        """The tensor, with real values (call outside any fake mode)."""
        if self.data is not None:
            return torch.tensor(self.data, dtype=self.dtype).reshape(self.shape)
        if self.run_codes:
            return self._write_runs(torch.zeros(self.shape, dtype=self.dtype))
        if self.fill is not None:
            return torch.full(self.shape, self.fill, dtype=self.dtype)
        if self.dtype.is_floating_point:
            return torch.randn(self.shape, dtype=self.dtype, generator=gen)
        if self.dtype == torch.bool:
            return torch.ones(self.shape, dtype=torch.bool)
        if self.high is None:
            return torch.ones(self.shape, dtype=self.dtype)
        t = torch.randint(0, max(self.high, 1), self.shape, dtype=self.dtype, generator=gen)
        if self.avoid:
            t = _replace_ids(t, self.avoid, self.high)
        return self._write_runs(t)

    def fake(self) -> torch.Tensor:
        """The tensor under the active fake mode (no values, no memory)."""
        if self.data is not None:
            return torch.tensor(self.data, dtype=self.dtype).reshape(self.shape)
        if self.run_codes:
            return self._write_runs(torch.zeros(self.shape, dtype=self.dtype))
        if self.fill is not None:
            return torch.full(self.shape, self.fill, dtype=self.dtype)
        if self.dtype.is_floating_point:
            return torch.randn(self.shape, dtype=self.dtype)
        if self.high is not None:
            return self._write_runs(torch.randint(0, max(self.high, 1), self.shape, dtype=self.dtype))
        return torch.ones(self.shape, dtype=self.dtype)

    def _write_runs(self, t: torch.Tensor) -> torch.Tensor:
        start = 0
        for r in self.runs:
            if r.count:
                t[..., start : start + r.count] = MODALITY_CODES[r.modality] if self.run_codes else r.token_id
                start += r.count
        return t


def _replace_ids(t: torch.Tensor, avoid: tuple[int, ...], high: int) -> torch.Tensor:
    """Replace special ids by the smallest id that is not special."""
    bad = set(avoid)
    safe = next((i for i in range(min(high, 1 << 20)) if i not in bad), 0)
    for a in bad:
        t[t == a] = safe
    return t


@dataclass
class Alternative:
    """Another layout for some inputs, tried when the first choice fails (audio features: bins or frames first)."""

    tensors: list[TensorSpec]
    how: str


@dataclass
class InputPlan:
    tensors: list[TensorSpec]
    main: str
    batch: int
    seq_len: int | None = None
    image_size: tuple[int, int] | None = None
    how: list[str] = field(default_factory=list)
    resolved: bool = False
    alternatives: list[Alternative] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)  # non-tensor forward arguments (use_cache=False)

    def use(self, alt: Alternative) -> None:
        """Switch to an alternative layout (replaces the tensors of the same names)."""
        by_name = {t.name: t for t in alt.tensors}
        self.tensors = [by_name.pop(t.name, t) for t in self.tensors] + list(by_name.values())
        self.how.append(alt.how)
        self.alternatives = []

    @property
    def settled(self) -> bool:
        """Whether the trace can no longer change this plan: no token counts to ask the
        model for, no alternative layout to fall back on."""
        return not self.alternatives and all(r.count is not None for t in self.tensors for r in t.runs)

    @property
    def main_shape(self) -> tuple[int, ...]:
        return next(t.shape for t in self.tensors if t.name == self.main)

    def make(self, values=None) -> dict[str, Any]:
        """Materialise the inputs (and the non-tensor ``kwargs``), ready for ``model(**inputs)``.

        Call under FakeTensorMode.  With ``values`` (a
        :class:`neurarch.fake.tensors.ValueMode`), small inputs are created real
        and registered, so code that reads their values (token counts, grids)
        runs; large ones stay fake.  Without it every input is fake.
        """
        out = {}
        gen = torch.Generator().manual_seed(SEED)
        for t in self.tensors:
            if values is not None and t.numel <= values.limit:
                from torch.utils._python_dispatch import _disable_current_modes

                with _disable_current_modes():
                    r = t.real(gen)
                out[t.name] = values.real(r)
            else:
                out[t.name] = t.fake()
        out.update(self.kwargs)
        return out

    def resolve(self, model: nn.Module, values=None) -> None:
        """Count the image (video, audio) tokens the text must hold, by asking the model.

        Call under FakeTensorMode with the model already on fake tensors,
        before hooks are attached.  Fills every :class:`TokenRun` whose count
        is unknown and lengthens the text when the runs do not fit.
        """
        if self.resolved:
            return
        self.resolved = True
        pending = list({id(r): r for t in self.tensors for r in t.runs if r.count is None}.values())
        if not pending:
            return
        inputs = self.make(values)
        for r in pending:
            n, why = _count_features(model, r.modality, inputs, self.batch)
            if n:
                r.count = n
                self.how.append(f"{n} {r.modality} tokens per sample (id {r.token_id}), as many as the model's {r.modality} features")
            else:
                self._drop(r.modality, why)
        need = max((sum(r.count or 0 for r in t.runs) for t in self.tensors), default=0) + 1
        if self.seq_len is not None and need > self.seq_len:
            for t in self.tensors:
                if t.text and len(t.shape) >= 2:
                    t.shape = (t.shape[0], need, *t.shape[2:])
            self.how.append(f"text lengthened from {self.seq_len} to {need} tokens to hold them")
            self.seq_len = need

    def _drop(self, modality: str, why: str) -> None:
        """Trace without ``modality``: remove its inputs and its tokens from the text."""
        self.tensors = [t for t in self.tensors if t.modality != modality]
        for t in self.tensors:
            t.runs[:] = [r for r in t.runs if r.modality != modality]
        self.how.append(f"traced without the {modality}: {why}")
