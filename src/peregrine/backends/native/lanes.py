"""Tree lanes: one row at a time against ``vector_width x interleave`` trees (the latency
kernel for a handful of rows; ``lanes="trees"`` in the schedule), a mixin of codegen's kernel
emitter beside the row-lane walks (walks.py, binned.py, oblivious.py). The row's features are
copied to registers where a lane permute can index them, so no level gathers x."""

from __future__ import annotations

from llvmlite import ir

from peregrine.kernels.irutil import I32, I64, PERMUTES, PERMUTES2, align, gep, imin


class TreeLanes:
    def block_trees(self, r: ir.Value) -> None:
        s, b, v = self.spec, self.b, self.v
        K, V = s.interleave, s.vector_width
        self.xrow = gep(b, self.X, [b.mul(r, self.stride)], source_etype=self.xt)
        self.x_regs = self.row_registers()
        for c in range(s.n_outputs):
            b.store(self.start_value(c, self.tb), self.acc1_ptr(c))
        t1 = b.trunc(self.te, I32)
        # one output, one value a leaf: the leaves of a step are summed at the start of the
        # next (and after the last), the same order; the sum's chain of dependent adds then
        # overlaps the next step's walks instead of closing this one's
        pending = None
        if s.value_width == 1 and s.n_outputs == 1 and V > 1:
            pending = [self.loops.var(v.ty(self.st), v.const(self.st, -0.0), f"pending{k}")
                       for k in range(K)]

        def fold_pending():
            for p in pending:
                b.store(v.fold(b.load(self.acc1_ptr(0), typ=self.st),
                               b.load(p, typ=v.ty(self.st))), self.acc1_ptr(0))

        def trees(tv):
            tv = b.trunc(tv, I32)
            if pending is not None:
                fold_pending()
            groups = []
            for k in range(K):
                ids = b.add(v.splat(tv), v.lane_ids(k * V))
                valid = b.icmp_signed("<", ids, v.splat(t1))
                groups.append((valid, b.select(valid, ids, v.splat(b.sub(t1, ir.Constant(
                    I32, 1))))))
            if s.layout in ("perfect", "binned"):  # slots from t * (2**depth - 1), leaves
                # from t << depth
                roots = [b.mul(t, v.const(I32, 2**s.depth - 1)) for _, t in groups]
                self.group_first = [b.add(tv, ir.Constant(I32, k * V)) for k in range(K)]
                offs = self.walk_perfect(None, roots)
                slots = [b.add(o, b.shl(t, v.const(I32, s.depth)))
                         for o, (_, t) in zip(offs, groups)]
            else:
                roots = [v.gather(self.d["tree_root"], I32, t) for _, t in groups]
                slots = self.walk_sparse(roots, None)
            grouped = s.value_width == 1 and s.n_outputs > 1
            for k, slot in enumerate(slots):
                valid, t = groups[k]
                if pending is not None:  # -0.0: the neutral value (see accumulate)
                    val = self.to_sum(v.gather(self.d["leaf"], self.lt, slot))
                    b.store(b.select(valid, val, v.const(self.st, -0.0)), pending[k])
                    continue
                col = v.gather(self.d["tree_col"], I32, t) if grouped else None
                self.accumulate(k, slot, valid, col)

        self.loops.range(self.tb, self.te, ir.Constant(I64, V * K), trees, "trees")
        if pending is not None:
            fold_pending()
        totals = [self.widen(b.load(self.acc1_ptr(c), typ=self.st)) for c in range(s.n_outputs)]
        rows = r
        with b.if_else(self.finalizing(self.te)) as (final, partial):
            with final:
                for c, total in enumerate(totals):
                    div, base = self.output_scale(c)
                    scaled = b.fdiv(total, div) if s.average else total
                    self.epi.put(c, scaled if s.base_first else b.fadd(scaled, base))
                width = self.epi.run(self.program, s.n_outputs)
                self.loops.range(ir.Constant(I64, 0), b.zext(width, I64), ir.Constant(I64, 1),
                                 lambda c: b.store(self.epi.get(b.trunc(c, I32)),
                                                   self.out_at(rows, c)), "store")
            with partial:
                for c, total in enumerate(totals):
                    b.store(total, self.out_at(rows, ir.Constant(I64, c)))

    def row_registers(self) -> list[ir.Value] | None:
        """The row's features in one or two registers, when the spec says they fit and a lane
        permute can index them: then no level gathers x."""
        s, b, v = self.spec, self.b, self.v
        if self.bin_regs:
            return self.row_bins()
        if not s.row_in_registers:
            return None
        n = row_register_capacity(s.isa, v.w, self.ct)
        b.store(ir.Constant(self.row_buf.allocated_type, None), self.row_buf)
        count = imin(b, self.d["n_features"], ir.Constant(I64, n))

        def copy(f):
            x = self.convert(b.load(gep(b, self.xrow, [f], source_etype=self.xt), typ=self.xt))
            b.store(x, gep(b, self.row_buf, [ir.Constant(I32, 0), f],
                           source_etype=self.row_buf.allocated_type))

        self.loops.range(ir.Constant(I64, 0), count, ir.Constant(I64, 1), copy, "rowcopy")
        return [b.load(gep(b, self.row_buf, [ir.Constant(I32, 0), ir.Constant(I32, j * v.w)],
                           source_etype=self.row_buf.allocated_type), typ=v.ty(self.ct),
                       align=align(self.ct)) for j in range(n // v.w)]

    def fetch_x_row(self, f: ir.Value) -> ir.Value:
        if self.bin_regs:  # a tree-lane word's low bits are its feature: the permute index
            return self.v.permute(self.x_regs, f, self.spec.isa)
        if self.x_regs is None:
            return self.convert(self.v.gather(self.xrow, self.xt, self.feature(f)))
        return self.v.permute(self.x_regs, self.feature(f), self.spec.isa)


def row_register_capacity(isa: str, lanes: int, elem: ir.Type) -> int:
    """How many features a lane permute can index from registers (0: none)."""
    if lanes == 1 or (isa, lanes, elem) not in PERMUTES:
        return 0
    return 2 * lanes if (isa, lanes, elem) in PERMUTES2 else lanes
