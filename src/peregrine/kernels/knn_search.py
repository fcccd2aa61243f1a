"""Native euclidean KNN on wide rows and big fitted sets, where a search is faster than
``knn.py``'s every distance from the differences (``knn.faster_than_search``):
the rule's ``neighbours.nearest``, its candidate step done by a kernel, in two tiers.

The rule's step writes the expanded squared distances ``((x.v * -2) + |x|^2) + |v|^2`` in
three passes over the (rows, fitted rows) product, partitions every row
(``np.argpartition``, about half of its time on one thread) and checks every value's
finiteness in a fifth pass. The candidate kernel reads the BLAS product once: per row it forms
each expanded distance, keeps the K smallest in a sorted list (a vector of values checked
against the K-th with one comparison, as ``knn.py``), and notes any value that is not
finite. Only the candidates' distances are then computed, from their differences (the rule's
code: its bits), and the k nearest of them are the answer where a lower bound on every other
fitted row's distance is above the k-th's; which of equal values became candidates does not
matter.

1. **float32 tier.** The product dominates (OpenBLAS's dgemm: 0.29 s of 0.34 s for 2,000
   rows against 20K fitted rows of 200 features, AMD EPYC family 26, one thread), and it only
   chooses candidates: sgemm takes half the time. Rows and fitted rows are centred on the
   fitted rows' mean (distances do not change; the expanded form's error scales with the
   norms) and rounded to float32; the bound then accounts for that rounding as well as for the
   float32 arithmetic (``lower32``).
2. **float64 tier**, for the rows whose float32 bound does not separate the k-th neighbour
   (near ties; norms outside float32's comfortable range): the same step on the float64 rows,
   with the rule's own expanded form and bound (``neighbours.expanded_lower``);
3. and for the rows that fail that too, every distance (the rule's ``redo``).
"""

from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from peregrine.ir.semantics.neighbours import (
    EPS,
    ERROR_BOUND,
    EXTRA_CANDIDATES,
    expanded_lower,
    nearest,
)
from peregrine.kernels import jit
from peregrine.kernels.irutil import FLOATS, I1, I8, I64, PTR, gep, splat, void_function
from peregrine.kernels.threads import pool

LANES = {"float32": 16, "float64": 8}  # one AVX-512 register
# Below this many product values per thread a hand-off costs more than it saves
PARALLEL_MIN_VALUES = 1 << 18
KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                          ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                          ctypes.c_void_p, ctypes.c_void_p)
EPS32 = float(np.finfo(np.float32).eps)
# The float32 tier serves rows whose |x|^2 + max |v|^2 (centred) lies in this window: far from
# float32's overflow (3.4e38, with room for the sums of d terms) and from its subnormals
# (1.2e-38), whose absolute rounding the bound below does not count.
NORMS32 = (1e-12, 1e30)
PROBE = 8  # where the float64 tier serves, every PROBE-th chunk tries float32 again


@dataclass(frozen=True)
class CandidatesSpec:
    """The candidate kernel for one candidate count and element type."""

    n_cand: int
    dtype: str = "float64"
    version: str = "knn-cand-2"

    @property
    def key(self) -> str:
        return f"{self.version}-K{self.n_cand}-{self.dtype}"

    @property
    def symbol(self) -> str:
        return "peregrine_knn_candidates"

    def build_ir(self, triple: str = "") -> ir.Module:
        module = ir.Module(name=self.symbol)
        module.triple = triple
        _emit(module, self)
        return module


def _emit(module: ir.Module, spec: CandidatesSpec) -> None:
    # void f(const T* g (rows, m): x.v, i64 r0, i64 r1, i64 m, const T* xx (rows),
    #        const T* vv (m), i64* cand (rows, K), T* bound (rows), i8* finite (rows))
    K, T, lanes = spec.n_cand, FLOATS[spec.dtype], LANES[spec.dtype]
    vec, mask_int = ir.VectorType(T, lanes), ir.IntType(lanes)
    suffix = {"float32": "f32", "float64": "f64"}[spec.dtype]
    i32 = ir.IntType(32)
    fn, b, loops, entry = void_function(module, spec.symbol,
                                        [PTR, I64, I64, I64, PTR, PTR, PTR, PTR, PTR],
                                        (0, 4, 5, 6, 7, 8))
    g, r0, r1, m, xx, vv, cand, bound, finite = fn.args
    zero, one, kk = ir.Constant(I64, 0), ir.Constant(I64, 1), ir.Constant(I64, K)
    inf = ir.Constant(T, float("inf"))
    with b.goto_block(entry):
        b.position_at_start(entry)
        bd = b.alloca(T, K, name="best_d")
        bi = b.alloca(I64, K, name="best_i")
    cnt = loops.var(I64, None, "count")
    bad = loops.var(I1, None, "bad")
    place = loops.var(I64, None, "place")

    def fabs(x: ir.Value) -> ir.Value:
        name = f"llvm.fabs.{f'v{lanes}{suffix}' if x.type == vec else suffix}"
        f = module.globals.get(name) or ir.Function(module, ir.FunctionType(x.type, [x.type]),
                                                    name=name)
        return b.call(f, [x])

    def broadcast(s: ir.Value) -> ir.Value:
        return b.shuffle_vector(b.insert_element(ir.Constant(vec, ir.Undefined), s,
                                                 ir.Constant(i32, 0)),
                                ir.Constant(vec, ir.Undefined), splat(i32, lanes, 0))

    def insert(dv: ir.Value, j: ir.Value) -> None:
        """Into the ascending list when below its K-th or while it fills."""
        n_now = b.load(cnt, typ=I64)
        full = b.icmp_signed(">=", n_now, kk)
        worst = b.load(gep(b, bd, [ir.Constant(I64, K - 1)], T), typ=T)
        with b.if_then(b.or_(b.not_(full), b.fcmp_ordered("<", dv, worst))):
            last = b.select(full, ir.Constant(I64, K - 1), n_now)
            b.store(b.select(full, n_now, b.add(n_now, one)), cnt)
            b.store(last, place)

            def shift(t: ir.Value) -> None:  # q = last - t, from last down to 1
                q = b.sub(last, t)
                prev = b.sub(q, one)
                pd = b.load(gep(b, bd, [prev], T), typ=T)
                with b.if_then(b.fcmp_ordered(">", pd, dv)):
                    b.store(pd, gep(b, bd, [q], T))
                    b.store(b.load(gep(b, bi, [prev], I64), typ=I64), gep(b, bi, [q], I64))
                    b.store(prev, place)
            loops.range(zero, last, one, shift, "shift")
            at = b.load(place, typ=I64)
            b.store(dv, gep(b, bd, [at], T))
            b.store(j, gep(b, bi, [at], I64))

    def expanded(gv: ir.Value, vvv: ir.Value, two: ir.Value, x2: ir.Value) -> ir.Value:
        # the rule's ``approx *= -2; approx += xx; approx += vv``: three roundings
        return b.fadd(b.fadd(b.fmul(gv, two), x2), vvv)

    def row(r: ir.Value) -> None:
        b.store(zero, cnt)
        b.store(ir.Constant(I1, 0), bad)
        for i in range(K):  # +inf: the pre-check compares with the K-th before it is filled
            b.store(inf, gep(b, bd, [ir.Constant(I64, i)], T))
        grow = gep(b, g, [b.mul(r, m)], T)
        x2 = b.load(gep(b, xx, [r], T), typ=T)
        x2v, minus2 = broadcast(x2), broadcast(ir.Constant(T, -2.0))
        full_chunks = b.sdiv(m, ir.Constant(I64, lanes))

        def chunk(c: ir.Value) -> None:
            j0 = b.mul(c, ir.Constant(I64, lanes))
            a = expanded(b.load(gep(b, grow, [j0], T), typ=vec, align=4),
                         b.load(gep(b, vv, [j0], T), typ=vec, align=4), minus2, x2v)
            fin = b.fcmp_ordered("<", fabs(a), broadcast(inf))
            not_all = b.icmp_unsigned("!=", b.bitcast(fin, mask_int),
                                      ir.Constant(mask_int, (1 << lanes) - 1))
            b.store(b.or_(b.load(bad, typ=I1), not_all), bad)
            worst = b.load(gep(b, bd, [ir.Constant(I64, K - 1)], T), typ=T)
            below = b.fcmp_ordered("<", a, broadcast(worst))
            any_below = b.icmp_unsigned("!=", b.bitcast(below, mask_int),
                                        ir.Constant(mask_int, 0))
            filling = b.icmp_signed("<", b.load(cnt, typ=I64), kk)
            with b.if_then(b.or_(any_below, filling)):
                for lane in range(lanes):
                    insert(b.extract_element(a, ir.Constant(i32, lane)),
                           b.add(j0, ir.Constant(I64, lane)))
        loops.range(zero, full_chunks, one, chunk, "chunks")

        def tail(j: ir.Value) -> None:
            a = expanded(b.load(gep(b, grow, [j], T), typ=T),
                         b.load(gep(b, vv, [j], T), typ=T), ir.Constant(T, -2.0), x2)
            not_fin = b.not_(b.fcmp_ordered("<", fabs(a), inf))
            b.store(b.or_(b.load(bad, typ=I1), not_fin), bad)
            insert(a, j)
        loops.range(b.mul(full_chunks, ir.Constant(I64, lanes)), m, one, tail, "tail")

        crow = gep(b, cand, [b.mul(r, kk)], I64)
        for i in range(K):
            ci = ir.Constant(I64, i)
            b.store(b.load(gep(b, bi, [ci], I64), typ=I64), gep(b, crow, [ci], I64))
        # the K-th smallest: the largest candidate (the list is full, m > K)
        b.store(b.load(gep(b, bd, [ir.Constant(I64, K - 1)], T), typ=T),
                gep(b, bound, [r], T))
        b.store(b.select(b.load(bad, typ=I1), ir.Constant(I8, 0), ir.Constant(I8, 1)),
                gep(b, finite, [r], I8))

    loops.range(r0, r1, one, row, "rows")
    b.ret_void()


class Candidates:
    """The candidate kernel for one element type, rows split over threads."""

    def __init__(self, n_cand: int, dtype: str, threads: int) -> None:
        self.n_cand, self.dtype, self.threads = n_cand, np.dtype(dtype), threads
        self._fn = KERNEL(jit.kernel_address(CandidatesSpec(n_cand, dtype))[0])

    def __call__(self, prod: np.ndarray, xx: np.ndarray, vv: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(candidates, bound: the K-th smallest expanded value, all finite) per row of the
        product ``prod`` (rows, m) of this element type."""
        rows, m = prod.shape
        prod = np.ascontiguousarray(prod, dtype=self.dtype)
        xx = np.ascontiguousarray(xx, dtype=self.dtype)
        cand = np.empty((rows, self.n_cand), dtype=np.int64)
        bound, finite = np.empty(rows, dtype=self.dtype), np.empty(rows, dtype=np.uint8)
        args = (m, xx.ctypes.data, vv.ctypes.data, cand.ctypes.data, bound.ctypes.data,
                finite.ctypes.data)
        threads = max(1, min(self.threads, rows, rows * m // PARALLEL_MIN_VALUES))
        bounds = [rows * i // threads for i in range(threads + 1)]

        def part(i: int) -> None:
            self._fn(prod.ctypes.data, bounds[i], bounds[i + 1], *args)

        jobs = [pool(threads).submit(part, i) for i in range(1, threads)]
        part(0)
        for job in jobs:
            job.result()
        return cand, bound.astype(np.float64), finite.astype(bool)


class Search:
    """One KNN node's euclidean search (the module's two tiers)."""

    def __init__(self, attrs: Any, threads: int) -> None:
        self.attrs, self.threads = attrs, threads
        v = self.vectors = np.ascontiguousarray(attrs.vectors, dtype=np.float64)
        self.n_cand = min(v.shape[0], 2 * int(attrs.k) + EXTRA_CANDIDATES)  # nearest's
        self.vv = np.einsum("ij,ij->i", v, v)
        self.cand64 = Candidates(self.n_cand, "float64", threads)
        # float32 tier: the fitted rows centred and rounded once
        self.mean = v.mean(axis=0)
        with np.errstate(over="ignore", invalid="ignore"):
            v32 = (v - self.mean).astype(np.float32)
        self.v32 = np.ascontiguousarray(v32)
        self.vv32 = np.einsum("ij,ij->i", v32, v32)
        vv32_max = float(self.vv32.max(initial=0.0))
        self.v32_norm = float(np.sqrt(vv32_max))
        self.use32 = bool(np.isfinite(v32).all()) and vv32_max < NORMS32[1]
        self.cand32 = Candidates(self.n_cand, "float32", threads) if self.use32 else None
        # which tier serves (``candidates``): a running share of the float32 tier's rows
        # handed on; a heuristic only (answers are the same either way), so calls from
        # several threads may update it without a lock
        self._misses32, self._chunks, self._rows32, self._failed32 = 0.0, 0, 0, 0

    def candidates64(self, xb: np.ndarray, n_cand: int) -> tuple[np.ndarray, np.ndarray]:
        """``neighbours.expanded_candidates``' contract, its candidates from the kernel."""
        xx = np.einsum("ij,ij->i", xb, xb)
        with np.errstate(over="ignore", invalid="ignore"):
            prod = xb @ self.vectors.T
        cand, bound, finite = self.cand64(prod, xx, self.vv)
        return cand, expanded_lower(bound, finite, xx, float(self.vv.max()), xb.shape[1])

    def candidates(self, xb: np.ndarray, n_cand: int) -> tuple[np.ndarray, np.ndarray]:
        """The float32 tier while it answers most rows, else the float64 one. Where the
        float32 bound is too loose for the data (tight clusters far from the fitted rows'
        mean: their neighbours' distances are within float32's error of the norms) each of
        its chunks would cost an sgemm more than the float64 tier alone; such data goes to
        the float64 tier, with one chunk in ``PROBE`` still tried in float32."""
        if self._rows32:  # the last float32 chunk's outcome
            self._misses32 = 0.5 * self._misses32 + 0.5 * self._failed32 / self._rows32
        self._chunks += 1
        if self._misses32 > 0.5 and self._chunks % PROBE:
            self._rows32 = 0
            return self.candidates64(xb, n_cand)
        self._rows32, self._failed32 = len(xb), 0
        return self.candidates32(xb, n_cand)

    def _redo(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The float64 tier for the rows the float32 one did not answer."""
        if self._rows32:  # (not the rows a float64 chunk hands on)
            self._failed32 = len(x)
        return self.nearest64(x)

    def candidates32(self, xb: np.ndarray, n_cand: int) -> tuple[np.ndarray, np.ndarray]:
        """The float32 tier's candidates and bound (``lower32``)."""
        assert self.cand32 is not None  # (only where ``use32``)
        with np.errstate(over="ignore", invalid="ignore"):
            x32 = (xb - self.mean).astype(np.float32)
            xx32 = np.einsum("ij,ij->i", x32, x32)
            prod = x32 @ self.v32.T
        cand, bound, finite = self.cand32(prod, xx32, self.vv32)
        return cand, self.lower32(bound, finite, xx32.astype(np.float64), xb.shape[1])

    def lower32(self, bound: np.ndarray, finite: np.ndarray, xx: np.ndarray, d: int
                ) -> np.ndarray:
        """A lower bound on every non-candidate's squared distance, the specification's sum of
        squared differences of the float64 rows, from the float32 tier's ``bound`` (the K-th
        smallest float32 expanded value; the others are at least it), for rows with squared
        centred norm ``xx`` (of the float32 row).

        - The float32 arithmetic: an expanded value errs from the exact squared distance of
          the float32 rows by at most ``ERROR_BOUND (d + 4) eps32 (|x|^2 + max |v|^2)`` (the
          float64 bound's argument, ``neighbours.ERROR_BOUND``, with float32's epsilon).
        - The rounding of the rows: each centred coordinate is within ``eps32`` of the
          difference it rounds (float64's centring adds 2^-53 relative; float32's rounding at
          most 2^-24), so the float32 rows' distance is within ``eps32 (|x| + |v|)`` of the
          float64 rows' (the triangle inequality), taken as ``2 eps32 (|x| + max |v|)``.
        - The specification's own sum errs by ``(d + 4) eps64`` relative, taken as
          ``4 (d + 4) eps64``; each step here is made to round down (16 ulps a step).
        Rows outside ``NORMS32`` or with a value that is not finite get -inf (the next tier)."""
        with np.errstate(over="ignore", invalid="ignore"):
            # each step rounded towards a smaller result: (1 -+ 16 eps) on its terms
            lo, hi = 1.0 - 16.0 * EPS, 1.0 + 16.0 * EPS
            norms = xx + self.v32_norm ** 2
            t = bound * lo - ERROR_BOUND * (d + 4) * EPS32 * norms * hi
            root = np.sqrt(np.maximum(t, 0.0)) * lo - 2.0 * EPS32 * (
                np.sqrt(xx) + self.v32_norm) * hi
            lower = np.maximum(root, 0.0) ** 2 * (1.0 - 4.0 * (d + 4) * EPS - 16.0 * EPS)
        ok = finite & (norms >= NORMS32[0]) & (norms <= NORMS32[1])
        return np.where(ok, lower, -np.inf)

    def nearest64(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a = self.attrs
        return nearest(x, self.vectors, a.metric, float(a.p), int(a.k), self.candidates64)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        a, x = self.attrs, np.asarray(x, dtype=np.float64)
        if not self.use32:
            return a.combine(*self.nearest64(x))
        return a.combine(*nearest(x, self.vectors, a.metric, float(a.p), int(a.k),
                                  self.candidates, redo=self._redo))


# each node's search, built on its first run and dropped with its attributes
_SEARCHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def search(attrs: Any, threads: int) -> Search:
    s = _SEARCHES.get(attrs)
    if s is None or s.threads != threads:
        s = _SEARCHES[attrs] = Search(attrs, threads)
    return s


def usable(attrs: Any) -> bool:
    """Whether this search runs the node: euclidean distances (minkowski p=2 too) with more
    fitted rows than candidates (else the rule computes every distance itself)."""
    euclid = attrs.metric == "euclidean" or (attrs.metric == "minkowski"
                                             and float(attrs.p) == 2.0)
    return euclid and np.shape(attrs.vectors)[0] > 2 * int(attrs.k) + EXTRA_CANDIDATES
