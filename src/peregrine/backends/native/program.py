"""One forest compiled for the native backend: :class:`ForestProgram` holds the packed arrays
and, per compare dtype, a batch kernel and a few-rows kernel, and calls them.

Threads: a kernel takes a row range and a tree range, and ctypes drops the GIL for the call, so
large batches are split over a small thread pool with no Python inside the hot loop. A handful
of rows goes through preallocated buffers whose pointers sit in a cached argument block (a lock
guards them while the kernel runs): one copy in, one ctypes call, one copy out; or through the
machine-code method (kernels/pyentry.py) that does those steps itself.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import threading
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from peregrine.backends.native import epilogue
from peregrine.backends.native.codegen import (
    ARGS,
    CACHE_ROWS_BYTES,
    DESC,
    KernelSpec,
    row_register_capacity,
)
from peregrine.backends.native.layout import TOP_LEVELS, PackedForest, pack
from peregrine.backends.native.schedule import Lanes, Layout, Parallel, Schedule
from peregrine.errors import InputError
from peregrine.ir import Forest
from peregrine.ir.semantics.trees import compute_dtype
from peregrine.kernels import jit
from peregrine.kernels.irutil import FLOATS
from peregrine.kernels.pyentry import make_entry
from peregrine.kernels.threads import pool
from peregrine.options import Precision

KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# Below this many (row, tree) pairs a thread hand-off (tens of microseconds) costs more than it
# saves: one walk is a few nanoseconds.
PARALLEL_MIN_WORK = 1 << 17
# Rows per chunk when the result is float32: a multiple of the heuristic's row blocks (16 or 8
# lanes x 6 or 8 walks; another block size only ends a chunk on a masked partial block), and
# 72 KiB of float64 per thread for two outputs, in L2 between the kernel and the rounding.
NARROW_CHUNK = 4608
# Row chunks per thread in a parallel call (row_chunks), and their smallest size
CHUNKS_PER_THREAD = 8
MIN_CHUNK_ROWS = 2048
INPUT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
FLOAT64 = np.dtype(np.float64)
_ARG = {name: i for i, name in enumerate(ARGS)}
_RE = _ARG["re"]


def row_chunks(n: int, threads: int, block: int) -> list[tuple[int, int]]:
    """Row ranges for ``threads`` threads taking them in turn: about CHUNKS_PER_THREAD each,
    whole SIMD blocks, and at least MIN_CHUNK_ROWS rows (a kernel call costs a few
    microseconds). Fewer rows than two blocks: one range per thread, of masked blocks."""
    if n < 2 * block:
        chunk = -(-n // threads)
    else:
        chunk = max(-(-n // (threads * CHUNKS_PER_THREAD)), min(MIN_CHUNK_ROWS, -(-n // threads)))
        chunk = -(-chunk // block) * block
    return [(s, min(s + chunk, n)) for s in range(0, n, chunk)]


def kernel_spec(packed: PackedForest, schedule: Schedule, x_dtype: np.dtype,
                target: jit.Target, n_features: int) -> KernelSpec:
    by_rows = schedule.lanes is Lanes.ROWS
    cache_rows = (schedule.cache_rows and schedule.vector_width > 1 and by_rows
                  and schedule.row_tile * n_features * packed.cmp_dtype.itemsize
                  <= CACHE_ROWS_BYTES)
    capacity = row_register_capacity(target.isa, schedule.vector_width,
                                     FLOATS[packed.cmp_dtype.name])
    binned = packed.layout in (Layout.BINNED, Layout.OBLIVIOUS_BINNED)
    if binned:  # its walks read inputs only from the quantised tile, one byte per value
        if schedule.row_tile * n_features > CACHE_ROWS_BYTES:
            raise ValueError(f"a binned schedule needs row_tile x features <= "
                             f"{CACHE_ROWS_BYTES} bytes, got {schedule}")
        cache_rows = True
    return KernelSpec(
        layout=packed.layout.value,
        depth=packed.depth if packed.layout is not Layout.SPARSE else 0,
        x_dtype=np.dtype(x_dtype).name,
        cmp_dtype=packed.cmp_dtype.name,
        leaf_dtype=packed.leaf_dtype.name,
        n_outputs=packed.n_outputs,
        value_width=packed.value_width,
        average=packed.average,
        sum_dtype=packed.sum_dtype.name,
        base_first=packed.base_first,
        has_nan=packed.has_nan,
        has_missing_zero=packed.has_missing_zero,
        has_categorical=packed.has_categorical,
        cat_negative_before_trunc=packed.has_categorical and packed.cat_negative_before_trunc,
        isa=target.isa,
        lanes=schedule.lanes.value,
        row_in_registers=not by_rows and 0 < n_features <= capacity,
        cache_rows=cache_rows,
        node_pairs=schedule.node_pairs and packed.cmp_dtype == np.float32,
        top_levels=(min(TOP_LEVELS, packed.depth) if not by_rows and packed.top_stride
                    and schedule.node_pairs and packed.cmp_dtype == np.float32 else 0),
        vector_width=schedule.vector_width,
        interleave=schedule.interleave,
        row_tile=schedule.row_tile,
        tree_tile=schedule.tree_tile,
        loop_order=schedule.loop_order.value,
        # a walk group's byte tile, 16 bytes per feature, in whole register pairs
        binned_regs=2 * -(-n_features // 8) if binned else 0,
        rank_base=packed.rank_base if binned else 0,
    )


@dataclass
class _Variant:
    """What one (schedule, input dtype) runs: kernel, packed arrays, their descriptor."""

    fn: Any
    spec: KernelSpec
    packed: PackedForest
    desc: np.ndarray
    origin: str


class ForestProgram:
    """One forest compiled under a batch schedule and (optionally) a few-rows schedule."""

    def __init__(self, forest: Forest, schedule: Schedule, *, precision: Precision,
                 target: jit.Target, n_threads: int, small: Schedule | None = None,
                 small_rows: int = 0) -> None:
        self.forest, self.schedule, self.small, self.small_rows = (forest, schedule, small,
                                                                   small_rows if small else 0)
        self.target, self.precision, self.n_threads = target, precision, max(1, n_threads)
        self.n_outputs, self.n_trees, self.n_features = (forest.n_outputs, forest.n_trees,
                                                         forest.n_features)
        self._packs: dict[tuple, PackedForest] = {}
        self._variants: dict[tuple[bool, np.dtype], _Variant] = {}

    def cmp_dtype(self, x_dtype: np.dtype) -> np.dtype:
        """Dtype the comparisons (and so the kernel's input) use for inputs of ``x_dtype``:
        inputs of another dtype are converted first, with NumPy's rounding, which is what the
        libraries themselves do (np.asarray(X, float32) in scikit-learn and XGBoost)."""
        if x_dtype not in INPUT_DTYPES:
            x_dtype = np.dtype(np.float64)
        return compute_dtype(self.forest, x_dtype, self.precision)

    def _spec(self, cmp: np.dtype, small: bool) -> tuple[PackedForest, KernelSpec]:
        schedule = self.small if small else self.schedule
        pkey = (cmp, schedule.layout, schedule.reorder_trees)  # what packing depends on
        packed = self._packs.get(pkey)
        if packed is None:
            packed = self._packs[pkey] = pack(self.forest, schedule, cmp, self.target)
        return packed, kernel_spec(packed, schedule, cmp, self.target, self.n_features)

    def variant(self, cmp: np.dtype, small: bool = False) -> _Variant:
        key = (small, cmp)
        v = self._variants.get(key)
        if v is not None:
            return v
        packed, spec = self._spec(cmp, small)
        address, origin = jit.kernel_address(spec, self.target)
        desc = np.zeros(len(DESC), np.int64)
        for i, name in enumerate(DESC):
            if name == "n_cat_words":
                desc[i] = packed.n_cat_words
            elif name == "top_stride":
                desc[i] = packed.top_stride
            elif name == "n_features":
                desc[i] = self.n_features
            else:
                arr = getattr(packed, name)
                assert arr.flags.c_contiguous and arr.size > 0, name
                desc[i] = arr.ctypes.data
        v = self._variants[key] = _Variant(KERNEL(address), spec, packed, desc, origin)
        return v

    def _wanted(self) -> list[tuple[np.dtype, bool]]:
        """One batch kernel (and one few-rows kernel) per compare dtype the input dtypes lead
        to (only float32 for forests the library evaluates in float32)."""
        cmps = sorted({self.cmp_dtype(dt) for dt in INPUT_DTYPES}, key=str)
        return [(cmp, small) for cmp in cmps
                for small in ((False, True) if self.small is not None else (False,))]

    def kernel_specs(self, rows: np.ndarray | None = None) -> list[KernelSpec]:
        """What :meth:`prepare` compiles (or, given ``rows``, what a call on them runs), for
        ``jit.load_all`` to compile at once."""
        if rows is None:
            return [self._spec(cmp, small)[1] for cmp, small in self._wanted()]
        small = rows.shape[0] <= self.small_rows and self.n_trees > 0
        return [self._spec(self.cmp_dtype(rows.dtype), small)[1]]

    def prepare(self) -> None:
        """Compile every kernel now rather than on the first call (inside ``jit.together``:
        at the end of the compile, with the others)."""
        if jit.defer(self.kernel_specs(), self.prepare, self.target):
            return
        for cmp, small in self._wanted():
            self.variant(cmp, small)

    # ------------------------------------------------------------------------ calling --
    def __call__(self, X: np.ndarray, program: np.ndarray, width: int,
                 n_threads: int | None = None,
                 out_dtype: np.dtype = FLOAT64) -> np.ndarray | None:
        """Ensemble output after the fused ``program``: (rows, width) in ``out_dtype``. Returns
        None when this call ran over tree ranges in parallel: the caller then gets raw sums
        from :meth:`raw` instead and applies the epilogue ops as NumPy rules."""
        n = X.shape[0]
        if X.ndim != 2 or X.shape[1] < self.n_features:
            raise InputError(f"forest reads {self.n_features} features, input has shape "
                             f"{X.shape}")
        if n <= self.small_rows and self.n_trees:
            return self._few_rows(X, program, width)
        cmp = self.cmp_dtype(X.dtype)
        if X.dtype != cmp:
            X = X.astype(cmp)
        if X.strides[1] != X.itemsize or X.strides[0] % X.itemsize or X.strides[0] < 0:
            X = np.ascontiguousarray(X)
        threads = self.n_threads if n_threads is None else max(1, n_threads)
        out_dtype = np.dtype(out_dtype)
        if n == 0:
            return np.empty((0, width), out_dtype)
        if self.n_trees == 0:
            return None
        v = self.variant(cmp)
        stride = X.strides[0] // X.itemsize if n > 1 else X.shape[1]
        block = self.schedule.block_rows
        parallel = threads > 1 and n * self.n_trees >= PARALLEL_MIN_WORK
        if parallel and self.splits_trees(v):
            return None
        if out_dtype == FLOAT64:  # the kernel writes the result itself
            out = np.empty((n, max(width, self.n_outputs)), np.float64)
            run = partial(self._run_rows, v, self._args(X.ctypes.data, stride, out, program))
        else:  # float32 result: row chunks through a small float64 buffer, then rounded
            out = np.empty((n, width), out_dtype)
            run = partial(self._run_narrow, v, X, stride, program, out)
        if not parallel:
            run(0, n)
        else:
            chunks = iter(row_chunks(n, threads, block))
            lock = threading.Lock()

            def worker() -> None:
                # threads take the next chunk when done with theirs (not one fixed range each):
                # a thread that loses its core for a while (a busy machine, a server's event
                # loop) no longer leaves the others idle at the end of the call
                while True:
                    with lock:
                        span = next(chunks, None)
                    if span is None:
                        return
                    run(*span)

            jobs = [pool(threads).submit(worker) for _ in range(threads - 1)]
            worker()
            for j in jobs:
                j.result()
        return out[:, :width] if out.shape[1] != width else out

    def _run_rows(self, v: _Variant, base: list, rb: int, re: int) -> None:
        self._run(v, base, rb, re, 0, self.n_trees, 1)

    def _run_narrow(self, v: _Variant, X: np.ndarray, stride: int, program: np.ndarray,
                    out: np.ndarray, rb: int, re: int) -> None:
        """Rows [rb, re) into a narrower ``out`` (float32): the kernel writes float64, so each
        chunk goes through a buffer of NARROW_CHUNK rows and is rounded as NumPy's astype
        rounds. Peak memory is then the result plus one buffer per thread, not the result in
        float64 as well (the libraries return float32 without a float64 copy)."""
        width = out.shape[1]
        buf = np.empty((min(NARROW_CHUNK, re - rb), max(width, self.n_outputs)), np.float64)
        for s in range(rb, re, NARROW_CHUNK):
            e = min(s + NARROW_CHUNK, re)
            # the chunk's rows start at its own first row: the kernel indexes out by row
            base = self._args(X.ctypes.data + s * stride * X.itemsize, stride, buf, program)
            self._run(v, base, 0, e - s, 0, self.n_trees, 1)
            out[s:e] = buf[:e - s, :width]

    def splits_trees(self, v: _Variant) -> bool:
        """Threads take tree ranges into private sums (Treebeard's privatised reduction) only
        when a schedule asks for it explicitly and the sum is float64: adding the partial sums
        reassociates the library's sequential sum (the last bits in float64; far more in
        float32, where it is never done). Otherwise threads take row ranges."""
        return self.schedule.parallel is Parallel.TREES and v.packed.sum_dtype == FLOAT64

    def raw(self, X: np.ndarray, n_threads: int | None = None) -> np.ndarray:
        """sum / divisor + base without the epilogue; threads take row ranges, or tree ranges
        into private sums (``splits_trees``)."""
        cmp = self.cmp_dtype(X.dtype)
        X = np.ascontiguousarray(X, dtype=cmp)
        n, T = X.shape[0], self.n_trees
        v = self.variant(cmp)
        threads = max(1, min(self.n_threads if n_threads is None else n_threads, T))
        no_ops = epilogue.encode([], 1)[0]  # never run (fin=0) but kept alive while pointed at
        if not self.splits_trees(v):
            out = np.zeros((n, self.n_outputs))
            if T and n:
                base = self._args(X.ctypes.data, X.shape[1], out, no_ops)
                bounds = np.linspace(0, n, min(threads, n) + 1).astype(int)
                jobs = [pool(threads).submit(self._run, v, base, int(bounds[i]),
                                              int(bounds[i + 1]), 0, T, 0)
                        for i in range(1, len(bounds) - 1)]
                self._run(v, base, int(bounds[0]), int(bounds[1]), 0, T, 0)
                for j in jobs:
                    j.result()
            elif v.packed.base_first:
                out += v.packed.base
            return self._finish_raw(v, out)
        bounds = np.linspace(0, T, threads + 1).astype(int)
        parts = [np.zeros((n, self.n_outputs)) for _ in range(threads)]
        if T and n:
            bases = [self._args(X.ctypes.data, X.shape[1], p, no_ops) for p in parts]
            jobs = [pool(threads).submit(self._run, v, bases[i], 0, n, int(bounds[i]),
                                          int(bounds[i + 1]), 0) for i in range(1, threads)]
            self._run(v, bases[0], 0, n, int(bounds[0]), int(bounds[1]), 0)
            for j in jobs:
                j.result()
        out = parts[0]
        for p in parts[1:]:
            out += p
        if v.packed.base_first and not (T and n):
            out += v.packed.base
        return self._finish_raw(v, out)

    @staticmethod
    def _finish_raw(v: _Variant, out: np.ndarray) -> np.ndarray:
        """The kernels' raw sums (fin=0) hold the base already when the sum starts from it."""
        if v.packed.average:
            out /= v.packed.divisor
        return out if v.packed.base_first else out + v.packed.base

    def _args(self, x_ptr: int, stride: int, out: np.ndarray, program: np.ndarray) -> list:
        base = [0] * len(ARGS)
        base[_ARG["X"]], base[_ARG["stride"]] = x_ptr, stride
        base[_ARG["out"]], base[_ARG["out_stride"]] = out.ctypes.data, out.shape[1]
        base[_ARG["epilogue"]] = program.ctypes.data
        return base

    def _run(self, v: _Variant, base: list, rb: int, re: int, tb: int, te: int, fin: int):
        args = np.array(base, np.int64)
        args[[_ARG["rb"], _ARG["re"], _ARG["tb"], _ARG["te"], _ARG["fin"]]] = rb, re, tb, te, fin
        args[_ARG["desc"]] = v.desc.ctypes.data
        v.fn(args.ctypes.data)

    def caller(self, program: np.ndarray, width: int, fallback,
               out_dtype: np.dtype = FLOAT64) -> Any:
        """``X -> output`` for one epilogue program, with the online path inlined: every
        attribute lookup costs tens of nanoseconds there, a kernel walk of 500 trees ~2 us.
        The output comes in ``out_dtype`` (the method's dtype: then the runtime's own cast is
        a no-op), rounded from float64 as NumPy's ``astype`` does."""
        if not (self.small_rows and self.n_trees):
            return fallback
        # one slot per compare dtype, found by the input's type number (arrays that crossed a
        # pickle carry dtype objects of their own); assigning into a slot's buffer rounds the
        # input as NumPy would. One-row views are made once: slicing costs ~0.1 us a call.
        slots: dict[np.dtype, tuple] = {}
        for d in INPUT_DTYPES:
            cmp = self.cmp_dtype(d)
            if cmp not in slots:
                slot = self._slot(cmp, program, width)
                slots[cmp] = (*slot, slot[0][:1], slot[1][:1, :width])
        by_num = {d.num: slots[self.cmp_dtype(d)] for d in INPUT_DTYPES}
        rows, nf, re_, f64 = self.small_rows, self.n_features, _RE, out_dtype == np.float64

        def call(X: np.ndarray) -> np.ndarray:
            n = X.shape[0]
            slot = by_num.get(X.dtype.num)
            if slot is not None and n <= rows and X.shape[1] == nf and slot[5].acquire(False):
                xbuf, obuf, args, fn, ptr, lock, _, x1, o1 = slot
                try:
                    if n == 1:
                        x1[...] = X
                    else:
                        xbuf[:n] = X
                    args[re_] = n
                    fn(ptr)
                    out = o1 if n == 1 else obuf[:n, :width]
                    return out.copy() if f64 else out.astype(out_dtype)
                finally:
                    lock.release()
            return fallback(X).astype(out_dtype, copy=False)

        call.slots = slots  # keeps the buffers the cached pointers point into
        call.dtype = np.dtype(out_dtype)  # what every call returns (CompiledModel skips a cast)
        call.native = partial(self._native, by_num, call, width, out_dtype)
        return call

    def _native(self, by_num: dict, call: Any, width: int, out_dtype: np.dtype,
                fallback: Any = None, finite_only: bool = False, name: str = "run",
                doc: str = "", bound: float = math.inf) -> Any:
        """``call`` as a builtin that checks and copies the rows, runs the kernel and makes
        the result in machine code (kernels/pyentry.py), or None where it cannot be made;
        inputs it does not take go to ``fallback`` (default ``call``)."""
        kernels = {}
        for d in INPUT_DTYPES:
            xbuf, obuf, args, fn, *_ = by_num[d.num]
            kernels[d] = (ctypes.cast(fn, ctypes.c_void_p).value, xbuf.dtype == np.float32,
                          args.copy())  # a template: the entry fills its own copy per call
        return make_entry(name, doc, call if fallback is None else fallback,
                          n_features=self.n_features, max_rows=self.small_rows, width=width,
                          out_stride=obuf.shape[1], out_dtype=out_dtype,
                          finite_only=finite_only, kernels=kernels,
                          slots={"x": _ARG["X"], "stride": _ARG["stride"], "re": _RE,
                                 "out": _ARG["out"]}, keep=(call, by_num), bound=bound)

    def _few_rows(self, X: np.ndarray, program: np.ndarray, width: int) -> np.ndarray:
        """A few rows through the tree-lane kernel, with buffers of this call's own."""
        n = X.shape[0]
        xbuf, obuf, args, fn, ptr, _, _ = self._slot(self.cmp_dtype(X.dtype), program, width, n)
        xbuf[:n] = X if X.shape[1] == self.n_features else X[:, :self.n_features]
        args[_RE] = n
        fn(ptr)
        return obuf[:n, :width].copy()

    def _slot(self, cmp: np.dtype, program: np.ndarray, width: int,
              rows: int | None = None) -> tuple:
        """Buffers and the argument block pointing at them, for one input dtype and epilogue
        program; a lock guards them while the kernel runs without the GIL."""
        v = self.variant(cmp, small=True)
        rows = self.small_rows if rows is None else rows
        xbuf = np.zeros((rows, self.n_features), cmp)
        obuf = np.zeros((rows, max(width, self.n_outputs)))
        args = np.array(self._args(xbuf.ctypes.data, self.n_features, obuf, program),
                        np.int64)
        args[[_ARG["rb"], _ARG["tb"], _ARG["te"], _ARG["fin"]]] = 0, 0, self.n_trees, 1
        args[_ARG["desc"]] = v.desc.ctypes.data
        # the slot holds program and v too: its cached pointers point into them
        return xbuf, obuf, args, v.fn, args.ctypes.data, threading.Lock(), (program, v)

    # ------------------------------------------------------------------------ reports --
    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {}
        if self.small is not None:
            info["few rows"] = f"<= {self.small_rows} rows: {self.small}"
        for (small, dt), v in sorted(self._variants.items(), key=lambda kv: str(kv[0])):
            p = v.packed
            which = "few rows" if small else "batch"
            info[f"{which} kernel, {dt.name} compares"] = (
                f"{p.layout.value} layout depth {p.depth}, compare in {p.cmp_dtype.name}, "
                f"leaves {p.leaf_dtype.name}, {p.nbytes / 1024:.0f} KiB packed, kernel "
                f"{v.spec.symbol} ({v.origin})")
        return info

    def state(self) -> dict[str, Any]:
        """JSON-able record of the packed model: layout, dtypes and a digest of every array."""
        packs = {}
        for (dt, _, _), p in self._packs.items():
            h = hashlib.sha256()
            for name, arr in sorted(p.arrays().items()):
                h.update(name.encode())
                h.update(np.ascontiguousarray(arr).tobytes())
            packs[f"{dt.name}/{p.layout.value}"] = {"layout": p.layout.value, "depth": p.depth,
                              "leaf_dtype": p.leaf_dtype.name, "bytes": p.nbytes,
                              "tree_order": p.order.tolist(), "sha256": h.hexdigest()}
        kernels = {f"{'few_rows' if small else 'batch'}/{dt.name}": v.spec.symbol
                   for (small, dt), v in self._variants.items()}
        return {"schedule": self.schedule.to_json(),
                "few_rows_schedule": None if self.small is None else self.small.to_json(),
                "few_rows": self.small_rows, "packed": packs, "kernels": kernels}
