"""Native CTR_LOOKUP (CatBoost's one-hot and CTR columns, ir/semantics/ctr.py): one row kernel,
generic over the model (its tables are data, so one object serves every model and stays in the
disk cache), rows split over the native thread pool.

Per row, as the rule: each code element by a branchless binary search over its ascending
hashes, each bit by one comparison (NaN: the element's NaN value), each projection's key as an
int64 sum of element * weight, its entry from a dense int32 map (key -> entry, built here where
the keys' range is small: ``DENSE_MAX``) or a binary search over its ascending keys, and each
derived column as one load from its value table. The row's input values are copied first, so
the output row is written once, in order.

Why a kernel: the op's NumPy rule makes a pass over all rows per element, projection and column
(about 350 passes for a 200-tree default model); this walks each row once with its elements in
registers and the tables in cache (CatBoost's own evaluator works per row too). Measured in
docs/frontends/catboost.md.
"""

from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from peregrine.kernels import jit
from peregrine.kernels.irutil import F32, F64, I32, I64, PTR, gep, void_function
from peregrine.kernels.threads import pool, usable_cpus

# A projection's key -> entry map is dense (int32 per possible key) while it has at most this
# many slots or 8 per stored key; past that, a binary search over its keys.
DENSE_MAX = 1 << 16
DENSE_PER_KEY = 8
# Below this many output values per thread a hand-off to the pool costs more than the rows.
PARALLEL_MIN_VALUES = 1 << 15
# Rows per block: each element, key and column is computed for a block of rows at a time (its
# table entries read once per block, the loop over rows vectorised); 64 rows of scratch for
# ~200 elements and keys stay in L2.
BLOCK = 64
# descriptor slots (int64): counts, then table addresses
_FIELDS = ("n_codes", "n_bits", "n_proj", "n_derived", "hash_columns", "hashes", "hash_offsets",
           "bit_columns", "thresholds", "bit_nan", "key_elements", "key_weights", "key_offsets",
           "keys", "keys_offsets", "dense_offsets", "dense", "sources", "values",
           "value_offsets")
_SLOT = {name: i for i, name in enumerate(_FIELDS)}
KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                          ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


@dataclass(frozen=True)
class CtrKernelSpec:
    """The kernel's cache identity: its generator's version (it is generic over models)."""

    version: str = f"ctr-lookup-5-block{BLOCK}-f32"

    @property
    def key(self) -> str:
        return self.version

    @property
    def symbol(self) -> str:
        return "peregrine_ctr_lookup"

    def build_ir(self, triple: str = "") -> ir.Module:
        module = ir.Module(name=self.symbol)
        module.triple = triple
        _emit(module, self.symbol)
        return module


def _emit(module: ir.Module, symbol: str) -> None:
    # void f(const double* x, i64 width, i64 r0, i64 r1, float* out, const i64* desc,
    #        i64* scratch)   scratch: (n_codes + n_bits + 2 * n_proj + 1) * BLOCK int64
    fn, b, loops, _ = void_function(module, symbol, [PTR, I64, I64, I64, PTR, PTR, PTR],
                                    (0, 4, 5, 6))
    x, width, r0, r1, out, desc, scratch = fn.args

    def field(name: str, typ: ir.Type = I64) -> ir.Value:
        v = b.load(gep(b, desc, [ir.Constant(I64, _SLOT[name])], I64), typ=I64)
        return v if typ is I64 else b.inttoptr(v, PTR)

    def at(base: ir.Value, idx: ir.Value, typ: ir.Type) -> ir.Value:
        return b.load(gep(b, base, [idx], typ), typ=typ)

    n_codes, n_bits, n_proj, n_derived = (field(f) for f in _FIELDS[:4])
    t = {name: field(name, PTR) for name in _FIELDS[4:]}
    n_el = b.add(n_codes, n_bits)
    out_w = b.add(width, n_derived)
    zero, one = ir.Constant(I64, 0), ir.Constant(I64, 1)
    block = ir.Constant(I64, BLOCK)
    entries = gep(b, scratch, [b.mul(n_el, block)], I64)  # (n_proj, BLOCK) after elements
    # then one row of search keys, then the entries again row-major, int32 (BLOCK, n_proj): a
    # row's derived columns read them from a few cache lines
    by_row = gep(b, entries, [b.mul(b.add(n_proj, one), block)], I64)

    def search(table: ir.Value, lo: ir.Value, n: ir.Value, m: ir.Value, value, dst: ir.Value,
               typ: ir.Type, name: str) -> None:
        """dst[r] = position + 1 of value(r) in table[lo:lo+n] (ascending, n >= 1), 0 if
        absent, for the block's rows r < m: a branchless lower bound, each halving step taken
        for every row before the next (the rows' loads overlap; the loop over rows
        vectorises), dst holding each row's current base."""
        loops.range(zero, m, one, lambda r: b.store(lo, gep(b, dst, [r], I64)), f"{name}.init")
        length = loops.var(I64, n, f"{name}.len")
        cond = b.append_basic_block(f"{name}.cond")
        step = b.append_basic_block(f"{name}.step")
        done = b.append_basic_block(f"{name}.done")
        b.branch(cond)
        b.position_at_end(cond)
        cur = b.load(length, typ=I64)
        b.cbranch(b.icmp_signed(">", cur, one), step, done)
        b.position_at_end(step)
        half = b.lshr(cur, one)

        def halve(r: ir.Value) -> None:
            slot = gep(b, dst, [r], I64)
            base0 = b.load(slot, typ=I64)
            probe = at(table, b.sub(b.add(base0, half), one), typ)
            v = value(r)
            less = b.fcmp_ordered("<", probe, v) if typ is F64 else b.icmp_signed("<", probe, v)
            b.store(b.select(less, b.add(base0, half), base0), slot)

        loops.range(zero, m, one, halve, f"{name}.rows")
        b.store(b.sub(cur, half), length)
        b.branch(cond)
        b.position_at_end(done)

        def finish(r: ir.Value) -> None:
            # the range narrowed to one candidate: the value is there or nowhere
            slot = gep(b, dst, [r], I64)
            pos = b.load(slot, typ=I64)
            hit, v = at(table, pos, typ), value(r)
            eq = b.fcmp_ordered("==", hit, v) if typ is F64 else b.icmp_signed("==", hit, v)
            b.store(b.select(eq, b.add(b.sub(pos, lo), one), zero), slot)

        loops.range(zero, m, one, finish, f"{name}.found")

    def rows_block(start: ir.Value) -> None:
        """Rows [start, start + m): each step over the block's rows (inner loops LLVM
        vectorises: contiguous scratch rows, gathers from the tables)."""
        m = b.select(b.icmp_signed("<", b.sub(r1, start), block), b.sub(r1, start), block)
        xb = gep(b, x, [b.mul(start, width)], F64)
        ob = gep(b, out, [b.mul(start, out_w)], F32)

        def copy_row(r: ir.Value) -> None:
            xr, orow = gep(b, xb, [b.mul(r, width)], F64), gep(b, ob, [b.mul(r, out_w)], F32)
            loops.range(zero, width, one, lambda j: b.store(
                b.fptrunc(at(xr, j, F64), F32), gep(b, orow, [j], F32)), "copy")

        loops.range(zero, m, one, copy_row, "copyrows")

        def code(e: ir.Value) -> None:
            col = at(t["hash_columns"], e, I64)
            lo = at(t["hash_offsets"], e, I64)
            n = b.sub(at(t["hash_offsets"], b.add(e, one), I64), lo)
            dst = gep(b, scratch, [b.mul(e, block)], I64)
            search(t["hashes"], lo, n, m, lambda r: at(xb, b.add(b.mul(r, width), col), F64),
                   dst, F64, "code")

        loops.range(zero, n_codes, one, code, "codes")

        def bit(k: ir.Value) -> None:
            col = at(t["bit_columns"], k, I64)
            thr = at(t["thresholds"], k, F64)
            nanv = at(t["bit_nan"], k, I64)
            dst = gep(b, scratch, [b.mul(b.add(n_codes, k), block)], I64)

            def one_row(r: ir.Value) -> None:
                v = at(xb, b.add(b.mul(r, width), col), F64)
                gt = b.zext(b.fcmp_ordered(">", v, thr), I64)
                value = b.select(b.fcmp_unordered("uno", v, v), nanv, gt)
                b.store(value, gep(b, dst, [r], I64))

            loops.range(zero, m, one, one_row, "bitrows")

        loops.range(zero, n_bits, one, bit, "bits")

        def projection(p: ir.Value) -> None:
            dst = gep(b, entries, [b.mul(p, block)], I64)
            loops.range(zero, m, one, lambda r: b.store(zero, gep(b, dst, [r], I64)), "zero")
            lo = at(t["key_offsets"], p, I64)
            hi = at(t["key_offsets"], b.add(p, one), I64)

            def part(k: ir.Value) -> None:
                src = gep(b, scratch, [b.mul(at(t["key_elements"], k, I64), block)], I64)
                w = at(t["key_weights"], k, I64)

                def one_row(r: ir.Value) -> None:
                    slot = gep(b, dst, [r], I64)
                    b.store(b.add(b.load(slot, typ=I64), b.mul(at(src, r, I64), w)), slot)

                loops.range(zero, m, one, one_row, "partrows")

            loops.range(lo, hi, one, part, "parts")
            dense = at(t["dense_offsets"], p, I64)
            with b.if_else(b.icmp_signed(">=", dense, zero)) as (then, otherwise):
                with then:
                    table = gep(b, t["dense"], [dense], I32)

                    def dense_row(r: ir.Value) -> None:
                        slot = gep(b, dst, [r], I64)
                        b.store(b.sext(at(table, b.load(slot, typ=I64), I32), I64), slot)

                    loops.range(zero, m, one, dense_row, "denserows")
                with otherwise:  # the keys in a second scratch row, the result in dst
                    klo = at(t["keys_offsets"], p, I64)
                    kn = b.sub(at(t["keys_offsets"], b.add(p, one), I64), klo)
                    keys = gep(b, entries, [b.mul(n_proj, block)], I64)
                    loops.range(zero, m, one, lambda r: b.store(
                        at(dst, r, I64), gep(b, keys, [r], I64)), "keycopy")
                    search(t["keys"], klo, kn, m, lambda r: at(keys, r, I64), dst, I64, "key")
            loops.range(zero, m, one, lambda r: b.store(
                b.trunc(at(dst, r, I64), I32), gep(b, by_row, [b.add(b.mul(r, n_proj), p)], I32)),
                "byrow")

        loops.range(zero, n_proj, one, projection, "projections")

        def derived_row(r: ir.Value) -> None:
            # row by row, so the output row is written in order (a column at a time scattered
            # its stores over the block's rows: 3x slower, measured)
            ent = gep(b, by_row, [b.mul(r, n_proj)], I32)
            orow = gep(b, ob, [b.add(b.mul(r, out_w), width)], F32)

            def column(d: ir.Value) -> None:
                e = b.sext(at(ent, at(t["sources"], d, I64), I32), I64)
                v = at(t["values"], b.add(at(t["value_offsets"], d, I64), e), F32)
                b.store(v, gep(b, orow, [d], F32))

            loops.range(zero, n_derived, one, column, "derived")

        loops.range(zero, m, one, derived_row, "derivedrows")

    loops.range(r0, r1, block, rows_block, "blocks")
    b.ret_void()


class CtrProgram:
    """A CTR_LOOKUP node's tables in the kernel's form, and the call over rows."""

    def __init__(self, attrs: Any) -> None:
        a = attrs
        self.usable = bool(np.all(np.diff(a.hash_offsets) > 0))  # a search needs >= 1 entry
        self.n_derived = int(a.sources.size)
        self.scratch_len = (a.n_elements + 2 * a.n_projections + 1) * BLOCK
        top = a.max_keys()
        dense_offsets = np.full(a.n_projections, -1, dtype=np.int64)
        maps, used = [], 0
        for p in range(a.n_projections):
            keys = a.keys[a.keys_offsets[p]:a.keys_offsets[p + 1]]
            size = int(top[p]) + 1
            if size <= max(DENSE_MAX, DENSE_PER_KEY * keys.size) or keys.size == 0:
                m = np.zeros(size, dtype=np.int32)
                m[keys[keys < size]] = np.flatnonzero(keys < size).astype(np.int32) + 1
                dense_offsets[p], used = used, used + size
                maps.append(m)
        self._arrays = {
            "hash_columns": a.hash_columns, "hashes": a.hashes, "hash_offsets": a.hash_offsets,
            "bit_columns": a.bit_columns, "thresholds": a.bit_thresholds, "bit_nan": a.bit_nan,
            "key_elements": a.key_elements, "key_weights": a.key_weights,
            "key_offsets": a.key_offsets, "keys": _nonempty(a.keys, np.int64),
            "keys_offsets": a.keys_offsets, "dense_offsets": dense_offsets,
            "dense": _nonempty(np.concatenate(maps) if maps else np.zeros(0), np.int32),
            "sources": a.sources,
            # float32, as the op writes them (half the table in cache)
            "values": _nonempty(a.values.astype(np.float32), np.float32),
            "value_offsets": a.value_offsets,
        }
        self._arrays = {k: np.ascontiguousarray(v) for k, v in self._arrays.items()}
        desc = [a.n_codes, int(a.bit_columns.size), a.n_projections, self.n_derived]
        desc += [self._arrays[name].ctypes.data for name in _FIELDS[4:]]
        self._desc = np.asarray(desc, dtype=np.int64)
        self._fn = KERNEL(jit.kernel_address(CtrKernelSpec())[0]) if self.usable else None

    def __call__(self, X: np.ndarray, n_threads: int) -> np.ndarray:
        x = np.ascontiguousarray(X, dtype=np.float64)
        n, w = x.shape
        out = np.empty((n, w + self.n_derived), dtype=np.float32)
        threads = max(1, min(n_threads, n * out.shape[1] // PARALLEL_MIN_VALUES))
        # scratch per call (concurrent calls of one model must not share it); ~100 KB, heap
        scratch = np.empty((threads, self.scratch_len), dtype=np.int64)
        if threads == 1:  # (one row: the call alone, ~2 us)
            self._fn(x.ctypes.data, w, 0, n, out.ctypes.data, self._desc.ctypes.data,
                     scratch.ctypes.data)
            return out
        bounds = [n * i // threads for i in range(threads + 1)]
        args = (x.ctypes.data, w, out.ctypes.data, self._desc.ctypes.data)

        def part(i: int) -> None:
            self._fn(args[0], args[1], bounds[i], bounds[i + 1], args[2], args[3],
                     scratch[i].ctypes.data)

        jobs = [pool(threads).submit(part, i) for i in range(1, threads)]
        part(0)
        for job in jobs:
            job.result()
        return out


def _nonempty(a: np.ndarray, dtype: Any) -> np.ndarray:
    """A table the kernel may hold a pointer to (never read when empty)."""
    a = np.asarray(a, dtype=dtype)
    return a if a.size else np.zeros(1, dtype=dtype)


# each node's tables in kernel form, built on its first run and dropped with its attributes
_PROGRAMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def run(node: Any, ins: list, options: Any) -> np.ndarray:
    """CTR_LOOKUP on the native backend: the kernel (built once per node's attributes), or the
    op's rule where the kernel cannot hold the tables (an element without categories)."""
    attrs = node.attrs
    prog = _PROGRAMS.get(attrs)
    if prog is None:
        prog = _PROGRAMS[attrs] = CtrProgram(attrs)
    if not prog.usable:
        return attrs.rule(node, ins, options)
    return prog(np.asarray(ins[0]), _threads(options))


def _threads(options: Any) -> int:
    """CompileOptions.n_threads, else the CPUs this process may run on (as the forests)."""
    if options is not None and options.n_threads:
        return int(options.n_threads)
    return usable_cpus()
