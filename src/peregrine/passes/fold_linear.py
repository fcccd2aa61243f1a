"""Algebraic folding of linear chains (gated: ``Precision.FAST``). A ``LINEAR`` (x @ W + b)
reading a ``CENTER_SCALE``, an ``AFFINE`` or another ``LINEAR`` becomes one ``LINEAR`` of the
step's input, its weights and bias folded in extended precision:

* ``CENTER_SCALE`` ((x - c) / s) -> LINEAR: W' = W / s (row j divided by s_j), b' = b - (c/s) @ W
* ``AFFINE`` (x * a + d) -> LINEAR: W' = a * W (row j times a_j), b' = b + d @ W
* ``LINEAR`` (x @ W1 + b1) -> LINEAR: W' = W1 @ W2, b' = b1 @ W2 + b2, only where that does not
  grow the product (n*k <= n*m + m*k for W1 n x m, W2 m x k: PCA(50 of 200) -> a linear model)

StandardScaler -> PCA -> LogisticRegression then reads each row once and multiplies it by one
n x k matrix. The folded product rounds differently from the chain: per output the two differ by
at most ``gamma_c * S``, S the sum of the absolute terms of the expanded product, the constant c
derived in docs/exactness.md ("Folded linear chains"); tests/test_passes_precision.py checks it.

Never folded: a LINEAR whose output reaches anything but a linear model's scores and links
(``reaches_only_scores``): a value that reaches a tree's threshold, a binarizer, a bin index, a
one-hot... would turn a moved bit into a different branch (a 3.7e-7 change in XGBoost's input
moved its probabilities by 0.073). A ``CENTER_SCALE`` or ``AFFINE`` whose shift is far larger
than its scale (|c_j / s_j| or |d_j| above 2**20) is left alone too: the folded bias cancels
against x @ W' there, and the chain's subtraction keeps bits the folded sum would lose."""

from __future__ import annotations

import dataclasses

import numpy as np

from peregrine.ir import Graph, Node, Op

# ops whose output is a continuous function of their input (a moved bit moves the result by
# at most a bounded multiple of it): a folded value may flow through them to an output
SMOOTH = frozenset({Op.LINEAR, Op.AFFINE, Op.CENTER_SCALE, Op.LINK, Op.BINARY_PROBA,
                    Op.NORMALIZE, Op.SELECT, Op.CONCAT, Op.CLIP, Op.WEIGHTED_SUM,
                    Op.LOG_ADD_EXP})
CONTINUOUS_UFUNCS = frozenset({"log1p", "expm1", "exp", "log", "sqrt", "absolute", "square",
                               "negative", "sin", "cos", "tanh", "arcsinh", "log2", "log10",
                               "exp2", "cbrt", "reciprocal"})
DECISIONS = frozenset({Op.ARGMAX, Op.THRESHOLD})
# the largest shift-to-scale ratio folded: beyond it the folded bias cancels more than 20 bits
MAX_SHIFT_RATIO = 2.0 ** 20
# extended precision for the folded constants (80-bit on x86-64; float64 where longdouble is
# double: the bound in docs/exactness.md assumes only float64)
_EXT = np.longdouble
_EXT_LIMIT = 2 * 10 ** 7  # multiply-adds above which the W1 @ W2 fold uses float64 BLAS


def reaches_only_scores(name: str, readers: dict[str, list[Node]],
                        smooth: frozenset = SMOOTH) -> bool:
    """Whether every path from node ``name`` to an output goes through continuous ops only
    (``smooth``, and the continuous ufuncs), ending in graph outputs or in an ARGMAX /
    THRESHOLD that is itself only an output (the final decision, whose label may change only
    where the scores are within rounding of a tie)."""
    seen, stack = set(), [name]
    while stack:
        for r in readers.get(stack.pop(), ()):
            if r.name in seen:
                continue
            seen.add(r.name)
            if r.op in DECISIONS:
                if readers.get(r.name):
                    return False  # a label that feeds further computation
                continue
            if r.op is Op.UFUNC and r.attrs.name in CONTINUOUS_UFUNCS or r.op in smooth:
                stack.append(r.name)
                continue
            return False  # a tree, bin index, binarizer, lookup...
    return True


def _readers(graph: Graph) -> dict[str, list[Node]]:
    out: dict[str, list[Node]] = {}
    for n in graph.nodes:
        for i in dict.fromkeys(n.inputs):
            out.setdefault(i, []).append(n)
    return out


def _per_row(v, n: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(v, np.float64).reshape(-1), (n,)).copy()


def _fold(prod: Node, w: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(W', b') of LINEAR(W, b) applied to ``prod``'s output, from ``prod``'s input; None where
    ``prod`` is not foldable."""
    n = w.shape[0]
    if prod.op is Op.CENTER_SCALE:
        c, s = _per_row(prod.attrs.center, n), _per_row(prod.attrs.scale, n)
        if not (np.all(np.isfinite(c)) and np.all(np.isfinite(s)) and np.all(s != 0)):
            return None
        if np.any(np.abs(c) > MAX_SHIFT_RATIO * np.abs(s)):
            return None
        w2 = w / s[:, None]  # one correctly rounded division per weight
        b2 = (b.astype(_EXT) - (c.astype(_EXT) / s.astype(_EXT)) @ w.astype(_EXT))
        return w2, b2.astype(np.float64)
    if prod.op is Op.AFFINE:
        a, d = _per_row(prod.attrs.scale, n), _per_row(prod.attrs.shift, n)
        if not (np.all(np.isfinite(a)) and np.all(np.isfinite(d))):
            return None
        if np.any(np.abs(d) > MAX_SHIFT_RATIO):
            return None
        w2 = a[:, None] * w
        b2 = b.astype(_EXT) + d.astype(_EXT) @ w.astype(_EXT)
        return w2, b2.astype(np.float64)
    if prod.op is Op.LINEAR:
        w1, b1 = np.asarray(prod.attrs.weight, np.float64), np.asarray(prod.attrs.bias,
                                                                        np.float64)
        n1, m, k = w1.shape[0], w1.shape[1], w.shape[1]
        if n1 * k > n1 * m + m * k:
            return None  # a bottleneck: the two products are cheaper than the folded one
        if not (np.all(np.isfinite(w1)) and np.all(np.isfinite(b1))):
            return None
        ext = _EXT if n1 * m * k <= _EXT_LIMIT else np.float64
        w2 = (w1.astype(ext) @ w.astype(ext)).astype(np.float64)
        b2 = (b1.astype(_EXT) @ w.astype(_EXT) + b.astype(_EXT)).astype(np.float64)
        return w2, b2
    return None


def fold_linear(graph: Graph) -> tuple[Graph, str]:
    """Fold scaler -> linear, affine -> linear and linear -> linear chains into one LINEAR
    wherever the result reaches only scores, links and the final decision."""
    folded: list[str] = []
    while True:
        by_name, readers = graph.by_name, _readers(graph)
        for n in graph.toposort():
            if n.op is not Op.LINEAR or not reaches_only_scores(n.name, readers):
                continue
            prod = by_name[n.inputs[0]]
            w, b = np.asarray(n.attrs.weight, np.float64), np.asarray(n.attrs.bias, np.float64)
            if not (np.all(np.isfinite(w)) and np.all(np.isfinite(b))):
                continue
            new = _fold(prod, w, b)
            if new is None:
                continue
            # the producer stays where something else reads it (dead_nodes removes it otherwise)
            merged = dataclasses.replace(n, inputs=prod.inputs[:1], attrs=dataclasses.replace(
                n.attrs, weight=new[0], bias=new[1]))
            graph = Graph(tuple(merged if m.name == n.name else m for m in graph.nodes),
                          dict(graph.outputs))
            folded.append(f"{prod.op.value} {prod.name} into {n.name}")
            break
        else:
            break
    if not folded:
        return graph, ""
    from peregrine.passes.cleanup import dead_nodes

    graph, _ = dead_nodes(graph)
    more = f"; and {len(folded) - 6} more" if len(folded) > 6 else ""
    return graph, f"folded {len(folded)} linear step(s): " + "; ".join(folded[:6]) + more
