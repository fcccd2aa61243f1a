"""A linear model reading one-hot indicators, as one torch module that never makes them
(the op-by-op program's form of the native row kernel's step, ``kernels/rowwise_onehot.py``:
TorchScript, CUDA, and CPU batches the fused kernel does not take).

``LINEAR(ONE_HOT(x))`` or ``LINEAR(CONCAT(one-hot and dense blocks))``: per one-hot input
column, a binary search of its sorted categories finds the category the value equals (NaN
matches a NaN category), which picks one row of the weights (its slot's row, zeros for a
dropped category, the unknown slot's row or zeros when none matches); the rows are added
column by column from 0.0, then ``x_j * W[j]`` for each dense column, then the intercept:
scikit-learn's own order on the ColumnTransformer's sparse matrix (``csr_matvec``), the
kernel's too, so the answers keep their bits. The indicator matrix (1,000 float64 columns for
20 string columns of 50 categories) is never written."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from peregrine.backends.torch.ops import f64
from peregrine.ir import Op

MAX_SEQUENTIAL = 256  # dense columns added one by one; a wider block is one product


class DenseRows(nn.Module):
    """A dense block's ``x_j * W[j]`` added to the running sum, column by column."""

    def __init__(self, weight: np.ndarray) -> None:
        super().__init__()
        self.register_buffer("weight", f64(weight))
        self.width = int(weight.shape[0])
        self.sequential = self.width <= MAX_SEQUENTIAL

    def forward(self, x: Tensor, acc: Tensor, r32: bool) -> Tensor:
        # a float32 hstack (CONCAT.float32) rounds the block to float32 first, as the rule
        v = x.to(torch.float32).to(torch.float64) if r32 else x.to(torch.float64)
        if not self.sequential:
            return acc + v @ self.weight
        for j in range(self.width):
            acc = acc + v[:, j:j + 1] * self.weight[j]
        return acc


class HotRows(nn.Module):
    """A ONE_HOT block's picked weight rows added to the running sum, column by column; reads
    the ONE_HOT's input. ``sorted`` holds each column's categories (NaN left out) padded with
    +inf; ``rowmap`` the table row of each sorted category; ``nomatch`` / ``nanrow`` the rows
    for no match and for NaN."""

    def __init__(self, hot: Any, block: np.ndarray) -> None:
        super().__init__()
        a = hot.attrs
        w = block.shape[1]
        cats_of = [np.asarray(c, np.float64).reshape(-1) for c in a.categories]
        width = max([int(np.sum(~np.isnan(c))) for c in cats_of] + [1])
        m = len(cats_of)
        sorted_ = np.full((m, width), np.inf)
        rowmap = np.zeros((m, width), np.int64)
        counts, nomatch, nanrow, tables = [], [], [], []
        top = 0
        for k, (cats, slots, unknown) in enumerate(zip(cats_of, a.slots, a.unknown_slots)):
            slots = np.asarray(slots, np.int64).reshape(-1)
            none = block[int(unknown)] if int(unknown) >= 0 else np.zeros(w)
            rows = [block[s] if s >= 0 else np.zeros(w) for s in slots] + [none]
            real = np.flatnonzero(~np.isnan(cats))
            order = real[np.argsort(cats[real], kind="stable")]
            sorted_[k, :order.size] = cats[order]
            rowmap[k, :order.size] = top + order
            counts.append(order.size)
            nomatch.append(top + len(slots))
            at_nan = np.flatnonzero(np.isnan(cats))
            nanrow.append(top + int(at_nan[0]) if at_nan.size else top + len(slots))
            tables.append(np.asarray(rows).reshape(-1, w))
            top += len(rows)
        self.register_buffer("columns", torch.as_tensor(np.asarray(a.columns, np.int64)))
        self.register_buffer("sorted", f64(sorted_))
        self.register_buffer("rowmap", torch.as_tensor(rowmap))
        self.register_buffer("counts", torch.as_tensor(np.asarray(counts, np.int64))[:, None])
        self.register_buffer("nomatch", torch.as_tensor(np.asarray(nomatch, np.int64))[:, None])
        self.register_buffer("nanrow", torch.as_tensor(np.asarray(nanrow, np.int64))[:, None])
        self.register_buffer("table", f64(np.concatenate(tables)))
        self.width = int(width)
        self.m = m

    def forward(self, x: Tensor, acc: Tensor, r32: bool) -> Tensor:
        v = x.index_select(1, self.columns).to(torch.float64).t().contiguous()  # (m, n)
        pos = torch.searchsorted(self.sorted, v)
        at = pos.clamp(max=self.width - 1)
        found = (self.sorted.gather(1, at) == v) & (pos < self.counts)
        row = torch.where(found, self.rowmap.gather(1, at), self.nomatch.expand_as(at))
        row = torch.where(torch.isnan(v), self.nanrow.expand_as(row), row)
        picked = self.table[row]  # (m, n, w)
        for k in range(self.m):
            acc = acc + picked[k]
        return acc


class OneHotLinear(nn.Module):
    """The LINEAR with its one-hot and dense blocks (inputs: per block, the ONE_HOT's input or
    the dense block's value)."""

    def __init__(self, node: Any, parts: list, concat_f32: bool) -> None:
        super().__init__()
        weight = np.asarray(node.attrs.weight, np.float64)
        blocks: list[nn.Module] = []
        kinds: list[int] = []
        row = 0
        for p in parts:
            block = weight[row:row + int(p.width)]
            row += int(p.width)
            hot = p.op is Op.ONE_HOT
            blocks.append(HotRows(p, block) if hot else DenseRows(block))
            kinds.append(1 if hot else 0)
        self.blocks = nn.ModuleList(blocks)
        self.kinds = kinds
        self.concat_f32 = bool(concat_f32)
        self.out = int(weight.shape[1])
        self.register_buffer("bias", f64(np.broadcast_to(node.attrs.bias, (self.out,))))

    def forward(self, xs: list[Tensor]) -> Tensor:
        r32 = False
        if self.concat_f32:  # the hstack is float32 when a dense block is
            for i in range(len(xs)):
                if self.kinds[i] == 0 and xs[i].dtype == torch.float32:
                    r32 = True
        acc = torch.zeros((xs[0].shape[0], self.out), dtype=torch.float64, device=xs[0].device)
        for i, block in enumerate(self.blocks):
            acc = block(xs[i], acc, r32)
        return acc + self.bias
