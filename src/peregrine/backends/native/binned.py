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

from peregrine.backends.native.representations import BIN_SLOTS, NAN_BIN, RANK_BITS, RANK_MASK
from peregrine.kernels.irutil import I8, I32, gep

BYTES = 64  # one zmm register
VPERMI2B = "llvm.x86.avx512.vpermi2var.qi.512"
TILE_SLACK = 2 * BYTES  # the last register pair of a walk group may read past its features


class BinnedWalks:
    def bin_feature(self, x: ir.Value, f32: ir.Value, nan_bin: ir.Value | None = None
                    ) -> ir.Value:
        """bin(x) = rank_base + #{thresholds < x} per lane for feature ``f32`` (a scalar): 8
        halving steps over BIN_SLOTS sorted thresholds padded with +inf, so the search needs no
        length (a rank_base of 1 keeps rank 0 free for NaN thresholds). ``nan_bin``: the lanes'
        bin for NaN when not NAN_BIN (OBLIVIOUS_BINNED folds the NaN direction into it)."""
        b, v = self.b, self.v
        base = v.splat(b.mul(f32, ir.Constant(I32, BIN_SLOTS)))
        pos = v.const(I32, 0)
        step = BIN_SLOTS // 2
        while step:
            probe = b.add(pos, v.const(I32, step - 1))
            t = v.gather(self.d["bins"], self.ct, b.add(base, probe))
            pos = b.select(b.fcmp_ordered("<", t, x), b.add(pos, v.const(I32, step)), pos)
            step //= 2
        if self.spec.rank_base:
            pos = b.add(pos, v.const(I32, self.spec.rank_base))
        nan = v.const(I32, NAN_BIN) if nan_bin is None else nan_bin
        return b.select(b.fcmp_unordered("uno", x, x), nan, pos)

    def store_bins(self, dst: ir.Value, k: int, f32: ir.Value, x: ir.Value) -> None:
        b, v = self.b, self.v
        at = b.mul(b.add(b.mul(ir.Constant(I32, k), self.nf), f32), ir.Constant(I32, v.w))
        b.store(b.trunc(self.bin_feature(x, f32), v.ty(I8)),
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

    def binned_feature(self, w: ir.Value) -> ir.Value:
        """Feature index of a BINNED node word (scalar or lanes): above the rank, below the
        NAN_LEFT sign bit."""
        c = (lambda n: ir.Constant(I32, n)) if w.type == I32 else (
            lambda n: self.v.const(I32, n))
        return self.b.and_(self.b.lshr(w, c(RANK_BITS)), c(0x7FFF))
