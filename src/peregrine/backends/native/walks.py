"""Tree walks and the decision rule, as IR. Mixed into the kernel generator (codegen.py), which
supplies ``b`` (builder), ``v`` (Lanes), ``spec``, ``d`` (descriptor pointers) and ``fetch_x``.

A walk advances ``interleave`` independent lane groups level by level, so their loads overlap.
Walks never test for leaves: PERFECT walks run exactly ``depth`` levels; SPARSE leaves are
self-loops, so a walk may stop once no lane moved.
"""

from __future__ import annotations

from llvmlite import ir

from peregrine.backends.native.layout import CATEGORICAL, FEATURE_MASK, MISSING_ZERO
from peregrine.ir.forest import LIGHTGBM_ZERO_THRESHOLD
from peregrine.kernels.irutil import (
    F32,
    F64,
    I1,
    I8,
    I32,
    I64,
    MAX_TABLE_REGS,
    PERMUTES,
    PERMUTES2,
    align,
    gep,
)

# a tree's leaf values up to this many registers are looked up by permutes instead of
# gathered: 16 x 16 float32, a depth-8 tree
LEAF_TABLE_REGS = 16


class Walks:
    # ------------------------------------------------------------------ PERFECT layout --
    def walk_perfect(self, root: ir.Value | None, roots: list[ir.Value]) -> list[ir.Value]:
        """Walk ``interleave`` lane groups down perfect trees; returns the leaf offsets (0 ..
        2**depth - 1) per group. ``root`` is the scalar root slot when every lane walks the same
        tree (row lanes), else None and ``roots`` holds each lane's root.

        With one tree for all lanes, node fields come from the cheapest place each level
        allows: level 0 is a scalar load, levels whose nodes fit in a few registers are lane
        permutes of the tree's first slots (AVX2/AVX-512), deeper levels gather."""
        s, b, v, K = self.spec, self.b, self.v, self.spec.interleave
        binned = s.layout == "binned"
        oblivious = s.layout == "oblivious"
        idx = [v.const(I32, 0)] * K
        tables: dict[tuple[str, int], ir.Value] = {}

        def table(name: str, elem: ir.Type, start: int) -> ir.Value:
            if (name, start) not in tables:
                p = gep(b, self.d[name], [b.add(root, ir.Constant(I32, start))],
                        source_etype=elem)
                tables[name, start] = b.load(p, typ=v.ty(elem), align=align(elem))
            return tables[name, start]

        for level in range(s.depth):
            first = 2**level - 1  # slot of the level's leftmost node
            regs = max(1, 2**level // v.w)  # registers that hold the whole level
            start = 0 if 2 * first + 1 <= v.w else first
            starts = [start + j * v.w for j in range(regs)]
            # BINNED nodes are one word, so twice as many levels fit the same registers
            use_table = root is not None and regs <= MAX_TABLE_REGS * (2 if binned else 1)
            nodes = []
            for k in range(K):
                if root is not None and (level == 0 or oblivious):  # one node for all lanes
                    first_slot = b.add(root, ir.Constant(I32, first)) if level else root
                    f = b.load(gep(b, self.d["feat"], [first_slot], source_etype=I32), typ=I32)
                    t = None if binned else b.load(gep(b, self.d["thr"], [first_slot],
                                                       source_etype=self.ct), typ=self.ct)
                    nodes.append((v.splat(f), None if binned else v.splat(t), f))
                    continue
                slot = b.add(roots[k], idx[k])
                local = b.sub(idx[k], v.const(I32, start))
                if binned:
                    if root is None and level < self.top_levels:
                        f = self.top_word(k, level, idx[k])
                    elif use_table:
                        f = v.permute([table("feat", I32, j) for j in starts], local, s.isa)
                    else:  # one 32-bit word per node: half the bytes of a (feature, threshold)
                        f = v.gather(self.d["ranks" if root is None else "feat"], I32, slot)
                    t = None
                elif root is None and level < self.top_levels:
                    f, t = self.top_node(k, level, idx[k])
                elif use_table and self.permute_ok(I32) and self.permute_ok(self.ct):
                    f = v.permute([table("feat", I32, j) for j in starts], local, s.isa)
                    t = v.permute([table("thr", self.ct, j) for j in starts], local, s.isa)
                else:
                    f, t = self.gather_node(slot)
                nodes.append((f, t, None))
            for k in range(K):
                f, t, scalar_f = nodes[k]
                x = self.fetch_x(k, f, level, scalar_f, root, idx[k])
                if binned:
                    left = self.decide_lanes(x, f) if root is None else self.decide_binned(x, f)
                else:
                    left = self.decide(x, f, t)
                step = b.sub(v.const(I32, 2), b.zext(left, v.ty(I32)))
                idx[k] = b.add(b.shl(idx[k], v.const(I32, 1)), step)
        return [b.sub(i, v.const(I32, 2**s.depth - 1)) for i in idx]

    def leaf_tables(self) -> bool:
        """Whether a tree's leaves are looked up from registers (``add_leaves_from_tables``):
        row lanes over perfect slots whose leaves fill one to LEAF_TABLE_REGS registers, one
        value per leaf, on targets with a two-register lane permute for the leaf dtype
        (AVX-512: a 256-leaf lookup is 8 of them and 7 selects; with one-register permutes it
        would take twice as many, and a gather costs less)."""
        s = self.spec
        return (self.by_rows and s.layout in ("perfect", "binned") and s.value_width == 1
                and self.v.w <= 2**s.depth <= LEAF_TABLE_REGS * self.v.w
                and PERMUTES2.get((s.isa, self.v.w, self.lt)) is not None)

    def add_leaves_from_tables(self, t32: ir.Value, offs: list[ir.Value],
                               col: ir.Value | None) -> None:
        """Add tree t32's leaf values at each walk's leaf offsets to the walks' sums: the
        tree's leaves loaded once as registers, each walk's picked by lane permutes, where a
        gather per walk costs about one load per lane (most of a depth-8 tree's time on Zen 4
        once its nodes come from registers)."""
        s, b, v = self.spec, self.b, self.v
        first = b.shl(t32, ir.Constant(I32, s.depth))
        regs = [b.load(gep(b, self.d["leaf"], [b.add(first, ir.Constant(I32, j * v.w))],
                           source_etype=self.lt), typ=v.ty(self.lt), align=4)
                for j in range(2**s.depth // v.w)]
        for k, off in enumerate(offs):
            val = self.to_sum(v.permute(regs, off, s.isa))
            p = self.acc_ptr(0 if col is None else col, k)
            b.store(b.fadd(b.load(p, typ=v.ty(self.st)), val), p)

    def top_node(self, k: int, level: int, idx: ir.Value) -> tuple[ir.Value, ir.Value]:
        """Tree lanes, top levels: the level's 2**level slots of this walk's trees are each one
        contiguous run in the slot-major copy; load them all and keep each lane's own."""
        b, v = self.b, self.v
        stride = b.trunc(self.d["top_stride"], I32)
        pair = None
        for s_ in reversed(range(2**level - 1, 2**(level + 1) - 1)):
            at = b.add(b.mul(ir.Constant(I32, s_), stride), self.group_first[k])
            run = b.load(gep(b, self.d["top"], [at], source_etype=I64), typ=v.ty(I64),
                         align=8)
            pair = run if pair is None else b.select(
                b.icmp_signed("==", idx, v.const(I32, s_)), run, pair)
        return self.split_pair(pair)

    def gather_node(self, slot: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(feature word, threshold) of each lane's node."""
        v = self.v
        if not self.spec.node_pairs:
            return v.gather(self.d["feat"], I32, slot), v.gather(self.d["thr"], self.ct, slot)
        return self.split_pair(v.gather(self.d["node"], I64, slot))

    def split_pair(self, pair: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(feature word, float32 threshold) from threshold bits | feature word << 32."""
        b, v = self.b, self.v
        if v.w == 1:
            t = b.bitcast(b.trunc(pair, I32), F32)
            return b.trunc(b.lshr(pair, ir.Constant(I64, 32)), I32), t
        # even / odd 32-bit halves: one two-register shuffle each (vpermt2d), where truncating
        # the 64-bit lanes would take two narrowing moves and a merge per value
        words = b.bitcast(pair, ir.VectorType(I32, 2 * v.w))
        halves = [b.shuffle_vector(words, words, ir.Constant(ir.VectorType(I32, v.w),
                                                             list(range(o, 2 * v.w, 2))))
                  for o in (0, 1)]
        return halves[1], b.bitcast(halves[0], v.ty(F32))

    def permute_ok(self, elem: ir.Type) -> bool:
        return PERMUTES.get((self.spec.isa, self.v.w, elem)) is not None

    # ------------------------------------------------------------------- SPARSE layout --
    def walk_sparse(self, starts: list[ir.Value], steps: ir.Value | None) -> list[ir.Value]:
        """Follow ``i = kid[i] + right`` from each lane's root until no lane moves (or after
        ``steps`` levels, the tree's depth, when every lane walks the same tree)."""
        b, v, K = self.b, self.v, self.spec.interleave
        idx = [self.loops.var(v.ty(I32), s, f"node{k}") for k, s in enumerate(starts)]
        step_i = self.loops.var(I32, ir.Constant(I32, 0), "step")
        cond = b.append_basic_block("walk.cond")
        body = b.append_basic_block("walk.body")
        done = b.append_basic_block("walk.end")
        b.branch(cond)
        b.position_at_end(cond)
        cur_step = b.load(step_i, typ=I32)
        more = ir.Constant(I1, 1) if steps is None else b.icmp_signed("<", cur_step, steps)
        b.cbranch(more, body, done)
        b.position_at_end(body)
        cur = [b.load(p, typ=v.ty(I32)) for p in idx]
        loaded = [(*self.gather_node(c), v.gather(self.d["kid"], I32, c)) for c in cur]
        settled = ir.Constant(I1, 1)
        for k in range(K):
            f, thr, kid = loaded[k]
            left = self.decide(self.fetch_x(k, f, None, None, None, None), f, thr)
            nxt = b.sub(b.add(kid, v.const(I32, 1)), b.zext(left, v.ty(I32)))
            b.store(nxt, idx[k])
            settled = b.and_(settled, v.all_true(b.icmp_signed("==", nxt, cur[k])))
        b.store(b.add(cur_step, ir.Constant(I32, 1)), step_i)
        b.cbranch(settled, done, cond)  # no lane moved: every walk sits on its leaf
        b.position_at_end(done)
        return [b.load(p, typ=v.ty(I32)) for p in idx]

    # ------------------------------------------------------------ the decision rule --
    def decide(self, x: ir.Value, f: ir.Value, t: ir.Value) -> ir.Value:
        """Forest's one rule (see ir/forest.py), lane-wise: True where the row goes left."""
        s, b, v = self.spec, self.b, self.v
        left = b.fcmp_ordered("<=", x, t)  # NaN compares false: goes right unless flagged
        nan_left = b.icmp_signed("<", f, v.const(I32, 0))
        if s.has_nan:
            left = b.or_(left, b.and_(nan_left, b.fcmp_unordered("uno", x, x)))
        if s.has_missing_zero:
            zero = b.fcmp_ordered("<=", v.unary("fabs", x),
                                  v.const(self.ct, LIGHTGBM_ZERO_THRESHOLD))
            mz = b.icmp_unsigned("!=", b.and_(f, v.const(I32, MISSING_ZERO)), v.const(I32, 0))
            left = b.select(b.and_(mz, zero), nan_left, left)
        if s.has_categorical:
            left = self.decide_categorical(f, t, x, left)
        return left

    def decide_categorical(self, f, t, x, left):
        """c = trunc(x); invalid (negative, or past the bitset) -> cat_unknown_left, else the
        bit. Computed for every lane and selected, so no lane branches."""
        s, b, v, ct = self.spec, self.b, self.v, self.ct
        is_cat = b.icmp_unsigned("!=", b.and_(f, v.const(I32, CATEGORICAL)), v.const(I32, 0))
        is_cat = b.and_(is_cat, b.fcmp_ordered("ord", x, x))  # NaN keeps its default direction
        row = b.bitcast(t, v.ty(I32 if ct is F32 else I64))
        if ct is F64:
            row = b.trunc(row, v.ty(I32))
        row = b.select(is_cat, row, v.const(I32, 0))
        tx = v.unary("trunc", x)
        negative = b.fcmp_ordered("<", x if s.cat_negative_before_trunc else tx, v.const(ct, 0.0))
        n_words = b.trunc(self.d["n_cat_words"], I32)
        n_bits = b.uitofp(b.mul(n_words, ir.Constant(I32, 32)), ct)
        in_range = b.fcmp_ordered("<", tx, v.splat(n_bits))  # false for +inf
        valid = b.and_(b.not_(negative), in_range)
        code = b.fptosi(b.select(b.and_(valid, is_cat), tx, v.const(ct, 0.0)), v.ty(I32))
        word_idx = b.add(b.mul(row, v.splat(n_words)), b.lshr(code, v.const(I32, 5)))
        word = v.gather(self.d["cat_bits"], I32, word_idx)
        bit = b.and_(b.lshr(word, b.and_(code, v.const(I32, 31))), v.const(I32, 1))
        unknown = v.gather(self.d["cat_unknown"], I8, row)
        cat_left = b.select(valid, b.icmp_unsigned("!=", bit, v.const(I32, 0)),
                            b.icmp_unsigned("!=", unknown, v.const(I8, 0)))
        return b.select(is_cat, cat_left, left)

    def feature(self, w: ir.Value) -> ir.Value:
        """Feature index of a feature word (scalar or lanes): drop the flag bits."""
        s = self.spec
        if s.layout == "binned":
            return self.binned_feature(w)
        if not (s.has_nan or s.has_missing_zero or s.has_categorical):
            return w
        m = ir.Constant(I32, FEATURE_MASK) if w.type == I32 else self.v.const(I32, FEATURE_MASK)
        return self.b.and_(w, m)
