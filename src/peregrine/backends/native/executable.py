"""The native executable: compiled forests plus the rules for the ops around them.

Each TREE_ENSEMBLE node becomes a :class:`ForestProgram` (packed arrays + a batch kernel and a
few-rows kernel per compare dtype). The element-wise ops right after it (links, affine, binary probabilities) run fused in
the kernel (epilogue.py); every other op runs its rule (``ir/semantics``, ``rules.run``) on the kernel's
output, so those ops stay defined in exactly one place.

Threads: a kernel takes a row range and a tree range, and ctypes drops the GIL for the call, so
large batches are split over a small thread pool with no Python inside the hot loop. A handful
of rows goes through preallocated buffers whose pointers sit in a cached argument block (a lock
guards them while the kernel runs): one copy in, one ctypes call, one copy out.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from peregrine.backends.base import Executable
from peregrine.backends.native import epilogue, rules
from peregrine.backends.native.codegen import (
    ARGS,
    CACHE_ROWS_BYTES,
    DESC,
    KernelSpec,
    row_register_capacity,
)
from peregrine.backends.native.fusion import FusedForest, RowRegion, fuse_plan, prologue_regions
from peregrine.backends.native.layout import TOP_LEVELS, PackedForest, pack
from peregrine.backends.native.schedule import Lanes, Layout, Parallel, Schedule
from peregrine.errors import InputError
from peregrine.ir import Forest, Op
from peregrine.ir.semantics.trees import compute_dtype
from peregrine.kernels import jit
from peregrine.kernels.fused import RowKernel, checked_runner, narrow_outputs, row_kernel
from peregrine.kernels.irutil import FLOATS
from peregrine.kernels.pyentry import make_entry
from peregrine.kernels.threads import pool
from peregrine.options import CompileOptions, Precision

KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# Below this many (row, tree) pairs a thread hand-off (tens of microseconds) costs more than it
# saves: one walk is a few nanoseconds.
PARALLEL_MIN_WORK = 1 << 17
# Rows per chunk when the result is float32: a multiple of the heuristic's row blocks (16 or 8
# lanes x 6 or 8 walks; another block size only ends a chunk on a masked partial block), and
# 72 KiB of float64 per thread for two outputs, in L2 between the kernel and the rounding.
NARROW_CHUNK = 4608
INPUT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# Row blocks for a plan of NumPy rules: about 8 MiB of intermediate values per block (a kernel
# SVM's (rows, support vectors) matrix would otherwise take gigabytes for a large batch), and
# enough rows that NumPy's per-call overhead stays small.
BLOCK_BYTES = 1 << 23
MIN_BLOCK_ROWS = 4096
FLOAT64 = np.dtype(np.float64)
_ARG = {name: i for i, name in enumerate(ARGS)}
_RE = _ARG["re"]


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

    def variant(self, cmp: np.dtype, small: bool = False) -> _Variant:
        key = (small, cmp)
        v = self._variants.get(key)
        if v is not None:
            return v
        schedule = self.small if small else self.schedule
        pkey = (cmp, schedule.layout, schedule.reorder_trees)  # what packing depends on
        packed = self._packs.get(pkey)
        if packed is None:
            packed = self._packs[pkey] = pack(self.forest, schedule, cmp, self.target)
        spec = kernel_spec(packed, schedule, cmp, self.target, self.n_features)
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

    def prepare(self) -> None:
        """Compile every kernel now rather than on the first call: one per compare dtype the
        input dtypes lead to (only float32 for forests the library evaluates in float32)."""
        for cmp in {self.cmp_dtype(dt) for dt in INPUT_DTYPES}:
            self.variant(cmp)
            if self.small is not None:
                self.variant(cmp, small=True)

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
            chunk = -(-n // threads)
            if n >= 2 * block:  # whole SIMD blocks per thread; fewer rows: masked blocks
                chunk = -(-chunk // block) * block
            jobs = [pool(threads).submit(run, s, min(s + chunk, n))
                    for s in range(chunk, n, chunk)]
            run(0, min(chunk, n))
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
                doc: str = "") -> Any:
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
                                 "out": _ARG["out"]}, keep=(call, by_num))

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


class NativeExecutable(Executable):
    def __init__(self, spec, options: CompileOptions, programs: dict[str, ForestProgram],
                 reasons: dict[str, str], target: jit.Target) -> None:
        self.spec, self.options, self.programs = spec, options, programs
        self.reasons, self.target = reasons, target
        self._plans: dict[tuple[str, ...], list] = {}
        self._direct: dict[tuple[str, ...], tuple] = {}
        # outputs computed by row-wise pipeline ops only: one fused kernel each (fused.py),
        # compiled now so errors show at compile time
        self._row_kernels: dict[tuple[str, ...], RowKernel | None] = {}
        for output in sorted({m.output for m in spec.methods.values()}):
            self._rows((output,))

    def _rows(self, outputs: tuple[str, ...]) -> RowKernel | None:
        if outputs not in self._row_kernels:
            kernel = None
            if self.options.fused_kernels:
                graph = self.spec.graph
                kernel = row_kernel(graph, [graph.outputs[o] for o in outputs],
                                    narrow_outputs(self.spec, outputs))
                if kernel is not None:
                    kernel.prepare()
            self._row_kernels[outputs] = kernel
        return self._row_kernels[outputs]

    def _plan(self, outputs: tuple[str, ...]) -> list:
        graph = self.spec.graph
        plan = fuse_plan(graph, {graph.outputs[o] for o in outputs})
        if not self.options.fused_kernels:
            return plan
        return prologue_regions(graph, plan, self._prologue_kernel)

    def _prologue_kernel(self, end: str, step: FusedForest) -> tuple | None:
        """The fused row kernel computing forest ``step``'s input ``end``, stored in the dtype
        the forest compares float64 input in (float32 for the libraries that round their
        input to float32 first: the kernel's rounding is NumPy's astype, so the same values
        reach the same comparisons)."""
        region = self.spec.graph.steps([end])
        if all(n.op is Op.SELECT for n in region):
            # nothing computed, only columns taken: NumPy's take then the forest's own cast
            # measured faster (SelectKBest(20 of 500) -> forest, 300K rows: 0.49 s against
            # the kernel's 0.70 s, which loads each 500-wide row whole)
            return None
        dtype = self.programs[step.tree.name].cmp_dtype(FLOAT64)
        kernel = row_kernel(self.spec.graph, [end], [dtype.name])
        if kernel is None:
            return None
        kernel.prepare()
        return kernel, dtype

    def runner(self, output: str) -> Any:
        """The online path for an output computed from one forest of the input: the forest
        and its fused ops through the few-rows kernel, then any remaining ops (argmax, ...)
        as their NumPy rules, without ``run``'s per-call planning."""
        rows = self._rows((output,))
        if rows is not None and not all(rows.supports(d) for d in INPUT_DTYPES):
            return None  # the generic path picks the kernel or the rules per input dtype
        if rows is not None:
            return checked_runner(rows, self.spec, self.options,
                                  partial(default_threads, self.options))
        plan = self._plan_for((output,))
        direct = self._direct.get((output,))
        if direct is not None:
            return direct
        if len(plan) < 3 or plan[0].op is not Op.INPUT or not isinstance(plan[1], FusedForest):
            return None
        step, rest, result = plan[1], plan[2:], self.spec.graph.outputs[output]
        if any(isinstance(n, FusedForest) for n in rest):
            return None
        first = self.programs[step.tree.name].caller(
            step.program, step.width, lambda X: self._forest(step, X), step.dtype)
        x_name, end, options = plan[0].name, step.end, self.options

        def run(X: np.ndarray) -> np.ndarray:
            values = {x_name: X, end: first(X)}
            for node in rest:
                values[node.name] = rules.run(node, [values[i] for i in node.inputs],
                                                   options)
            return values[result]

        return run

    def _plan_for(self, outputs: tuple[str, ...]) -> list:
        plan = self._plans.get(outputs)
        if plan is None:
            plan = self._plans[outputs] = self._plan(outputs)
            if len(plan) == 2 and len(outputs) == 1 and isinstance(plan[1], FusedForest):
                step = plan[1]
                prog = self.programs[step.tree.name]
                dtype = (step.dtype if step.dtype.kind == "i"
                         else self._method_dtype(outputs[0]))
                self._direct[outputs] = prog.caller(
                    step.program, step.width, lambda X, s=step, d=dtype: self._forest(s, X, d),
                    dtype)
        return plan

    def run(self, X: Any, outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
        direct = self._direct.get(outputs)
        if direct is not None and type(X) is np.ndarray:
            return {outputs[0]: direct(X)}  # input -> forest and its fused ops, nothing else
        if not isinstance(X, np.ndarray):
            X = X.detach().cpu().numpy()  # a torch tensor handed to a CPU backend
        rows = self._rows(outputs)
        if rows is not None and X.ndim == 2 and X.dtype in INPUT_DTYPES and X.shape[0] and \
                rows.supports(X.dtype):
            res = rows.run(np.ascontiguousarray(X), default_threads(self.options))
            return dict(zip(outputs, res))
        plan = self._plan_for(outputs)
        regions = any(isinstance(step, RowRegion) for step in plan)
        if regions or not any(isinstance(step, FusedForest) for step in plan):
            block = self._block_rows(plan)
            if X.shape[0] > block:
                # rules only (no forest kernel, which splits rows over threads itself): row
                # blocks keep each op's temporaries near the cache instead of full passes.
                # Sequential: blocks on the thread pool measured slower for BLAS-bound plans
                # (kernel SVMs, KernelPCA), whose BLAS calls already use every core. A plan
                # with row regions: a region's output (a forest's input, often much wider
                # than X: one-hot columns) is written and read back a block at a time (400K
                # rows of the bench_passes injection case, process CPU: 0.16 s in blocks of
                # 2-8 MiB, 0.20 s of 32 MiB, 0.26 s of 128 MiB; AMD EPYC Zen 4).
                parts = [self._run_plan(plan, X[i:i + block], outputs)
                         for i in range(0, X.shape[0], block)]
                return {o: np.concatenate([p[o] for p in parts]) for o in outputs}
        return self._run_plan(plan, X, outputs)

    def _block_rows(self, plan: list) -> int:
        row_bytes = 8 * sum(max(1, int(step.width or 1)) for step in plan)
        return max(MIN_BLOCK_ROWS, BLOCK_BYTES // row_bytes)

    def _run_plan(self, plan: list, X: Any, outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
        values: dict[str, Any] = {}
        for step in plan:
            if isinstance(step, FusedForest):
                values[step.end] = self._forest(step, values[step.tree.inputs[0]])
            elif isinstance(step, RowRegion):
                values[step.end] = self._region(step, values)
            elif step.op is Op.INPUT:
                values[step.name] = X
            else:
                values[step.name] = rules.run(step, [values[i] for i in step.inputs],
                                                   self.options)
        graph = self.spec.graph
        return {o: values[graph.outputs[o]] for o in outputs}

    def _region(self, step: RowRegion, values: dict[str, Any]) -> np.ndarray:
        X = next(iter(values.values()))  # the plan's first step is the input
        if X.ndim == 2 and X.dtype in INPUT_DTYPES and step.kernel.supports(X.dtype):
            return step.kernel.run(np.ascontiguousarray(X), default_threads(self.options))[0]
        values = dict(values)  # an input dtype the kernel does not fuse: the ops' rules
        for node in step.nodes:
            values[node.name] = rules.run(node, [values[i] for i in node.inputs], self.options)
        return values[step.end]

    def _method_dtype(self, output: str) -> np.dtype:
        """The float dtype the public method returning ``output`` casts to (float64 when
        methods disagree or the method returns labels)."""
        dtypes = {np.dtype(m.dtype) for m in self.spec.methods.values()
                  if m.output == output and m.labels is None and m.dtype != "input"}
        return dtypes.pop() if len(dtypes) == 1 and next(iter(dtypes)).kind == "f" else FLOAT64

    def _forest(self, step: FusedForest, X: np.ndarray, out_dtype: np.dtype | None = None
                ) -> np.ndarray:
        out_dtype = step.dtype if out_dtype is None else out_dtype
        prog = self.programs[step.tree.name]
        out = prog(X, step.program, step.width, out_dtype=out_dtype)
        if out is not None:  # (a few rows come back in float64)
            return out.astype(out_dtype, copy=False)
        value = prog.raw(X)  # trees ran in parallel: the chain runs as its NumPy rules
        for node in step.chain:
            value = rules.run(node, [value], self.options)
        return value.astype(out_dtype, copy=False)

    def explain(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "backend": "native (LLVM via llvmlite)",
            "target": f"{self.target.cpu} ({self.target.simd_bytes * 8}-bit SIMD, "
                      f"{self.target.isa})",
        }
        fused = {",".join(k): v.symbols for k, v in self._row_kernels.items() if v is not None}
        if fused:
            out["fused_kernels"] = fused
        for name, prog in self.programs.items():
            out[f"{name} schedule"] = str(prog.schedule)
            out[f"{name} schedule (CompileOptions.schedule)"] = prog.schedule.to_json()
            out[f"{name} why"] = self.reasons.get(name, "")
            out[f"{name} threads"] = prog.n_threads
            for key, val in prog.describe().items():
                out[f"{name} {key}"] = val
        return out

    def artifact_state(self) -> dict[str, Any]:
        return {"target": {"cpu": self.target.cpu, "features": self.target.features},
                "forests": {name: p.state() for name, p in self.programs.items()}}


def default_threads(options: CompileOptions) -> int:
    if options.n_threads:
        return options.n_threads
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
