"""Torch lowering of CTR_LOOKUP (CatBoost's one-hot and CTR columns, ir/semantics/ctr.py),
step for step as its NumPy rule: codes and table entries by batched ``torch.searchsorted``
over per-element / per-projection tables padded to one width (a position past a table's
length never counts as found), keys as int64 sums, values by one ``torch.take``, the output cast to float32. Scriptable."""

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from peregrine.backends.torch.ops import Lowered, f64, lowering
from peregrine.ir import Node, Op
from peregrine.options import CompileOptions

_KEY_PAD = 1 << 62  # above every key (keys stay below 2**52)


def _padded(flat: np.ndarray, offsets: np.ndarray, fill: Any, dtype: Any
            ) -> tuple[np.ndarray, np.ndarray]:
    """(segments, width) array of the segments of ``flat`` padded with ``fill``, and lengths."""
    lengths = np.diff(offsets)
    out = np.full((len(lengths), max(1, int(lengths.max(initial=0)))), fill, dtype=dtype)
    for i, n in enumerate(lengths):
        out[i, :n] = flat[offsets[i]:offsets[i + 1]]
    return out, lengths


def _i64(a: Any) -> Tensor:
    return torch.from_numpy(np.array(a, dtype=np.int64, order="C")).clone()


def _found(table: Tensor, lengths: Tensor, v: Tensor) -> Tensor:
    """Position + 1 of each v (rows: one table each) in its ascending table, 0 if absent."""
    pos = torch.searchsorted(table, v)
    at = pos.clamp(max=table.shape[1] - 1)
    hit = (table.gather(1, at) == v) & (pos < lengths)
    return torch.where(hit, pos + 1, torch.zeros_like(pos))


class CtrLookup(nn.Module):
    def __init__(self, a: Any) -> None:
        super().__init__()
        hashes, n_hashes = _padded(a.hashes, a.hash_offsets, np.inf, np.float64)
        self.register_buffer("hashes", f64(hashes))
        self.register_buffer("n_hashes", _i64(n_hashes).unsqueeze(1))
        self.register_buffer("hash_columns", _i64(a.hash_columns))
        self.register_buffer("bit_columns", _i64(a.bit_columns))
        self.register_buffer("thresholds", f64(a.bit_thresholds))
        self.register_buffer("bit_nan", _i64(a.bit_nan))
        # padded key parts read a zero element (one past the last) with weight 0
        parts, _ = _padded(a.key_elements, a.key_offsets, a.n_elements, np.int64)
        weights, _ = _padded(a.key_weights, a.key_offsets, 0, np.int64)
        self.register_buffer("parts", _i64(parts.T))
        self.register_buffer("weights", _i64(weights.T))
        keys, n_keys = _padded(a.keys, a.keys_offsets, _KEY_PAD, np.int64)
        self.register_buffer("keys", _i64(keys))
        self.register_buffer("n_keys", _i64(n_keys).unsqueeze(1))
        self.register_buffer("sources", _i64(a.sources))
        self.register_buffer("starts", _i64(a.value_offsets[:-1]))
        self.register_buffer("values", f64(a.values))

    def forward(self, xs: list[Tensor]) -> Tensor:
        x = xs[0].to(torch.float64)
        n = x.shape[0]
        codes = _found(self.hashes, self.n_hashes, x[:, self.hash_columns].t().contiguous())
        v = x[:, self.bit_columns]
        bits = torch.where(torch.isnan(v), self.bit_nan.expand_as(v),
                           (v > self.thresholds).to(torch.int64))
        zero = torch.zeros((n, 1), dtype=torch.int64, device=x.device)
        elements = torch.cat([codes.t(), bits, zero], dim=1)
        number = torch.zeros((n, self.parts.shape[1]), dtype=torch.int64, device=x.device)
        for k in range(self.parts.shape[0]):
            number = number + elements[:, self.parts[k]] * self.weights[k]
        entry = _found(self.keys, self.n_keys, number.t().contiguous()).t()
        derived = torch.take(self.values, self.starts + entry[:, self.sources])
        return torch.cat([x, derived], dim=1).to(torch.float32)


@lowering(Op.CTR_LOOKUP)
def lower_ctr_lookup(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(CtrLookup(node.attrs))
