"""The order in which NumPy sums a row, written down as a program, so every backend adds the
same numbers in the same order and gets the same bits as scikit-learn's row norms.

scikit-learn's ``normalize`` sums in X's own dtype: ``np.abs(X).sum(axis=1)`` (l1) goes
through NumPy's pairwise summation (eight running sums over blocks of eight, blocks of more
than 128 split in halves), and ``row_norms`` (l2) through ``np.einsum("ij,ij->i", X, X)``,
whose inner loop keeps one 16-byte vector of lanes (four float32 or two float64: NumPy's
baseline SSE build, not CPU-dispatched), unrolled four times in reverse block order, a
pairwise lane sum at the end, and no fused multiply-add. Both orders were measured
bit-identical to NumPy 2.4 on widths 1 to 300, float32 and float64
(``tests/test_dtype_flow.py`` checks them against NumPy on every run, so a NumPy that changes
its order fails there first, not as a rounding surprise). These are the orders on a
C-contiguous X; on an F-ordered X (a DataFrame's values) NumPy adds the columns one after
another (docs/exactness.md).

A program is a list of ints in postfix order: ``j >= 0`` pushes column ``j`` of the summed
values, ``ADD`` pops two sums and pushes their sum (one rounding in the values' dtype). Every
summed value is >= 0 (absolute values, squares), so the zeros NumPy starts its accumulators
from are left out: ``0 + x`` is ``x`` exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np

ADD = -1
T = TypeVar("T")


def _postfix(expr: object, out: list[int]) -> None:
    if isinstance(expr, tuple):
        _postfix(expr[0], out)
        _postfix(expr[1], out)
        out.append(ADD)
    else:
        out.append(int(expr))  # type: ignore[call-overload]


def _plus(a: object, b: object) -> object:
    return b if a is None else a if b is None else (a, b)


def _pairwise(cols: list[int]) -> object:
    """NumPy's pairwise_sum of ``cols`` as an expression tree (nested pairs)."""
    n = len(cols)
    if n < 8:
        acc: object = None
        for c in cols:
            acc = _plus(acc, c)
        return acc
    if n <= 128:
        r: list[object] = list(cols[:8])
        i = 8
        while i < n - n % 8:
            r = [_plus(r[k], cols[i + k]) for k in range(8)]
            i += 8
        acc = _plus(_plus(_plus(r[0], r[1]), _plus(r[2], r[3])),
                    _plus(_plus(r[4], r[5]), _plus(r[6], r[7])))
        for c in cols[i:]:
            acc = _plus(acc, c)
        return acc
    half = n // 2
    half -= half % 8
    return _plus(_pairwise(cols[:half]), _pairwise(cols[half:]))


def _einsum(cols: list[int], n_lanes: int) -> object:
    """np.einsum's sum of products along a row (its contiguous, output-stride-0 loop)."""
    n = len(cols)
    lanes: list[object] = [None] * n_lanes
    i = 0
    while n - i >= 4 * n_lanes:  # four vectors a step, accumulated last vector first
        for sub in (3, 2, 1, 0):
            lanes = [_plus(lanes[k], cols[i + n_lanes * sub + k]) for k in range(n_lanes)]
        i += 4 * n_lanes
    while i < n:  # the tail, a vector at a time, zero-filled past the row's end
        lanes = [_plus(lanes[k], cols[i + k]) if i + k < n else lanes[k]
                 for k in range(n_lanes)]
        i += n_lanes
    while len(lanes) > 1:  # the lanes summed pairwise: (l0 + l1) + (l2 + l3)
        lanes = [_plus(lanes[2 * k], lanes[2 * k + 1]) for k in range(len(lanes) // 2)]
    return lanes[0]


def row_sum_program(kind: str, width: int, dtype: object = np.float32) -> list[int]:
    """The postfix program NumPy's row sum of ``width`` columns of ``dtype`` follows:
    ``kind`` "pairwise" (``ndarray.sum(axis=1)``) or "einsum" (``np.einsum("ij,ij->i")``)."""
    cols = list(range(width))
    lanes = 16 // np.dtype(dtype).itemsize  # one SSE vector
    expr = _pairwise(cols) if kind == "pairwise" else _einsum(cols, lanes)
    out: list[int] = []
    if expr is not None:
        _postfix(expr, out)
    return out


def evaluate(program: list[int], leaf: Callable[[int], T], add: Callable[[T, T], T]) -> T:
    """``program`` run on any values: ``leaf(j)`` for column ``j``, ``add(a, b)`` for a sum
    (NumPy arrays here, a backend's IR values in its kernels). ``program`` is not empty."""
    stack: list[T] = []
    for step in program:
        if step == ADD:
            right = stack.pop()
            stack.append(add(stack.pop(), right))
        else:
            stack.append(leaf(step))
    return stack.pop()


def run_program(program: list[int], values: np.ndarray) -> np.ndarray:
    """Row sums of the (rows, width) ``values`` in ``program``'s order, in their dtype."""
    if not program:
        return np.zeros(values.shape[0], dtype=values.dtype)
    # one rounding in the values' dtype per addition
    out = evaluate(program, lambda j: values[:, j], lambda a, b: a + b)
    return np.asarray(out, dtype=values.dtype)
