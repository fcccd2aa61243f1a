"""KNN on the CPU (``ir/semantics/neighbours.py``: KNeighborsClassifier / Regressor), for the
native backend and the torch backend's CPU programs: one LLVM kernel from the rows to the
weighted average of their neighbours' values, rows split over the thread pool, or for big
euclidean models the search (``knn_search.py``); ``runner`` picks. The op's NumPy rule finds
euclidean candidates by one BLAS product and a partition of every (row, fitted row) value,
and builds the other metrics' differences chunk by chunk: 2x and 7x behind scikit-learn's own
search on one thread (docs/native.md).

Per row, every fitted row's distance is computed from the differences, eight fitted rows per
vector (stored ``(chunks, d, 8)``, zero-padded), and the row's k best are kept in a sorted list
as the fitted rows go by in index order: a distance enters only strictly below the k-th and
goes after equal ones, the stable sort's order (ties at the k-th to the lowest index, as the
rule). A chunk none of whose distances is below the k-th is passed over with one comparison.

Bits: each sum is added in the order of the rule's NumPy call (``ir/semantics/row_sums.py``'s
programs, written out term by term: ``usable`` says where; wide or large euclidean models run
the search, ``knn_search.py``, which is faster there, and the metrics no kernel computes the rule):
euclidean ``np.einsum``'s order, minkowski p=2 and manhattan pairwise, the class and weight
sums pairwise; products and sums are separate instructions (this backend's LLVM code fuses only
what is marked for it), so distances, neighbours and outputs are the rule's bits
(``tests/test_knn_kernels.py``). The spec specialises the kernel to the feature count, k, the
output width, the metric and the weighting; the fitted rows and their count are data.
"""

from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from peregrine.ir.semantics.neighbours import kernel_form, metric_form
from peregrine.ir.semantics.row_sums import evaluate, row_sum_program
from peregrine.kernels import jit
from peregrine.kernels.irutil import F64, I1, I64, PTR, gep, splat, void_function
from peregrine.kernels.threads import pool, usable_cpus

LANES = 8  # fitted rows per vector: one AVX-512 register of doubles
GROUP = 4  # query rows sharing each load of a chunk of fitted rows (the tail one at a time)
# Below this many (row, fitted row, feature) terms per thread a hand-off costs more than it saves
PARALLEL_MIN_TERMS = 1 << 20
KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                          ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)


@dataclass(frozen=True)
class KnnKernelSpec:
    """One kernel's parameters and cache identity."""

    metric: str  # a neighbours.kernel_form
    d: int
    k: int
    width: int
    distance_weights: bool
    normalize: bool
    version: str = "knn-3"

    @property
    def key(self) -> str:
        return (f"{self.version}-{self.metric}-d{self.d}-k{self.k}-w{self.width}-"
                f"{int(self.distance_weights)}{int(self.normalize)}")

    @property
    def symbol(self) -> str:
        return "peregrine_knn"

    def build_ir(self, triple: str = "") -> ir.Module:
        module = ir.Module(name=self.symbol)
        module.triple = triple
        _emit(module, self)
        return module


# Euclidean distances: this kernel or the backend's search (knn_search.py: a float32 BLAS
# product, a candidate kernel, the candidates' distances), whichever a cost model fitted to
# measurements says is faster, in ns per query row on m fitted rows of d features (AMD EPYC
# family 26, one thread, k 5, 2,000 query rows): the kernel computes every term at
# (0.045 + 0.0002 d) ns, or streams the fitted rows from memory at 0.1 ns a term once they
# outgrow the cache (past 2^21 values); the search pays 3 us + 50 ns a feature per row (its
# candidates' differences and sort), 0.37 ns a fitted row (the scan) and 0.027 ns a term
# (the sgemm). Measured, kernel s / search s: 5K x 20 0.011 / 0.021, 1K x 64 0.009 / 0.020,
# 3K x 64 0.025 / 0.024, 10K x 32 0.037 / 0.036, 30K x 24 0.066 / 0.073, 1K x 200 0.033 /
# 0.035, 3K x 128 0.056 / 0.040, 100K x 16 0.148 / 0.173, 200K x 16 0.114 / 0.087 (500
# query rows), 20K x 200 1.25 / 0.19.
CACHED_VALUES = 1 << 21


def faster_than_search(m: int, d: int) -> bool:
    kernel = (0.045 + 0.0002 * d) * m * d
    if m * d > CACHED_VALUES:
        kernel = max(kernel, 0.1 * m * d)
    return kernel <= 3000.0 + 50.0 * d + 0.37 * m + 0.027 * m * d


def usable(attrs: Any) -> bool:
    """Whether the kernel computes this KNN node (else the search, knn_search.py, or the
    rule)."""
    return kernel_form(attrs, faster_than_search) is not None


def _program(b: ir.IRBuilder, program: list[int], leaf: Any) -> ir.Value:
    """``leaf(j)`` added in ``program``'s order (``row_sums``): one fadd per step."""
    return evaluate(program, leaf, b.fadd)


def _emit(module: ir.Module, spec: KnnKernelSpec) -> None:
    # void f(const double* x (n, d), i64 r0, i64 r1, const double* v (chunks, d, LANES),
    #        i64 m, const double* values (m, width), double* out (n, width))
    d, k, width = spec.d, spec.k, spec.width
    vec = ir.VectorType(F64, LANES)
    fn, b, loops, entry = void_function(module, spec.symbol,
                                        [PTR, I64, I64, PTR, I64, PTR, PTR], (0, 3, 5, 6))
    x, r0, r1, v, m, values, out = fn.args
    zero, one = ir.Constant(I64, 0), ir.Constant(I64, 1)
    f0, f1 = ir.Constant(F64, 0.0), ir.Constant(F64, 1.0)
    kk = ir.Constant(I64, k)
    with b.goto_block(entry):
        b.position_at_start(entry)
        # per row of a group: its k best, ascending, and how many are filled
        bd_all = b.alloca(F64, GROUP * k, name="best_d")
        bi_all = b.alloca(I64, GROUP * k, name="best_i")
        cnt_all = b.alloca(I64, GROUP, name="count")
        wt = b.alloca(F64, k, name="weights")
        acc = b.alloca(F64, width, name="acc")
    place = loops.var(I64, None, "place")

    def slot(base: ir.Value, i: ir.Value, typ: ir.Type = F64) -> ir.Value:
        return gep(b, base, [i], typ)

    def intrinsic(name: str, ret: ir.Type, args: list) -> ir.Value:
        f = module.globals.get(name)
        if f is None:
            f = ir.Function(module, ir.FunctionType(ret, [a.type for a in args]), name=name)
        return b.call(f, args)

    einsum = row_sum_program("einsum", d, np.float64)
    pairwise = row_sum_program("pairwise", d, np.float64)

    def distances(xrow: ir.Value, vbase: ir.Value) -> ir.Value:
        """The LANES distances of the row to one chunk of fitted rows."""
        def diff(j: int) -> ir.Value:
            xj = b.load(slot(xrow, ir.Constant(I64, j)), typ=F64)
            xs = b.shuffle_vector(b.insert_element(ir.Constant(vec, ir.Undefined), xj,
                                                   ir.Constant(ir.IntType(32), 0)),
                                  ir.Constant(vec, ir.Undefined), splat(ir.IntType(32), LANES, 0))
            vj = b.load(gep(b, vbase, [ir.Constant(I64, j * LANES)], F64), typ=vec, align=8)
            return b.fsub(xs, vj)

        def square(j: int) -> ir.Value:
            t = diff(j)
            return b.fmul(t, t)

        def absolute(j: int) -> ir.Value:
            return intrinsic("llvm.fabs.v8f64", vec, [diff(j)])

        if spec.metric == "euclidean":
            return intrinsic("llvm.sqrt.v8f64", vec, [_program(b, einsum, square)])
        if spec.metric == "minkowski2":
            return intrinsic("llvm.sqrt.v8f64", vec, [_program(b, pairwise, square)])
        if spec.metric == "chebyshev":  # (no NaN reaches it: the input boundary refuses NaN)
            top = absolute(0)
            for j in range(1, d):
                a = absolute(j)
                top = b.select(b.fcmp_ordered(">", a, top), a, top)
            return top
        return _program(b, pairwise, absolute)  # manhattan

    def lists(g: int) -> tuple[ir.Value, ir.Value, ir.Value]:
        """Row ``g`` of the group's (best distances, best indices, count)."""
        return (gep(b, bd_all, [ir.Constant(I64, g * k)], F64),
                gep(b, bi_all, [ir.Constant(I64, g * k)], I64),
                gep(b, cnt_all, [ir.Constant(I64, g)], I64))

    def insert(g: int, dv: ir.Value, j: ir.Value) -> None:
        """The sorted list's insertion (see the module's docstring)."""
        bd, bi, cnt = lists(g)
        n_now = b.load(cnt, typ=I64)
        full = b.icmp_signed(">=", n_now, kk)
        worst = b.load(slot(bd, ir.Constant(I64, k - 1)), typ=F64)
        enters = b.or_(b.not_(full), b.fcmp_ordered("<", dv, worst))
        with b.if_then(enters):
            last = b.select(full, ir.Constant(I64, k - 1), n_now)
            b.store(b.select(full, n_now, b.add(n_now, one)), cnt)
            b.store(last, place)

            def shift(t: ir.Value) -> None:  # q = last - t, from last down to 1
                q = b.sub(last, t)
                prev = b.sub(q, one)
                pd = b.load(slot(bd, prev), typ=F64)
                with b.if_then(b.fcmp_ordered(">", pd, dv)):
                    b.store(pd, slot(bd, q))
                    b.store(b.load(slot(bi, prev, I64), typ=I64), slot(bi, q, I64))
                    b.store(prev, place)
            loops.range(zero, last, one, shift, "shift")
            at = b.load(place, typ=I64)
            b.store(dv, slot(bd, at))
            b.store(j, slot(bi, at, I64))

    chunks = b.sdiv(b.add(m, ir.Constant(I64, LANES - 1)), ir.Constant(I64, LANES))

    def rows(r: ir.Value, count: int) -> None:
        """Rows r .. r + count - 1 together: each chunk of fitted rows is loaded once for them
        (its distances to the rows are independent sums, computed side by side)."""
        xrows = [gep(b, x, [b.mul(b.add(r, ir.Constant(I64, g)), ir.Constant(I64, d))], F64)
                 for g in range(count)]
        for g in range(count):
            bd, _, cnt = lists(g)
            b.store(zero, cnt)
            # +inf in the unfilled list: the chunk's pre-check and the insertion compare with
            # the k-th before it is filled (their "not full" branch decides then)
            for i in range(k):
                b.store(ir.Constant(F64, float("inf")), slot(bd, ir.Constant(I64, i)))

        def chunk(c: ir.Value) -> None:
            vbase = gep(b, v, [b.mul(c, ir.Constant(I64, d * LANES))], F64)
            dists = [distances(xrows[g], vbase) for g in range(count)]
            for g, dist in enumerate(dists):
                bd, _, cnt = lists(g)
                # one comparison passes over a chunk with nothing below the k-th
                worst = b.load(slot(bd, ir.Constant(I64, k - 1)), typ=F64)
                below = b.fcmp_ordered("<", dist, b.shuffle_vector(
                    b.insert_element(ir.Constant(vec, ir.Undefined), worst,
                                     ir.Constant(ir.IntType(32), 0)),
                    ir.Constant(vec, ir.Undefined), splat(ir.IntType(32), LANES, 0)))
                any_below = b.icmp_unsigned("!=", b.bitcast(below, ir.IntType(LANES)),
                                            ir.Constant(ir.IntType(LANES), 0))
                filling = b.icmp_signed("<", b.load(cnt, typ=I64), kk)
                with b.if_then(b.or_(any_below, filling)):
                    for lane in range(LANES):
                        j = b.add(b.mul(c, ir.Constant(I64, LANES)), ir.Constant(I64, lane))
                        with b.if_then(b.icmp_signed("<", j, m)):
                            insert(g, b.extract_element(dist, ir.Constant(ir.IntType(32),
                                                                          lane)), j)
        loops.range(zero, chunks, one, chunk, "chunks")
        for g in range(count):
            finish(g, b.add(r, ir.Constant(I64, g)))

    def finish(g: int, r: ir.Value) -> None:
        # neighbors._base._get_weights, then scikit-learn's accumulation in neighbour order
        bd, bi, _ = lists(g)
        flag = ir.Constant(I1, 0)
        for i in range(k):
            ci = ir.Constant(I64, i)
            if spec.distance_weights:
                w = b.fdiv(f1, b.load(slot(bd, ci), typ=F64))
                is_inf = b.fcmp_ordered("==", intrinsic("llvm.fabs.f64", F64, [w]),
                                        ir.Constant(F64, float("inf")))
                flag = b.or_(flag, is_inf)
            else:
                w = f1
            b.store(w, slot(wt, ci))
        if spec.distance_weights:  # a zero distance: those neighbours weigh 1, the others 0
            with b.if_then(flag):
                for i in range(k):
                    w = b.load(slot(wt, ir.Constant(I64, i)), typ=F64)
                    is_inf = b.fcmp_ordered("==", intrinsic("llvm.fabs.f64", F64, [w]),
                                            ir.Constant(F64, float("inf")))
                    b.store(b.select(is_inf, f1, f0), slot(wt, ir.Constant(I64, i)))
        for col in range(width):
            b.store(f0, slot(acc, ir.Constant(I64, col)))
        for i in range(k):
            ci = ir.Constant(I64, i)
            w = b.load(slot(wt, ci), typ=F64)
            vrow = gep(b, values, [b.mul(b.load(slot(bi, ci, I64), typ=I64),
                                         ir.Constant(I64, width))], F64)
            for col in range(width):
                cc = ir.Constant(I64, col)
                term = b.fmul(w, b.load(slot(vrow, cc), typ=F64))
                b.store(b.fadd(b.load(slot(acc, cc), typ=F64), term), slot(acc, cc))
        orow = gep(b, out, [b.mul(r, ir.Constant(I64, width))], F64)
        sums = [b.load(slot(acc, ir.Constant(I64, col)), typ=F64) for col in range(width)]
        if spec.normalize:
            total = _program(b, row_sum_program("pairwise", width, np.float64),
                             lambda j: sums[j])
            total = b.select(b.fcmp_ordered("==", total, f0), f1, total)
        else:
            ws = [b.load(slot(wt, ir.Constant(I64, i)), typ=F64) for i in range(k)]
            total = _program(b, row_sum_program("pairwise", k, np.float64), lambda j: ws[j])
        for col in range(width):
            b.store(b.fdiv(sums[col], total), slot(orow, ir.Constant(I64, col)))

    group = ir.Constant(I64, GROUP)
    grouped = b.add(r0, b.mul(b.sdiv(b.sub(r1, r0), group), group))
    loops.range(r0, grouped, group, lambda r: rows(r, GROUP), "groups")
    loops.range(grouped, r1, one, lambda r: rows(r, 1), "rows")
    b.ret_void()


def chunked(vectors: Any) -> np.ndarray:
    """The fitted rows as ``(chunks, d, LANES)`` float64, zero-padded."""
    vs = np.asarray(vectors, np.float64)
    m, d = vs.shape
    padded = np.zeros((-(-m // LANES) * LANES, d))
    padded[:m] = vs
    return np.ascontiguousarray(padded.reshape(-1, LANES, d).transpose(0, 2, 1))


class KnnProgram:
    """A KNN node's tables in the kernel's form, and the call over rows."""

    def __init__(self, attrs: Any) -> None:
        a = attrs
        self.vectors = chunked(a.vectors)
        self.m, self.d = np.shape(a.vectors)
        self.values = np.ascontiguousarray(a.values, dtype=np.float64)
        self.width = int(self.values.shape[1])
        spec = KnnKernelSpec(metric_form(a) or "", int(self.d), int(a.k),
                             self.width, a.weights == "distance", bool(a.normalize))
        self._fn = KERNEL(jit.kernel_address(spec)[0])

    def __call__(self, X: np.ndarray, n_threads: int) -> np.ndarray:
        x = np.ascontiguousarray(X, dtype=np.float64)
        n = x.shape[0]
        out = np.empty((n, self.width), dtype=np.float64)
        terms = n * self.m * max(self.d, 1)
        threads = max(1, min(n_threads, n, terms // PARALLEL_MIN_TERMS))
        args = (self.vectors.ctypes.data, self.m, self.values.ctypes.data, out.ctypes.data)
        if threads == 1:
            self._fn(x.ctypes.data, 0, n, *args)
            return out
        bounds = [n * i // threads for i in range(threads + 1)]

        def part(i: int) -> None:
            self._fn(x.ctypes.data, bounds[i], bounds[i + 1], *args)

        jobs = [pool(threads).submit(part, i) for i in range(1, threads)]
        part(0)
        for job in jobs:
            job.result()
        return out


# each node's tables in kernel form, built on its first run and dropped with its attributes
_PROGRAMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def program(attrs: Any) -> KnnProgram:
    prog = _PROGRAMS.get(attrs)
    if prog is None:
        prog = _PROGRAMS[attrs] = KnnProgram(attrs)
    return prog


def threads(options: Any) -> int:
    """CompileOptions.n_threads, else the CPUs this process may run on (as the forests)."""
    if options is not None and options.n_threads:
        return int(options.n_threads)
    return usable_cpus()


def runner(attrs: Any, n_threads: int) -> Any:
    """``rows -> output`` for the KNN node ``attrs`` on ``n_threads`` threads: this kernel,
    the search (``knn_search.py``), or None for the metrics neither computes (cosine,
    minkowski p other than 1 and 2: the rule's). Tables are built on the first call and kept
    with the node's attributes."""
    from peregrine.kernels import knn_search  # (it imports nothing of this module)

    if usable(attrs):
        prog = program(attrs)
        return lambda x: prog(np.asarray(x), n_threads)
    if knn_search.usable(attrs):
        return knn_search.search(attrs, n_threads)
    return None
