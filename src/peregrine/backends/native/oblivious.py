"""Walks over the OBLIVIOUS_BINNED representation (see representations.py), as IR. Mixed into
the kernel generator (codegen.py) beside ``Walks`` and ``BinnedWalks``.

An oblivious tree tests one (feature, rank) per level, so a level is the same byte compare for
every row: with the row tile quantised to bytes (``bin(x)``, as BINNED), 64 rows fit one
register, a level is one load, one ``vpcmpub`` and one masked OR of the level's bit into the
64 leaf indices, and the leaf is looked up with word permutes (``vpermi2w``: 64 entries in two
registers, 32 rows per instruction) of the tree's leaf table stored as 16-bit planes (plane p
holds bits 16p..16p+15 of the 64 leaf values), then the planes are interleaved back into whole
values with in-lane unpacks (two stages for float64; byte planes with ``vpermb`` needed three,
and measured 2-3% slower). No gathers at all: on Zen 4 the leaf gather was about 40% of an
OBLIVIOUS walk.

The unpacks interleave within 128-bit lanes, so the values come out in a fixed scrambled order;
the tile is filled in the inverse order (``row_of_position``: each fill lane reads the row whose
value will land in a natural position), so the sums stay in row order for the shared epilogue.
"""

from __future__ import annotations

from functools import cache

from llvmlite import ir

from peregrine.backends.native.representations import (
    BIN_SLOTS,
    PLANE_BYTES,
    RANK_BITS,
)
from peregrine.kernels.irutil import I8, I32, gep

I16 = ir.IntType(16)

BYTES = 64  # one zmm register: 64 rows of bins, or one byte plane of a 64-leaf table
GROUP_WALKS = 4  # 16-lane walks per 64-row group
VPERMI2W = "llvm.x86.avx512.vpermi2var.hi.512"
LANE_BYTES = 16  # punpck* interleave within 128-bit lanes
STEPS_MASK = 0xFF  # a feature's search steps, in the low byte of its info word (kid)


def _unpack_mask(elem: int, hi: bool) -> list[int]:
    """Shuffle mask (indices into a ++ b, in elements of ``elem`` bytes) of punpckl/h."""
    n, per = BYTES // elem, LANE_BYTES // elem
    half = range(per // 2, per) if hi else range(per // 2)
    return [i for lane in range(n // per) for j in half
            for i in (lane * per + j, n + lane * per + j)]


def unpack_chain(planes: list, shuffle, elem: int = PLANE_BYTES) -> list:
    """Interleave planes of ``elem``-byte parts into whole values: pairs of columns merged
    with unpacks of growing element size, so that after log2(len(planes)) stages each
    register holds whole values. ``shuffle(a, b, elem, mask)`` applies one unpack (to IR, or
    to labels)."""
    cols = [[p] for p in planes]
    while len(cols) > 1:
        merged = []
        for a_regs, b_regs in zip(cols[::2], cols[1::2]):
            merged.append([shuffle(a, b, elem, _unpack_mask(elem, hi))
                           for a, b in zip(a_regs, b_regs) for hi in (False, True)])
        cols, elem = merged, elem * 2
    return cols[0]


@cache
def row_of_position(itemsize: int) -> tuple[int, ...]:
    """Which of the group's 64 rows the tile's byte position i must hold, so that value q of
    output register m (halves of 32 rows in order, each half's ``unpack_chain``) belongs to
    row m * (64 / itemsize) + q."""
    unit, per_half = PLANE_BYTES, BYTES // PLANE_BYTES  # rows looked up per word permute

    def shuffle(a, b, elem, mask):
        both, n = a + b, elem // unit
        return [x for i in mask for x in both[i * n:(i + 1) * n]]

    n_planes = itemsize // unit
    out = []
    for h in range(BYTES // per_half):
        planes = [[(p, h * per_half + i) for i in range(per_half)] for p in range(n_planes)]
        out += unpack_chain(planes, shuffle)
    per_reg = BYTES // itemsize
    rows = [0] * BYTES
    for m, reg in enumerate(out):
        for q in range(per_reg):
            value = reg[q * n_planes:(q + 1) * n_planes]
            pos = value[0][1]
            assert value == [(p, pos) for p in range(n_planes)]  # whole values, parts in order
            rows[pos] = m * per_reg + q
    return tuple(rows)


class ObliviousBinnedWalks:
    def fill_oblivious(self, dst: ir.Value, nvalid: ir.Value, f32: ir.Value) -> None:
        """Quantise feature ``f32`` of the block's rows into the tile, [group][feature][64]
        bytes, position i of a group holding row row_of_position(i). The search is emitted
        once per step count and the feature's count picks one (a switch per feature, the
        same every block, so well predicted)."""
        b, v = self.b, self.v
        info = b.load(gep(b, self.d["kid"], [f32], source_etype=I32), typ=I32)
        steps = b.and_(info, ir.Constant(I32, STEPS_MASK))
        nan_bin = v.splat(b.lshr(info, ir.Constant(I32, 8)))
        xs = self.fill_inputs(nvalid, f32)
        done = b.append_basic_block("fill.done")
        switch = b.switch(steps, done)
        for m in range(RANK_BITS + 1):
            case = b.append_basic_block(f"fill.steps{m}")
            switch.add_case(ir.Constant(I32, m), case)
            b.position_at_end(case)
            for (g, c), x in xs.items():
                at = b.mul(b.add(b.mul(ir.Constant(I32, g), self.nf), f32),
                           ir.Constant(I32, BYTES))
                at = b.add(at, ir.Constant(I32, c * v.w))
                b.store(b.trunc(self.bin_in_search_order(x, f32, nan_bin, m), v.ty(I8)),
                        gep(b, dst, [at], source_etype=I8), align=1)
            b.branch(done)
        b.position_at_end(done)

    def fill_inputs(self, nvalid: ir.Value, f32: ir.Value) -> dict:
        """Feature ``f32`` of the group's rows, 16 tile positions at a time, in the compare
        dtype; lanes past the block's rows re-read its last row."""
        b, v = self.b, self.v
        order = row_of_position(self.st_bytes)
        last = v.splat(b.sub(nvalid, ir.Constant(I32, 1)))
        stride32 = v.splat(b.trunc(self.stride, I32))
        xs = {}
        for g in range(self.spec.interleave // GROUP_WALKS):
            for c in range(BYTES // v.w):
                rows = ir.Constant(v.ty(I32), [g * BYTES + order[c * v.w + j]
                                               for j in range(v.w)])
                valid = b.icmp_signed("<", rows, v.splat(nvalid))
                off = b.mul(b.select(valid, rows, last), stride32)
                xs[g, c] = self.convert(v.gather(self.xb_fill, self.xt,
                                                 b.add(off, v.splat(f32))))
        return xs

    def bin_in_search_order(self, x: ir.Value, f32: ir.Value, nan_bin: ir.Value,
                            steps: int) -> ir.Value:
        """bin(x) = rank_base + #{thresholds < x} by a binary search of ``steps`` steps over
        thresholds stored in search order (representations.py): step s's candidates are 2**s
        consecutive values, read as whole registers and picked per lane with permutes, so the
        search gathers nothing (8 dependent gathers per value were most of the fill)."""
        b, v, s = self.b, self.v, self.spec
        base = b.mul(f32, ir.Constant(I32, BIN_SLOTS))

        def candidates(step: int, at: ir.Value | None) -> ir.Value:
            """Step ``step``'s candidate ``at`` per lane (None: its first, for every lane)."""
            first = b.add(base, ir.Constant(I32, 2**step - 1))
            if at is None:
                return v.splat(b.load(gep(b, self.d["bins"], [first], source_etype=self.ct),
                                      typ=self.ct))
            if not self.permute_ok(self.ct):  # float64 compares: gather
                return v.gather(self.d["bins"], self.ct, b.add(v.splat(first), at))
            regs = [b.load(gep(b, self.d["bins"], [b.add(first, ir.Constant(I32, j * v.w))],
                               source_etype=self.ct), typ=v.ty(self.ct), align=4)
                    for j in range(max(1, 2**step // v.w))]
            return v.permute(regs, at, s.isa)

        pos = v.const(I32, 0)
        step = 0
        if steps % 2:
            pos = b.select(b.fcmp_ordered("<", candidates(0, None), x),
                           v.const(I32, 2**(steps - 1)), pos)
            step = 1
        # two halving steps at a time: the step's candidate and both of the next step's are
        # compared at once (sorted, so pos grows by a quarter per threshold below x): half the
        # dependent permute-compare chain of a plain binary search
        while step < steps:
            quarter = 2 ** (steps - 2 - step)
            if step == 0:
                mid, lo = candidates(0, None), candidates(1, None)
                hi = candidates(1, v.const(I32, 1))
            else:
                mid = candidates(step, b.lshr(pos, v.const(I32, steps - step)))
                at = b.lshr(pos, v.const(I32, steps - 1 - step))
                lo, hi = candidates(step + 1, at), candidates(step + 1,
                                                              b.add(at, v.const(I32, 1)))
            for t in (lo, mid, hi):
                pos = b.select(b.fcmp_ordered("<", t, x), b.add(pos, v.const(I32, quarter)), pos)
            step += 2
        if s.rank_base:
            pos = b.add(pos, v.const(I32, s.rank_base))
        return b.select(b.fcmp_unordered("uno", x, x), nan_bin, pos)

    def walk_oblivious_binned(self, t: ir.Value, col: ir.Value | None) -> None:
        """Tree t against every 64-row group of the block: leaf indices from byte compares,
        leaf values from byte-plane permutes, added to the walks' sums in tree order."""
        s, b = self.spec, self.b
        t32 = b.trunc(t, I32)
        root = b.mul(t32, ir.Constant(I32, 2**s.depth - 1))
        vec = ir.VectorType(I8, BYTES)
        levels = []
        for level in range(s.depth):  # one node per level, shared by every group
            w = b.load(gep(b, self.d["feat"], [b.add(root, ir.Constant(I32, 2**level - 1))],
                           source_etype=I32), typ=I32)
            ranks = b.load(gep(b, self.d["ranks"], [b.add(root, ir.Constant(I32, 2**level - 1))],
                               source_etype=I32), typ=I32)  # the rank in each byte
            levels.append((self.binned_feature(w), b.bitcast(self.v.splat(ranks), vec)))
        n_planes = self.st_bytes // PLANE_BYTES
        words = ir.VectorType(I16, BYTES // PLANE_BYTES)
        plane_base = b.mul(t32, ir.Constant(I32, n_planes * 2 * BYTES))
        planes = [[b.load(gep(b, self.d["leaf"], [b.add(plane_base, ir.Constant(
            I32, (2 * p + j) * BYTES))], source_etype=I8), typ=words, align=BYTES)
                   for j in range(2)] for p in range(n_planes)]
        zero = ir.Constant(vec, [0] * BYTES)
        for g in range(s.interleave // GROUP_WALKS):
            idx = zero
            for level, (f, rank) in enumerate(levels):
                at = b.mul(b.add(b.mul(ir.Constant(I32, g), self.nf), f), ir.Constant(I32, BYTES))
                x = b.load(gep(b, self.xblock, [at], source_etype=I8), typ=vec, align=1)
                right = b.icmp_unsigned(">", x, rank)  # NaN's direction is in its bin
                bit = ir.Constant(vec, [1 << (s.depth - 1 - level)] * BYTES)
                idx = b.select(right, b.add(idx, bit), idx)  # one masked byte add
            values = []
            for h in range(2):  # 32 rows per word permute
                half = b.zext(b.shuffle_vector(idx, idx, ir.Constant(
                    ir.VectorType(I32, 32), list(range(32 * h, 32 * h + 32)))), words)
                looked = [b.bitcast(self.v.intrinsic(VPERMI2W, words, [lo, half, hi]), vec)
                          for lo, hi in planes]
                values += unpack_chain(looked, self._unpack_ir)
            vals = [b.bitcast(r, ir.VectorType(self.st, BYTES // self.st_bytes)) for r in values]
            per_walk = len(vals) // GROUP_WALKS  # registers of values per 16-row walk
            for k in range(GROUP_WALKS):
                regs = vals[k * per_walk:(k + 1) * per_walk]
                val = regs[0] if per_walk == 1 else b.shuffle_vector(
                    regs[0], regs[1], ir.Constant(ir.VectorType(I32, self.v.w),
                                                  list(range(self.v.w))))
                p = self.acc_ptr(0 if col is None else col, g * GROUP_WALKS + k)
                b.store(b.fadd(b.load(p, typ=self.v.ty(self.st)), val), p)

    def _unpack_ir(self, a: ir.Value, b_: ir.Value, elem: int, mask: list[int]) -> ir.Value:
        b = self.b
        ty = ir.VectorType(ir.IntType(8 * elem), BYTES // elem)
        out = b.shuffle_vector(b.bitcast(a, ty), b.bitcast(b_, ty),
                               ir.Constant(ir.VectorType(I32, len(mask)), mask))
        return b.bitcast(out, ir.VectorType(I8, BYTES))


__all__ = ["GROUP_WALKS", "ObliviousBinnedWalks", "row_of_position", "unpack_chain"]
