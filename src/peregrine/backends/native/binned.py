"""Walks over the BINNED representation (see representations.py), as IR. Mixed into the kernel
generator (codegen.py) beside ``Walks``.

Each row tile is quantised once into bytes, ``bin(x) = #{thresholds of the feature < x}`` by a
branch-free binary search over the feature's sorted thresholds (NaN: NAN_BIN), stored per walk
group as ``[feature][lane]`` (16 bytes per feature). A level's input then comes from byte
permutes (``vpermi2b``: 128 bytes, 8 features, per instruction) chosen by the feature's high
bits, not from a gather: gathers cost about one load per lane and dominate tree walks on CPUs
whose gathers are slow (Zen 4).
"""

from __future__ import annotations

from llvmlite import ir

from peregrine.backends.native.representations import (
    BIN_SLOTS,
    LANE_NAN_LEFT,
    LANE_RANK_SHIFT,
    NAN_BIN,
    RANK_BITS,
    RANK_MASK,
)
from peregrine.kernels.irutil import I8, I32, I64, MAX_TABLE_REGS, gep

I16 = ir.IntType(16)

BYTES = 64  # one zmm register
VPERMI2B = "llvm.x86.avx512.vpermi2var.qi.512"
VPERMI2W = "llvm.x86.avx512.vpermi2var.hi.512"  # AVX-512BW: 64 words from two registers
VPERMW = "llvm.x86.avx512.permvar.hi.512"
TILE_SLACK = 2 * BYTES  # the last register pair of a walk group may read past its features


SEARCH_LEVELS = BIN_SLOTS.bit_length() - 1  # halving steps of the binary search


def level_first(level: int) -> int:
    """Stored slot of the search's first candidate at ``level``: the thresholds are stored in
    search order (representations.search_order), level by level, so a level's candidates are
    ``2**level`` consecutive slots and candidate ``j`` (the prefix the earlier levels chose)
    is slot ``2**level - 1 + j``."""
    return 2**level - 1


class BinnedWalks:
    def search_tables(self, f32: ir.Value) -> list | None:
        """The candidates of the binary search's levels for scalar feature ``f32``, in
        registers: plain loads of the level's consecutive slots (search order), once per row
        block and feature, then looked up by lane permutes in ``bin_feature`` for every walk
        group of the block, where each level would otherwise be one gather per group (gathers
        were most of the quantisation on Zen 4). Levels 0-3 share one register (15 candidates,
        in level order). None where this target has no lane permute for the compare dtype.
        Returns [(first index, registers)] per level."""
        b, v = self.b, self.v
        if v.w < 8 or not self.permute_ok(self.ct):
            return None
        base = b.mul(f32, ir.Constant(I32, BIN_SLOTS))

        def load(slot: int) -> ir.Value:
            return b.load(gep(b, self.d["bins"], [b.add(base, ir.Constant(I32, slot))],
                              source_etype=self.ct), typ=v.ty(self.ct), align=4)

        out = []
        for level in range(SEARCH_LEVELS):
            n = 1 << level
            # up to 8 registers (the last level of 16 lanes: four two-register permutes and
            # three selects per walk group, measured cheaper than its gather on Zen 4)
            if n > 2 * MAX_TABLE_REGS * v.w:
                break
            if level < 4 and v.w >= 16:  # levels 0-3: slots 0..14, one register
                out.append((level_first(level), out[0][1] if out else [load(0)]))
                continue
            out.append((0, [load(level_first(level) + i * v.w)
                            for i in range(max(1, n // v.w))]))
        return out

    def bin_feature(self, x: ir.Value, f32: ir.Value, nan_bin: ir.Value | None = None,
                    tables: list | None = None) -> ir.Value:
        """bin(x) = rank_base + #{thresholds < x} per lane for feature ``f32`` (a scalar, or one
        per lane): SEARCH_LEVELS halving steps over BIN_SLOTS thresholds padded with +inf and
        stored in search order, so the search needs no length (a rank_base of 1 keeps rank 0
        free for NaN thresholds). ``j``, the candidates chosen so far, doubles plus one bit per
        level; after the last it is the count of thresholds below x. A level's candidate comes
        from ``tables`` (registers) where given, else a gather. ``nan_bin``: the lanes' bin for
        NaN when not NAN_BIN (OBLIVIOUS_BINNED folds the NaN direction into it)."""
        b, v = self.b, self.v
        if isinstance(f32.type, ir.VectorType):  # a feature per lane (one row's features)
            base = b.mul(f32, v.const(I32, BIN_SLOTS))
        else:
            base = v.splat(b.mul(f32, ir.Constant(I32, BIN_SLOTS)))
        j = v.const(I32, 0)
        for level in range(SEARCH_LEVELS):
            if tables is not None and level < len(tables):
                first, regs = tables[level]
                t = v.permute(regs, b.add(j, v.const(I32, first)) if first else j,
                              self.spec.isa)
            else:
                at = b.add(base, b.add(j, v.const(I32, level_first(level))))
                t = v.gather(self.d["bins"], self.ct, at)
            right = b.zext(b.fcmp_ordered("<", t, x), v.ty(I32))
            j = b.or_(b.shl(j, v.const(I32, 1)), right)
        pos = j
        if self.spec.rank_base:
            pos = b.add(pos, v.const(I32, self.spec.rank_base))
        nan = v.const(I32, NAN_BIN) if nan_bin is None else nan_bin
        return b.select(b.fcmp_unordered("uno", x, x), nan, pos)

    def quantise_block(self, dst: ir.Value, gather) -> None:
        """The block's bins, feature by feature (``gather(f)``: the walk groups' values of
        feature f). Software-pipelined by one feature: the next feature's values are gathered
        before this one's searches, whose dependent permute-compare chains would otherwise
        leave each gather's latency exposed (a feature's searches overflow the reorder window:
        the gathers were ~40% of the quantisation on Zen 4)."""
        b, v = self.b, self.v
        xs = [self.loops.var(v.ty(self.ct), x, f"x{k}")
              for k, x in enumerate(gather(ir.Constant(I32, 0)))]
        last = b.sub(self.nf, ir.Constant(I32, 1))

        def search(f):
            f32 = b.trunc(f, I32)
            cur = [b.load(p, typ=v.ty(self.ct)) for p in xs]
            nxt = b.add(f32, ir.Constant(I32, 1))  # the last feature re-reads itself
            nxt = b.select(b.icmp_signed("<", nxt, self.nf), nxt, last)
            for p, x in zip(xs, gather(nxt)):
                b.store(x, p)
            tables = self.search_tables(f32)
            for k, x in enumerate(cur):
                self.store_bins(dst, k, f32, x, tables)

        self.loops.range(ir.Constant(I64, 0), self.d["n_features"], ir.Constant(I64, 1),
                         search, "feat")

    def store_bins(self, dst: ir.Value, k: int, f32: ir.Value, x: ir.Value,
                   tables: list | None = None) -> None:
        b, v = self.b, self.v
        at = b.mul(b.add(b.mul(ir.Constant(I32, k), self.nf), f32), ir.Constant(I32, v.w))
        b.store(b.trunc(self.bin_feature(x, f32, tables=tables), v.ty(I8)),
                gep(b, dst, [at], source_etype=I8), align=1)

    def binned_row_vector(self, k: int, word: ir.Value) -> ir.Value:
        """Every lane reads one feature: 16 contiguous bytes, widened."""
        b, v = self.b, self.v
        at = b.mul(b.add(b.mul(ir.Constant(I32, k), self.nf), self.feature(word)),
                   ir.Constant(I32, v.w))
        raw = b.load(gep(b, self.xblock, [at], source_etype=I8), typ=v.ty(I8), align=1)
        return b.zext(raw, v.ty(I32))

    def binned_lookup(self, k: int, word: ir.Value) -> ir.Value:
        """Each lane's byte ``tile[k][feature][lane]`` from the group's tile registers."""
        b, v = self.b, self.v
        regs = self.group_registers(k)
        f = self.feature(word)
        idx = b.add(b.shl(f, v.const(I32, 4)), v.lane_ids(0))  # feature * 16 + lane
        idx_bytes = b.bitcast(idx, ir.VectorType(I8, BYTES))
        parts = [b.bitcast(v.intrinsic(VPERMI2B, regs[i].type, [regs[i], idx_bytes,
                                                                 regs[i + 1]]), v.ty(I32))
                 for i in range(0, len(regs), 2)]
        bit = 3  # a register pair holds 8 features: pick among pairs by the feature's high bits
        while len(parts) > 1:
            hi = b.icmp_unsigned("!=", b.and_(f, v.const(I32, 1 << bit)), v.const(I32, 0))
            parts = [b.select(hi, parts[i + 1], parts[i]) if i + 1 < len(parts) else parts[i]
                     for i in range(0, len(parts), 2)]
            bit += 1
        # byte 4i of the lookup is lane i's (its index byte is the low byte of idx[i])
        return b.and_(parts[0], v.const(I32, 0xFF))

    def group_registers(self, k: int) -> list[ir.Value]:
        """Walk group k's byte tile as whole registers, an even number of them. Loaded at each
        use: GVN merges the repeats within a tree, and the rest are L1 loads that fold into
        the permutes' memory operand (the tiles of all groups would not fit the registers)."""
        b, v = self.b, self.v
        start = b.mul(b.mul(ir.Constant(I32, k), self.nf), ir.Constant(I32, v.w))
        ty = ir.VectorType(I8, BYTES)
        return [b.load(gep(b, self.xblock, [b.add(start, ir.Constant(I32, j * BYTES))],
                           source_etype=I8), typ=ty, align=1)
                for j in range(self.spec.binned_regs)]

    def decide_binned(self, xbin: ir.Value, word: ir.Value) -> ir.Value:
        """bin(x) <= rank; a NaN (NAN_BIN, above every rank) goes left only where flagged."""
        b, v = self.b, self.v
        rank = b.and_(word, v.const(I32, RANK_MASK))
        left = b.icmp_signed("<=", xbin, rank)
        if self.spec.has_nan:
            nan = b.icmp_signed("==", xbin, v.const(I32, NAN_BIN))
            left = b.or_(left, b.and_(nan, b.icmp_signed("<", word, v.const(I32, 0))))
        return left

    # ------------------------------------------------- tree lanes: one row, many trees --
    def row_bins(self) -> list[ir.Value]:
        """The row's bins as int32 lanes, 16 features per register, in ``bin_regs`` registers
        (2 or 4: whole vpermi2d pairs): quantised once per row by a binary search over each
        feature's thresholds (a gather per step, 16 features a vector), then every level's
        input is one dword permute of these registers (``fetch_x_row``), never a gather."""
        b, v = self.b, self.v
        last = b.sub(self.nf, ir.Constant(I32, 1))
        regs = []
        for j in range(self.bin_regs):
            # lanes past the last feature re-read it: in bounds, never looked up
            ids = v.lane_ids(j * v.w)
            ids = b.select(b.icmp_signed("<", ids, v.splat(last)), ids, v.splat(last))
            x = self.convert(v.gather(self.xrow, self.xt, ids))
            regs.append(b.shl(self.bin_feature(x, ids), v.const(I32, LANE_RANK_SHIFT)))
        return regs

    def decide_lanes(self, xs: ir.Value, word: ir.Value) -> ir.Value:
        """Tree lanes: bin << 8 <= word (unsigned) holds exactly when bin <= rank; a NaN's
        (NAN_BIN, above every rank) goes left only where flagged."""
        b, v = self.b, self.v
        left = b.icmp_unsigned("<=", xs, word)
        if self.spec.has_nan:
            nan = b.icmp_unsigned("==", xs, v.const(I32, NAN_BIN << LANE_RANK_SHIFT))
            flag = b.icmp_unsigned("!=", b.and_(word, v.const(I32, LANE_NAN_LEFT)),
                                   v.const(I32, 0))
            left = b.or_(left, b.and_(nan, flag))
        return left

    def top_word(self, k: int, level: int, idx: ir.Value) -> ir.Value:
        """Tree lanes, top levels: each lane's node word of this walk's 16 trees from the
        group-major copy (layout._top_levels: 16-bit words, slot s of the group's trees one
        run of 16 from run s + 1). Level L's 2**L runs are 2**(L-1) registers; a word permute
        (vpermi2w) picks each lane's run among four, then selects on the slot's high bits."""
        b, v = self.b, self.v
        words = ir.VectorType(I16, 2 * v.w)
        runs = 2 ** self.top_levels
        base = gep(b, self.d["top"], [b.mul(self.group_first[k], ir.Constant(I32, runs))],
                   source_etype=I16)

        def load(run: int, ty: ir.Type) -> ir.Value:
            return b.load(gep(b, base, [ir.Constant(I32, run * v.w)], source_etype=I16),
                          typ=ty, align=32)

        if level == 0:
            return b.zext(load(1, v.ty(I16)), v.ty(I32))
        first = 2**level - 1
        local = b.sub(idx, v.const(I32, first))  # 0 .. 2**level - 1
        # word 2i of each dword: lane i of run (local & 3); word 2i + 1: 0 (entry 0, masked)
        pick = b.or_(b.shl(b.and_(local, v.const(I32, 3)), v.const(I32, 4)), v.lane_ids(0))
        pick = b.bitcast(pick, words)
        regs = [load(2**level + 2 * j, words) for j in range(2 ** (level - 1))]
        if level == 1:
            parts = [v.intrinsic(VPERMW, words, [regs[0], pick])]
        else:
            parts = [v.intrinsic(VPERMI2W, words, [regs[j], pick, regs[j + 1]])
                     for j in range(0, len(regs), 2)]
        parts = [b.and_(b.bitcast(p, v.ty(I32)), v.const(I32, 0xFFFF)) for p in parts]
        bit = 2
        while len(parts) > 1:
            hi = b.icmp_unsigned("!=", b.and_(local, v.const(I32, 1 << bit)), v.const(I32, 0))
            parts = [b.select(hi, parts[i + 1], parts[i]) for i in range(0, len(parts), 2)]
            bit += 1
        return parts[0]

    def binned_feature(self, w: ir.Value) -> ir.Value:
        """Feature index of a BINNED node word (scalar or lanes): above the rank, below the
        NAN_LEFT sign bit."""
        c = (lambda n: ir.Constant(I32, n)) if w.type == I32 else (
            lambda n: self.v.const(I32, n))
        return self.b.and_(self.b.lshr(w, c(RANK_BITS)), c(0x7FFF))
