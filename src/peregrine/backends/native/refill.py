"""REFILL walks (deep trees, rows in the lanes): lanes that reach a leaf take the next row.

A SPARSE walk advances a lane group level by level until no lane moves, so every group costs
the depth of its deepest row: on an unlimited-depth decision tree (depth 41, mean path 20) half
the work is lanes parked on leaves. Here each lane walks its own row and, on reaching a leaf,
records the leaf's node index for its row and takes the next row of the tile (stream
compaction: the new rows are handed out in lane order by a prefix count of the finished lanes),
so the vector work tracks the mean path length, not the maximum.

Per row tile and tree (kernel mixin of codegen's emitter; ``b``, ``v``, ``spec``, ``d``):

1. walk: ``interleave`` groups of ``vector_width`` lanes, each lane a (row, node) pair. A step
   gathers the node word (``Refill`` in representations.py: threshold bits | flags, right
   child and feature in one 64-bit word, so one gather per lane), the row's input, decides
   with the one rule (``Walks.decide``), and moves to ``right child - left``. A leaf is a
   self-loop, so a lane whose node did not move sits on its leaf: it scatters the node index
   to the tile's leaf buffer and is refilled with the next row and the root. Lanes past the
   tile's last row stay dead (their loads read the tile's first row).
2. sums: the tile's rows in blocks of ``vector_width x interleave``, in row order, add the
   leaf values (``accumulate``, the SPARSE layout's leaves) to the running sums, tree after
   tree, so the sum keeps the library's order; after the last tree the block runs the same
   finish and epilogue as every row-lane kernel (``finish_block``). The answers are SPARSE's
   bits: the same nodes, the same decisions, the same leaves in the same order.
"""

from __future__ import annotations

from llvmlite import ir

from peregrine.backends.native.representations import FEATURE_MASK
from peregrine.backends.native.schedule import Layout, Schedule
from peregrine.ir import Forest
from peregrine.kernels.irutil import I1, I32, I64, gep, imin

WALKS = 4  # groups of 16 lanes (AVX-512): 2, 4 and 8 measured, 4 best (docs/native.md)
TILE_ROWS = 4096  # rows a lane group draws from before the tile drains (1024: 3% slower)
STACK_BYTES = 128 << 10  # the tile's leaf indices (int32) and running sums (float64) per row


def refill_schedule(base: Schedule, forest: Forest) -> Schedule:
    """``base`` with REFILL walks: 4 groups of its lanes, and the longest row tile whose leaf
    indices and running sums fit STACK_BYTES (a tile drains at its end: lanes idle while
    the last rows finish)."""
    block = base.vector_width * WALKS
    per_row = 4 + 8 * max(1, forest.n_outputs)
    tile = max(block, min(TILE_ROWS, STACK_BYTES // per_row) // block * block)
    return base.replace(layout=Layout.REFILL, interleave=WALKS, row_tile=tile,
                        cache_rows=False, node_pairs=True)


class RefillWalks:
    def refill_bits(self) -> ir.Value:
        """Bits of the feature in a REFILL node word: bit_length(n_features - 1), the same as
        ``Refill.pack_nodes`` (scalar; LLVM hoists it out of the loops)."""
        b = self.b
        top = b.sub(self.nf, ir.Constant(I32, 1))
        top = b.select(b.icmp_signed("<", top, ir.Constant(I32, 0)), ir.Constant(I32, 0), top)
        lz = self.one.intrinsic("llvm.ctlz.i32", I32, [top, ir.Constant(I1, 0)])
        return b.sub(ir.Constant(I32, 32), lz)

    def refill_feature(self, w: ir.Value) -> ir.Value:
        """Feature index of a REFILL node word (scalar or lanes)."""
        b = self.b
        mask = b.sub(b.shl(ir.Constant(I32, 1), self.refill_bits()), ir.Constant(I32, 1))
        return b.and_(w, mask if w.type == I32 else self.v.splat(mask))

    def feature(self, w: ir.Value) -> ir.Value:
        # REFILL words carry the right child above the feature: tree lanes over them (the
        # SPARSE walk, which reads the child from ``kid``) need the feature alone
        if self.spec.layout == "refill":
            return self.refill_feature(w)
        return super().feature(w)

    # ------------------------------------------------------------------------ loop nest --
    def emit_refill(self) -> None:
        s, b, v = self.spec, self.b, self.v
        block = s.vector_width * s.interleave
        # + a spare slot for the stores of scalar walks that finish no row
        self.leaf_buf = self.loops.var(ir.ArrayType(I32, s.row_tile + 1), name="leaves")
        # running sums between trees, [block][output x walk] vectors (acc's own layout)
        self.sum_buf = self.loops.var(ir.ArrayType(
            v.ty(self.st), s.row_tile // block * s.n_outputs * s.interleave), name="sums")
        tile = ir.Constant(I64, s.row_tile)

        def row_tile(r0):
            r1 = imin(b, b.add(r0, tile), self.re)
            n = b.trunc(b.sub(r1, r0), I32)
            xt = gep(b, self.X, [b.mul(r0, self.stride)], source_etype=self.xt)

            def tree(t):
                self.refill_walk(t, xt, n)
                self.loops.range(r0, r1, ir.Constant(I64, block),
                                 lambda r: self.refill_sums(r, r0, t), "blk")

            self.loops.range(self.tb, self.te, ir.Constant(I64, 1), tree, "tree")

        self.loops.range(self.rb, self.re, tile, row_tile, "rt")
        b.ret_void()

    # ------------------------------------------------------------------ 1. the walk --
    def refill_walk(self, t: ir.Value, xt: ir.Value, n: ir.Value) -> None:
        """Every row of the tile [0, n) to its leaf of tree t; leaf node indices into
        ``leaf_buf``."""
        s, b, v = self.spec, self.b, self.v
        K, V = s.interleave, s.vector_width
        root = v.splat(b.load(gep(b, self.d["tree_root"], [t], source_etype=I32), typ=I32))
        rows = [self.loops.var(v.ty(I32), v.lane_ids(k * V), f"row{k}") for k in range(K)]
        nodes = [self.loops.var(v.ty(I32), root, f"node{k}") for k in range(K)]
        nxt_row = self.loops.var(I32, ir.Constant(I32, K * V), "next_row")
        nv = v.splat(n)
        fb = v.splat(self.refill_bits())
        fmask = b.sub(b.shl(v.const(I32, 1), fb), v.const(I32, 1))
        stride = v.splat(b.trunc(self.stride, I32))
        # lane i's rank among the finished lanes counts the finished lanes below it
        below = None if V == 1 else ir.Constant(v.ty(I32), [(1 << i) - 1 for i in range(V)])
        mask_ty = ir.IntType(V)
        body = b.append_basic_block("refill.body")
        done = b.append_basic_block("refill.end")
        b.branch(body)
        b.position_at_end(body)
        cur = [b.load(p, typ=v.ty(I32)) for p in nodes]
        row = [b.load(p, typ=v.ty(I32)) for p in rows]
        live = [b.icmp_signed("<", r, nv) for r in row]
        pairs = [v.gather(self.d["node"], I64, c) for c in cur]
        alive = ir.Constant(I1, 0)
        for k in range(K):
            f, thr = self.split_pair(pairs[k])
            at = b.add(b.mul(b.select(live[k], row[k], v.const(I32, 0)), stride),
                       b.and_(f, fmask))
            x = self.convert(v.gather(xt, self.xt, at))
            left = self.decide(x, f, thr)
            right = b.lshr(b.and_(f, v.const(I32, FEATURE_MASK)), fb)
            nxt = b.sub(right, b.zext(left, v.ty(I32)))
            fin = b.and_(b.icmp_signed("==", nxt, cur[k]), live[k])
            first = b.load(nxt_row, typ=I32)
            if V == 1:  # scalar walks: a plain store, to a spare slot when not finished
                spare = ir.Constant(I32, s.row_tile)
                b.store(cur[k], gep(b, self.leaf_buf, [ir.Constant(I32, 0), b.select(
                    fin, row[k], spare)], source_etype=self.leaf_buf.allocated_type))
                count = b.zext(fin, I32)
                new_row = b.select(fin, first, row[k])
            else:
                v.masked_store(cur[k], v.addr(self.leaf_buf, I32, row[k]), I32, fin)
                count = b.zext(b.bitcast(fin, mask_ty), I32)
                rank = v.intrinsic(f"llvm.ctpop.v{V}i32", v.ty(I32),
                                   [b.and_(v.splat(count), below)])
                new_row = b.select(fin, b.add(rank, v.splat(first)), row[k])
                count = v.intrinsic("llvm.ctpop.i32", I32, [count])
            b.store(b.add(first, count), nxt_row)
            b.store(new_row, rows[k])
            b.store(b.select(fin, root, nxt), nodes[k])
            still = b.icmp_signed("<", new_row, nv)
            if V > 1:
                still = b.icmp_unsigned("!=", b.bitcast(still, mask_ty), ir.Constant(mask_ty, 0))
            alive = b.or_(alive, still)
        b.cbranch(alive, body, done)
        b.position_at_end(done)

    # ------------------------------------------------------------------ 2. the sums --
    def refill_sums(self, r: ir.Value, r0: ir.Value, t: ir.Value) -> None:
        """Add tree t's leaves to the block at row r; after the last tree, finish it."""
        s, b, v = self.spec, self.b, self.v
        K, V, n_out = s.interleave, s.vector_width, s.n_outputs
        masks, _ = self.rows(r)
        local = b.trunc(b.sub(r, r0), I32)
        blk = b.udiv(local, ir.Constant(I32, V * K))
        first = b.icmp_signed("==", t, self.tb)
        last = b.icmp_signed("==", b.add(t, ir.Constant(I64, 1)), self.te)
        col = None
        if s.value_width == 1 and n_out > 1:
            col = b.load(gep(b, self.d["tree_col"], [t], source_etype=I32), typ=I32)

        def saved(c, k):
            at = b.add(b.mul(blk, ir.Constant(I32, n_out * K)), ir.Constant(I32, c * K + k))
            return gep(b, self.sum_buf, [ir.Constant(I32, 0), at],
                       source_etype=self.sum_buf.allocated_type)

        for k in range(K):
            for c in range(n_out):
                start = v.splat(self.start_value(c, self.tb))
                prev = b.load(saved(c, k), typ=v.ty(self.st))
                b.store(b.select(first, start, prev), self.acc_ptr(c, k))
        for k in range(K):
            at = gep(b, self.leaf_buf, [ir.Constant(I32, 0), b.add(local, ir.Constant(
                I32, k * V))], source_etype=self.leaf_buf.allocated_type)
            slot = b.load(at, typ=v.ty(I32), align=4)
            # rows past the end hold no leaf: node 0's value slot, masked off at the stores
            self.accumulate(k, b.select(masks[k], slot, v.const(I32, 0)), None, col)
        with b.if_else(last) as (final, keep):
            with final:
                with b.if_else(self.finalizing(self.te)) as (fin, partial):
                    with fin:
                        self.finish_block(r, masks)
                    with partial:  # raw sums for the caller's next tree range
                        for k in range(K):
                            for c in range(n_out):
                                self.store_out(self.widen(b.load(
                                    self.acc_ptr(c, k), typ=v.ty(self.st))),
                                    self.out_ptrs(r, k, c), masks[k])
            with keep:
                for k in range(K):
                    for c in range(n_out):
                        b.store(b.load(self.acc_ptr(c, k), typ=v.ty(self.st)), saved(c, k))
