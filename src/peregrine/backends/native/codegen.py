"""LLVM IR for tree-ensemble kernels (llvmlite.ir).

A kernel is specialised by a :class:`KernelSpec` (schedule, layout, depth, dtypes, output width,
feature flags) and never by the model's numbers: node arrays come in through a descriptor, so one
compiled kernel serves every model of the same shape, and compile time does not grow with the
number of nodes (lleaves and Treelite emit one basic block per node instead).

Signature (C ABI): ``void kernel(const int64_t *args)`` with ``args`` as named in ``ARGS`` (one
pointer, so a call from Python converts one argument, not eleven).

``out`` is row-major with ``out_stride`` columns, indexed by absolute row. Rows ``[row_begin,
row_end)`` get the sum over trees ``[tree_begin, tree_end)`` in their first ``n_outputs``
columns; with ``finalize`` the sum is then divided (averaging forests) and offset by the base
score, as ``reference.forest_predict`` does, and the ``epilogue`` program (links, affine, binary
probabilities; see epilogue.py) turns it into the final columns.

Lanes hold rows (``lanes="rows"``: one tree at a time for ``vector_width x interleave`` rows,
the batch kernel) or trees (``lanes="trees"``: one row at a time against ``vector_width x
interleave`` trees, the latency kernel for a handful of rows).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from llvmlite import ir

from peregrine.backends.native.binned import TILE_SLACK, BinnedWalks
from peregrine.backends.native.epilogue import Interpreter
from peregrine.backends.native.lanes import TreeLanes, row_register_capacity  # noqa: F401
from peregrine.backends.native.layout import BINNED_TOP_LEVELS
from peregrine.backends.native.oblivious import ObliviousBinnedWalks
from peregrine.backends.native.refill import RefillWalks
from peregrine.backends.native.walks import Walks
from peregrine.kernels.irutil import (
    F64,
    FLOATS,
    I8,
    I32,
    I64,
    PTR,
    Lanes,
    Loops,
    align,
    gep,
    imin,
)

# call arguments (i64 each)
ARGS = ("X", "stride", "rb", "re", "tb", "te", "desc", "out", "fin", "out_stride", "epilogue")
ARG_SCALARS = ("stride", "rb", "re", "tb", "te", "fin", "out_stride")
# descriptor slots (i64 each): pointers to the packed arrays, then scalars
DESC = ("feat", "thr", "kid", "node", "top", "leaf", "tree_root", "tree_leaf", "tree_col", "tree_depth",
        "cat_bits", "cat_unknown", "n_cat_words", "divisor", "base", "bins", "n_features", "top_stride",
        "ranks")
SCALARS = ("n_cat_words", "n_features", "top_stride")
CONTIGUOUS_LEVELS = 1  # levels whose x comes from whole-row loads and selects, not gathers
CACHE_ROWS_BYTES = 64 << 10  # stack buffer for a transposed row tile (see Schedule.cache_rows)


@dataclass(frozen=True)
class KernelSpec:
    layout: str  # "perfect" | "sparse" | "binned" | "oblivious" | "oblivious_binned" | "refill"
    depth: int  # PERFECT/BINNED: levels walked (0 for SPARSE: its walks read the depth per tree)
    x_dtype: str
    cmp_dtype: str
    leaf_dtype: str
    n_outputs: int
    value_width: int
    average: bool
    sum_dtype: str  # what leaf values are summed in (the library's: float32 for XGBoost)
    base_first: bool  # the sum starts from the base score (boosting) instead of zero
    has_nan: bool
    has_missing_zero: bool
    has_categorical: bool
    cat_negative_before_trunc: bool
    isa: str  # "avx512" | "avx2" | "generic": which lane permutes exist
    lanes: str  # "rows" | "trees"
    row_in_registers: bool  # tree lanes: the row's features fit the permute registers
    cache_rows: bool  # copy each row tile transposed into a stack buffer first
    node_pairs: bool  # gather (feature, threshold) as one int64 per node (float32 compares)
    top_levels: int  # tree lanes: levels read with plain loads from the slot-major copy
    vector_width: int
    interleave: int
    row_tile: int
    tree_tile: int
    loop_order: str
    binned_regs: int = 0  # BINNED: 64-byte registers holding one walk group's byte tile
    rank_base: int = 0  # BINNED: 1 where rank 0 holds NaN thresholds

    def build_ir(self, triple: str) -> ir.Module:
        return build_module(self, triple)

    @property
    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:20]

    @property
    def symbol(self) -> str:
        return f"peregrine_forest_{self.key}"

    @property
    def cost_hint(self) -> float:
        """Relative compile time, for ``jit.load_all``'s order: the walk is emitted once per
        interleaved row group, and row lanes (batch kernels) carry the row tiling and
        epilogue loops the tree-lane (few-rows) form has not: LightGBM 500 x 256 leaves,
        0.65 s against 0.28 s."""
        return self.interleave * (2.0 if self.lanes == "rows" else 1.0)


def build_module(spec: KernelSpec, triple: str = "") -> ir.Module:
    module = ir.Module(name=spec.symbol)
    module.triple = triple
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), name=spec.symbol)
    fn.args[0].name = "args"
    _Kernel(module, fn, spec).emit()
    return module


class _Kernel(RefillWalks, Walks, BinnedWalks, ObliviousBinnedWalks, TreeLanes):
    def __init__(self, module: ir.Module, fn: ir.Function, spec: KernelSpec) -> None:
        self.spec = spec
        entry = fn.append_basic_block("entry")
        self.b = b = ir.IRBuilder(entry)
        self.v = Lanes(module, b, spec.vector_width)
        self.loops = Loops(b, entry)
        self.xt, self.ct, self.lt = (FLOATS[spec.x_dtype], FLOATS[spec.cmp_dtype],
                                     FLOATS[spec.leaf_dtype])
        self.st = FLOATS[spec.sum_dtype]
        args = {}
        for slot, name in enumerate(ARGS):
            word = b.load(gep(b, fn.args[0], [ir.Constant(I64, slot)], source_etype=I64), typ=I64)
            args[name] = word if name in ARG_SCALARS else b.inttoptr(word, PTR)
        self.X, self.stride, self.rb, self.re = (args[k] for k in ("X", "stride", "rb", "re"))
        self.tb, self.te, self.out, self.ostride = (args[k] for k in ("tb", "te", "out",
                                                                      "out_stride"))
        self.fin, self.program, desc = b.trunc(args["fin"], I32), args["epilogue"], args["desc"]
        self.one = Lanes(module, b, 1)
        self.d = {}
        for slot, name in enumerate(DESC):
            word = b.load(gep(b, desc, [ir.Constant(I64, slot)], source_etype=I64), typ=I64)
            self.d[name] = word if name in SCALARS else b.inttoptr(word, PTR)
        self.nf = b.trunc(self.d["n_features"], I32)
        K = spec.interleave
        # row lanes: one vector of running sums per (output, walk), a row per lane; tree lanes:
        # one scalar running sum per output, the lanes' leaf values folded into it in tree order
        self.acc = self.loops.var(ir.ArrayType(self.v.ty(self.st), spec.n_outputs * K),
                                  name="acc")
        self.acc1 = self.loops.var(ir.ArrayType(self.st, spec.n_outputs), name="acc1")
        self.by_rows = spec.lanes == "rows"
        self.cache_rows = spec.cache_rows and spec.vector_width > 1 and self.by_rows
        # OBLIVIOUS_BINNED reads the same byte tile, laid out [group][feature][64 rows]
        self.oblivious_binned = spec.layout == "oblivious_binned"
        self.binned = spec.layout == "binned" or self.oblivious_binned
        self.st_bytes = 8 if self.st is F64 else 4
        # levels whose input comes from whole-row loads and selects: a binned level-2 lookup
        # costs four byte permutes, more than four loads and three selects
        self.contiguous_levels = 2 if self.binned else CONTIGUOUS_LEVELS
        if self.cache_rows and self.binned:  # [block][walk][feature][lane] bins, one byte each
            self.tile = self.loops.var(ir.ArrayType(I8, CACHE_ROWS_BYTES + TILE_SLACK),
                                       name="rows")
        elif self.cache_rows:  # the row tile, transposed to [block][walk][feature][lane]
            n = CACHE_ROWS_BYTES // align(self.ct)
            self.tile = self.loops.var(ir.ArrayType(self.ct, n), name="rows")
        # tree lanes over BINNED words: the row's bins as dwords, 16 features a register in
        # whole vpermi2d pairs (binned_regs counts the batch walks' 16-byte features: 2 per 8
        # features), and the top levels from the words' own 16-bit group-major copy
        self.top_levels = spec.top_levels
        self.bin_regs = 0
        if spec.layout == "binned" and not self.by_rows:
            self.top_levels = min(BINNED_TOP_LEVELS, spec.depth)
            self.bin_regs = 2 if spec.binned_regs <= 8 else 4
        if not self.by_rows:
            self.row_buf = self.loops.var(ir.ArrayType(self.ct, 2 * spec.vector_width), name="row")
        self.epi = Interpreter(self, self.v if self.by_rows else self.one, max(2, spec.n_outputs))

    # ---------------------------------------------------------------------- loop nest --
    def emit(self) -> None:
        s, b = self.spec, self.b
        if not self.by_rows:
            one = ir.Constant(I64, 1)
            self.loops.range(self.rb, self.re, one, lambda r: self.block_trees(r), "row")
            b.ret_void()
            return
        if s.layout == "refill":  # lanes refilled with rows as they reach leaves (refill.py)
            self.emit_refill()
            return
        block = ir.Constant(I64, s.vector_width * s.interleave)
        tree_step = (ir.Constant(I64, s.tree_tile) if s.tree_tile else
                     b.select(b.icmp_signed(">", b.sub(self.te, self.tb), ir.Constant(I64, 0)),
                              b.sub(self.te, self.tb), ir.Constant(I64, 1)))
        row_step = ir.Constant(I64, s.row_tile)

        def tree_tiles(body):
            self.loops.range(self.tb, self.te, tree_step, lambda t0: body(
                t0, imin(b, b.add(t0, tree_step), self.te)), "tt")

        def blocks(r0, t0, t1):
            r1 = imin(b, b.add(r0, row_step), self.re)
            self.loops.range(r0, r1, block, lambda r: self.block(r, r0, t0, t1), "blk")

        def row_tile(r0, body):
            if self.cache_rows:
                r1 = imin(b, b.add(r0, row_step), self.re)
                self.loops.range(r0, r1, block, lambda r: self.cache_block(r, r0), "fill")
            body()

        if s.loop_order == "rows_outer":
            self.loops.range(self.rb, self.re, row_step, lambda r0: row_tile(r0, lambda: (
                tree_tiles(lambda t0, t1: blocks(r0, t0, t1)))), "rt")
        else:
            tree_tiles(lambda t0, t1: self.loops.range(self.rb, self.re, row_step, lambda r0: (
                row_tile(r0, lambda: blocks(r0, t0, t1))), "rt"))
        b.ret_void()

    def rows(self, r: ir.Value) -> tuple[list, list]:
        """(valid-lane masks, element offset of each lane's row from row r) per walk; lanes
        past the end re-read the last row so that every load stays in bounds."""
        s, b, v = self.spec, self.b, self.v
        K, V = s.interleave, s.vector_width
        nvalid = b.trunc(imin(b, ir.Constant(I64, V * K), b.sub(self.re, r)), I32)
        last = v.splat(b.sub(nvalid, ir.Constant(I32, 1)))
        stride32 = v.splat(b.trunc(self.stride, I32))
        masks, offs = [], []
        for k in range(K):
            lanes = v.lane_ids(k * V)
            valid = b.icmp_signed("<", lanes, v.splat(nvalid))
            masks.append(valid)
            offs.append(b.mul(b.select(valid, lanes, last), stride32))
        return masks, offs

    def cache_block(self, r: ir.Value, r0: ir.Value) -> None:
        """Copy one block's rows into the tile transposed, converted to the compare dtype, so
        that the first levels read contiguous vectors and no walk converts again."""
        b, v, K, V = self.b, self.v, self.spec.interleave, self.spec.vector_width
        xb = gep(b, self.X, [b.mul(r, self.stride)], source_etype=self.xt)
        dst = self.tile_block(r, r0)
        if self.oblivious_binned:
            self.xb_fill = xb
            nvalid = b.trunc(imin(b, ir.Constant(I64, V * K), b.sub(self.re, r)), I32)
            self.loops.range(ir.Constant(I64, 0), self.d["n_features"], ir.Constant(I64, 1),
                             lambda f: self.fill_oblivious(dst, nvalid, b.trunc(f, I32)),
                             "feat")
            return
        _, offs = self.rows(r)

        def gather(f32: ir.Value) -> list[ir.Value]:
            return [self.convert(v.gather(xb, self.xt, b.add(offs[k], v.splat(f32))))
                    for k in range(K)]

        if self.binned:
            self.quantise_block(dst, gather)
            return

        def copy(f):
            f32 = b.trunc(f, I32)
            for k, x in enumerate(gather(f32)):
                at = b.mul(b.add(b.mul(ir.Constant(I32, k), self.nf), f32), ir.Constant(I32, V))
                b.store(x, gep(b, dst, [at], source_etype=self.ct), align=align(self.ct))

        self.loops.range(ir.Constant(I64, 0), self.d["n_features"], ir.Constant(I64, 1), copy,
                         "feat")

    def tile_block(self, r: ir.Value, r0: ir.Value) -> ir.Value:
        off = self.b.mul(self.b.trunc(self.b.sub(r, r0), I32), self.nf)  # rows * features
        return gep(self.b, self.tile, [ir.Constant(I32, 0), off],
                   source_etype=self.tile.allocated_type)

    def convert(self, x: ir.Value) -> ir.Value:
        """The library's own rounding of the input (np.asarray(X, compare dtype))."""
        if self.xt is self.ct:
            return x
        ty = self.ct if not isinstance(x.type, ir.VectorType) else self.v.ty(self.ct)
        return (self.b.fptrunc if self.xt is F64 else self.b.fpext)(x, ty)

    # ------------------------------------------------------- row lanes: one row block --
    def block(self, r: ir.Value, r0: ir.Value, t0: ir.Value, t1: ir.Value) -> None:
        s, b, v = self.spec, self.b, self.v
        K, V = s.interleave, s.vector_width
        masks, self.row_off = self.rows(r)
        self.xb = gep(b, self.X, [b.mul(r, self.stride)], source_etype=self.xt)
        if self.cache_rows:
            self.xblock = self.tile_block(r, r0)
            self.lane_base = [b.add(v.splat(b.mul(ir.Constant(I32, k * V), self.nf)),
                                    v.lane_ids(0)) for k in range(K)]
        ptrs = [[self.out_ptrs(r, k, c) for c in range(s.n_outputs)] for k in range(K)]
        first = b.icmp_signed("==", t0, self.tb)
        for k in range(K):
            for c in range(s.n_outputs):
                with b.if_else(first) as (zero, resume):
                    with zero:
                        b.store(v.splat(self.start_value(c, t0)), self.acc_ptr(c, k))
                    with resume:  # a tree tile's partial sums, stored in float64: exact
                        b.store(self.to_sum(self.load_out(ptrs[k][c], masks[k])),
                                self.acc_ptr(c, k))
        self.loops.range(t0, t1, ir.Constant(I64, 1), self.tree, "tree")
        with b.if_else(self.finalizing(t1)) as (final, partial):
            with final:
                self.finish_block(r, masks)
            with partial:  # raw sums for the next tree tile
                for k in range(K):
                    for c in range(s.n_outputs):
                        self.store_out(self.widen(b.load(self.acc_ptr(c, k),
                                                         typ=v.ty(self.st))), ptrs[k][c],
                                       masks[k])

    def finish_block(self, r: ir.Value, masks: list) -> None:
        """sum / divisor + base, then the fused epilogue, then the stores, one walk group at a
        time in a runtime loop (so the interpreter is emitted once, not per group)."""
        s, b, v = self.spec, self.b, self.v
        K, V, n = s.interleave, s.vector_width, s.n_outputs
        done = self.loops.var(ir.ArrayType(v.ty(F64), n * K), name="done")
        for c in range(n):
            div, base = self.output_scale(c)
            for k in range(K):
                a = self.widen(b.load(self.acc_ptr(c, k), typ=v.ty(self.st)))
                if s.average:
                    a = b.fdiv(a, v.splat(div))
                if not s.base_first:
                    a = b.fadd(a, v.splat(base))
                b.store(a, self.slot(done, c * K + k))
        nvalid = b.trunc(imin(b, ir.Constant(I64, V * K), b.sub(self.re, r)), I32)

        def group(k):
            k32 = b.trunc(k, I32)
            for c in range(n):
                at = b.add(ir.Constant(I32, c * K), k32)
                self.epi.put(c, b.load(self.slot(done, at), typ=v.ty(F64)))
            width = self.epi.run(self.program, n)
            first_lane = b.mul(k32, ir.Constant(I32, V))
            mask = b.icmp_signed("<", b.add(v.lane_ids(0), v.splat(first_lane)),
                                 v.splat(nvalid))
            rows = b.add(v.splat(r), b.sext(b.add(v.lane_ids(0), v.splat(first_lane)),
                                            v.ty(I64)))
            self.loops.range(ir.Constant(I64, 0), b.zext(width, I64), ir.Constant(I64, 1),
                             lambda c: self.store_out(self.epi.get(b.trunc(c, I32)),
                                                      self.out_at(rows, c), mask), "store")

        self.loops.range(ir.Constant(I64, 0), ir.Constant(I64, K), ir.Constant(I64, 1), group,
                         "group")

    def slot(self, array: ir.Value, i: ir.Value | int) -> ir.Value:
        i = ir.Constant(I32, i) if isinstance(i, int) else i
        return gep(self.b, array, [ir.Constant(I32, 0), i], source_etype=array.allocated_type)

    def tree(self, t: ir.Value) -> None:
        s, b, v = self.spec, self.b, self.v
        at = lambda name: b.load(gep(b, self.d[name], [t], source_etype=I32), typ=I32)  # noqa: E731
        col = at("tree_col") if s.value_width == 1 and s.n_outputs > 1 else None
        if self.oblivious_binned:
            self.walk_oblivious_binned(t, col)
            return
        if s.layout != "sparse":  # slots from t * (2**depth - 1), leaves from t << depth
            t32 = b.trunc(t, I32)
            root = b.mul(t32, ir.Constant(I32, 2**s.depth - 1))
            leaf0 = v.splat(b.shl(t32, ir.Constant(I32, s.depth)))
            offs = self.walk_perfect(root, [v.splat(root)] * s.interleave)
            slots = [b.add(x, leaf0) for x in offs]
        else:
            root = at("tree_root")
            slots = self.walk_sparse([v.splat(root)] * s.interleave, at("tree_depth"))
        if self.leaf_tables():
            self.add_leaves_from_tables(t32, offs, col)
            return
        for k, slot in enumerate(slots):
            self.accumulate(k, slot, None, col)

    def fetch_x(self, k, f, level, scalar_f, root, idx) -> ir.Value:
        """x[row, feature] for every lane, in the compare dtype."""
        b, v = self.b, self.v
        if not self.by_rows:
            return self.fetch_x_row(f)
        if not self.cache_rows:
            return self.convert(v.gather(self.xb, self.xt, b.add(self.row_off[k],
                                                                 self.feature(f))))
        kbase = b.mul(ir.Constant(I32, k * v.w), self.nf)

        def row_vector(word):  # every lane reads one feature: a contiguous load
            if self.binned:
                return self.binned_row_vector(k, word)
            at = b.add(kbase, b.mul(self.feature(word), ir.Constant(I32, v.w)))
            return b.load(gep(b, self.xblock, [at], source_etype=self.ct), typ=v.ty(self.ct),
                          align=align(self.ct))

        if scalar_f is not None:  # level 0, or any level of an oblivious tree
            return row_vector(scalar_f)
        if level in (1, 2) and root is not None and self.contiguous_levels >= level:
            # 2 or 4 possible nodes: read each one's feature for all lanes and select
            first = 2**level - 1
            out = None
            for i in reversed(range(first, 2 * first + 1)):
                f_i = b.load(gep(b, self.d["feat"], [b.add(root, ir.Constant(I32, i))],
                                 source_etype=I32), typ=I32)
                x_i = row_vector(f_i)
                out = x_i if out is None else b.select(
                    b.icmp_signed("==", idx, v.const(I32, i)), x_i, out)
            return out
        if self.binned:
            return self.binned_lookup(k, f)
        shift = v.const(I32, v.w.bit_length() - 1)
        return v.gather(self.xblock, self.ct, b.add(b.shl(self.feature(f), shift),
                                                    self.lane_base[k]))

    # ------------------------------------------------------------------ accumulators --
    def accumulate(self, k: int, slot: ir.Value, valid: ir.Value | None,
                   col: ir.Value | None) -> None:
        s, b, v = self.spec, self.b, self.v
        W = s.value_width
        base = b.mul(slot, v.const(I32, W)) if W > 1 else slot
        # -0.0 is the neutral value: x + -0.0 == x for every x, -0.0 included
        neutral = v.const(self.st, -0.0)
        for j in range(W):
            val = v.gather(self.d["leaf"], self.lt, b.add(base, v.const(I32, j)) if j else base)
            val = self.to_sum(val)
            if valid is not None:
                val = b.select(valid, val, neutral)
            if col is None:
                targets = [(j, val)]
            elif isinstance(col.type, ir.VectorType):  # tree lanes: each lane its own column
                targets = [(c, b.select(b.icmp_signed("==", col, v.const(I32, c)), val,
                                        neutral)) for c in range(s.n_outputs)]
            else:
                targets = [(col, val)]
            for c, x in targets:
                if self.by_rows:  # a row per lane: add this tree's leaf values
                    p = self.acc_ptr(c, k)
                    b.store(b.fadd(b.load(p, typ=v.ty(self.st)), x), p)
                else:  # a tree per lane: fold them in tree order (lane k*V + i is tree i)
                    p = self.acc1_ptr(c)
                    b.store(v.fold(b.load(p, typ=self.st), x), p)

    def acc1_ptr(self, c: ir.Value | int) -> ir.Value:
        i = ir.Constant(I32, c) if isinstance(c, int) else c
        return gep(self.b, self.acc1, [ir.Constant(I32, 0), i],
                   source_etype=self.acc1.allocated_type)

    def start_value(self, c: int, t0: ir.Value) -> ir.Value:
        """What output c's sum starts from: the base score when the library's sum does and
        these are the first trees (a later tree range starts from zero), else zero."""
        b, zero = self.b, ir.Constant(self.st, 0.0)
        if not self.spec.base_first:
            return zero
        base = b.load(gep(b, self.d["base"], [ir.Constant(I32, c)], source_etype=F64), typ=F64)
        if self.st is not F64:
            base = b.fptrunc(base, self.st)  # a float32 base margin: exact
        return b.select(b.icmp_signed("==", t0, ir.Constant(t0.type, 0)), base, zero)

    def to_sum(self, x: ir.Value) -> ir.Value:
        """A leaf value (or a stored partial sum) in the sum dtype: exact (a float32 sum only
        ever holds float32 values, Forest.validate checks the leaves)."""
        elem = x.type.element if isinstance(x.type, ir.VectorType) else x.type
        if elem is self.st:
            return x
        ty = self.v.ty(self.st) if isinstance(x.type, ir.VectorType) else self.st
        return (self.b.fptrunc if elem is F64 else self.b.fpext)(x, ty)

    def widen(self, x: ir.Value) -> ir.Value:
        if self.st is F64:
            return x
        ty = ir.VectorType(F64, x.type.count) if isinstance(x.type, ir.VectorType) else F64
        return self.b.fpext(x, ty)

    def acc_ptr(self, c: ir.Value | int, k: int) -> ir.Value:
        K = self.spec.interleave
        if isinstance(c, int):
            i = ir.Constant(I32, c * K + k)
        else:
            i = self.b.add(self.b.mul(c, ir.Constant(I32, K)), ir.Constant(I32, k))
        return gep(self.b, self.acc, [ir.Constant(I32, 0), i], source_etype=self.acc.allocated_type)

    def finalizing(self, t1: ir.Value) -> ir.Value:
        b = self.b
        return b.and_(b.icmp_signed("!=", self.fin, ir.Constant(I32, 0)),
                      b.icmp_signed("==", t1, self.te))

    def output_scale(self, c: int) -> tuple[ir.Value, ir.Value]:
        b = self.b
        return tuple(b.load(gep(b, self.d[name], [ir.Constant(I32, c)], source_etype=F64),
                            typ=F64) for name in ("divisor", "base"))

    def out_ptrs(self, r: ir.Value, k: int, c: int) -> ir.Value:
        rows = self.b.add(self.v.splat(r), self.b.sext(self.v.lane_ids(k * self.v.w),
                                                       self.v.ty(I64)))
        return self.out_at(rows, ir.Constant(I64, c))

    def out_at(self, rows: ir.Value, c: ir.Value) -> ir.Value:
        """&out[row, c] (per lane when rows is a lane value); out rows are out_stride apart."""
        b = self.b
        lanes = self.v if isinstance(rows.type, ir.VectorType) or self.v.w == 1 else self.one
        idx = b.add(b.mul(rows, lanes.splat(self.ostride)), lanes.splat(c))
        return lanes.addr(self.out, F64, idx)

    def load_out(self, ptrs: ir.Value, mask: ir.Value) -> ir.Value:
        b, v = self.b, self.v
        if v.w > 1:
            return v.masked_load(ptrs, F64, mask)
        return b.select(mask, b.load(b.select(mask, ptrs, self.out), typ=F64),
                        ir.Constant(F64, 0.0))

    def store_out(self, value: ir.Value, ptrs: ir.Value, mask: ir.Value) -> None:
        b, v = self.b, self.v
        if v.w > 1:
            v.masked_store(value, ptrs, F64, mask)
            return
        with b.if_then(mask):
            b.store(value, ptrs)
