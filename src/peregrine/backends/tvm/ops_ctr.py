"""Relax lowering of CTR_LOOKUP (CatBoost's categorical columns, ``ir/semantics/ctr.py``): one
scheduled TIR function (``kernels.ctr_kernel``) of binary searches and integer keys, the rule's
values exactly."""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import relax

from peregrine.backends.tvm import kernels
from peregrine.backends.tvm.ops import Context, const, f64, lowering, width_of
from peregrine.ir import Node, Op

# the kernel's tables, in its argument order, with their dtypes
TABLES = (("hash_columns", "int64"), ("hashes", "float64"), ("hash_offsets", "int64"),
          ("bit_columns", "int64"), ("bit_thresholds", "float64"), ("bit_nan", "int64"),
          ("key_elements", "int64"), ("key_weights", "int64"), ("key_offsets", "int64"),
          ("keys", "int64"), ("keys_offsets", "int64"), ("sources", "int64"),
          ("values", "float64"), ("value_offsets", "int64"))


def _table(value: Any, dtype: str) -> relax.Constant:
    a = np.asarray(value, dtype).reshape(-1)
    return const(a if a.size else np.zeros(1, dtype), dtype)  # never an empty buffer


@lowering(Op.CTR_LOOKUP)
def lower_ctr_lookup(ctx: Context, node: Node, ins: list) -> relax.Expr:
    a, x = node.attrs, f64(ins[0])
    width = width_of(x)
    key = ("ctr", node.name)
    if key not in ctx.shared:
        name = f"ctr_{len(ctx.shared)}"
        ctx.shared[key] = ctx.bb.add_func(
            kernels.ctr_kernel(width, a).with_attr("global_symbol", name), name)
    args = [x] + [_table(getattr(a, k), dt) for k, dt in TABLES]
    out = relax.TensorType((ctx.rows, width + int(a.sources.size)), "float32")
    return relax.call_tir(ctx.shared[key], args, out)
