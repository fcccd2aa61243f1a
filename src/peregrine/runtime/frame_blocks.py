"""ColumnTransformer blocks of a DataFrame whose number columns mix float32 with other dtypes.

scikit-learn's ColumnTransformer hands each transformer the sub-frame of its columns, and
that transformer's ``check_array`` keeps it float32 when ``np.result_type`` of those columns'
dtypes is float32 (float32 alone, or with bool, int8/16, uint8/16 columns): a StandardScaler
on float32 columns then scales in float32 even when the frame also holds float64 or int64
columns. The program reads such a frame as one float64 matrix (inputs.py: float32 only when
every number column is), whose values are the float32 numbers exactly; what differs is the
arithmetic of those blocks.

The frontend marks each block read straight from the input (``Select.frame_block``: the
columns its transformer receives). For a frame where some marked blocks are float32, the
runtime builds a variant of the program in which those selections return float32
(``Select.float32``; every backend lowers it as the rule's ``astype``), so the block's steps
compute in float32 through the ops' own float32 forms, and a CONCAT stays float32 only where
``np.hstack`` would (every block float32 or a 0/1 indicator). One variant per set of float32
blocks, built on first use and kept (``CompiledModel._frame_variant``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from peregrine.ir import Graph, Op
from peregrine.ir.spec import ModelSpec

_F32 = np.dtype(np.float32)


def frame_blocks(spec: ModelSpec) -> tuple[tuple[str, np.ndarray], ...]:
    """The marked ColumnTransformer blocks reading the input: (SELECT node, its
    ``frame_block`` input columns). Worked out once per compiled model (``CompiledModel``
    keeps it)."""
    x = next(n.name for n in spec.graph.nodes if n.op is Op.INPUT)
    return tuple((n.name, np.asarray(n.attrs.frame_block, dtype=np.int64).reshape(-1))
                 for n in spec.graph.nodes
                 if n.op is Op.SELECT and n.inputs == (x,)
                 and getattr(n.attrs, "frame_block", None) is not None)


def float32_blocks(df: Any, spec: ModelSpec,
                   blocks: tuple[tuple[str, np.ndarray], ...]) -> frozenset[str]:
    """Of ``blocks`` (``frame_blocks``), those scikit-learn computes in float32 on ``df``:
    every column a NumPy number or bool dtype, their ``np.result_type`` float32."""
    if not blocks:
        return frozenset()
    dtypes = list(df.dtypes)
    if spec.feature_names is not None:
        position = {str(c): k for k, c in enumerate(df.columns.tolist())}
        dtypes = [dtypes[position[c]] for c in spec.feature_names]
    out = set()
    for name, cols in blocks:
        block = [dtypes[int(j)] for j in cols]
        if block and all(isinstance(d, np.dtype) and d.kind in "fiub" for d in block) \
                and np.result_type(*block) == _F32:
            out.add(name)
    return frozenset(out)


def float32_flow(graph: Graph, x_float32: bool = False) -> dict[str, bool]:
    """Per node: whether its rule returns float32 (``Attrs.float32_out``) for an input that
    is float32 or not."""
    f32: dict[str, bool] = {}
    for n in graph.nodes:
        f32[n.name] = x_float32 if n.op is Op.INPUT else \
            bool(n.attrs.float32_out([f32[i] for i in n.inputs]))
    return f32


def variant_spec(spec: ModelSpec, blocks: frozenset[str]) -> ModelSpec:
    """``spec`` with the selections ``blocks`` returning float32, for a float64 input."""
    nodes, f32, ops = [], {}, {}
    for n in spec.graph.nodes:
        if n.name in blocks:
            n = dataclasses.replace(n, attrs=dataclasses.replace(n.attrs, float32=True))
        elif n.op is Op.CONCAT and n.attrs.float32 and \
                not all(f32[i] or ops[i] is Op.ONE_HOT for i in n.inputs):
            # np.hstack: float32 only when every block is float32 or a 0/1 indicator
            # (MissingIndicator's ONE_HOT); the frontend's CONCAT.float32 assumed one dtype
            # for every block
            n = dataclasses.replace(n, attrs=dataclasses.replace(n.attrs, float32=False))
        f32[n.name] = False if n.op is Op.INPUT else \
            bool(n.attrs.float32_out([f32[i] for i in n.inputs]))
        ops[n.name] = n.op
        nodes.append(n)
    return dataclasses.replace(spec, graph=Graph(tuple(nodes), spec.graph.outputs))
