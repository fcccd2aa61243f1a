"""One document's row in the text kernel (text_kernel.py): sort and count its columns, then
TfidfTransformer.transform's weighting and the projection, in scikit-learn's order."""

from __future__ import annotations

from llvmlite import ir

from peregrine.kernels.irutil import F64, I32, I64
from peregrine.kernels.text_ir import Fn
from peregrine.kernels.text_ir import const as _c


def count_row(f: Fn, idx: ir.Value, cnt: ir.Value, lo: ir.Value, hi: ir.Value) -> ir.Value:
    """Sort idx[lo:hi] (Shell sort, Knuth's gaps: rows are short, long ones stay n^1.5), then
    fold equal columns into (column, count) pairs in place; returns the row's new end."""
    b = f.b
    n = b.sub(hi, lo)
    gap = f.var(_c(1), "gap")
    gh, gb, gd = f.loop("gap.grow")
    b.cbranch(b.icmp_signed("<", f.get(gap), b.sdiv(n, _c(3))), gb, gd)
    b.position_at_end(gb)
    b.store(b.add(b.mul(f.get(gap), _c(3)), _c(1)), gap)
    b.branch(gh)
    b.position_at_end(gd)
    ph, pb, pd = f.loop("pass")
    b.cbranch(b.icmp_signed(">=", f.get(gap), _c(1)), pb, pd)
    b.position_at_end(pb)
    h = f.get(gap)

    def insert(i: ir.Value) -> None:
        v = f.load(idx, I32, i)
        j = f.var(i, "ins")
        ih, ib, idone = f.loop("ins")
        jj = f.get(j)
        room = b.icmp_signed(">=", jj, b.add(lo, h))
        test = b.append_basic_block("ins.test")
        b.cbranch(room, test, idone)
        b.position_at_end(test)
        u = f.load(idx, I32, b.sub(jj, h))
        b.cbranch(b.icmp_signed(">", u, v), ib, idone)
        b.position_at_end(ib)
        f.store(u, idx, I32, jj)
        b.store(b.sub(jj, h), j)
        b.branch(ih)
        b.position_at_end(idone)
        f.store(v, idx, I32, f.get(j))

    f.loops.range(b.add(lo, h), hi, _c(1), insert, "shell")
    b.store(b.sdiv(h, _c(3)), gap)
    b.branch(ph)
    b.position_at_end(pd)
    out = f.var(lo, "fold.out")

    def fold(i: ir.Value) -> None:
        v = f.load(idx, I32, i)
        o = f.get(out)
        prev_same = b.and_(b.icmp_signed(">", o, lo), b.icmp_signed(
            "==", f.load(idx, I32, b.sub(b.select(b.icmp_signed(">", o, lo), o, b.add(lo, _c(1))),
                                         _c(1))), v))
        same = b.append_basic_block("fold.same")
        new = b.append_basic_block("fold.new")
        after = b.append_basic_block("fold.after")
        b.cbranch(prev_same, same, new)
        b.position_at_end(same)
        last = b.sub(o, _c(1))
        f.store(b.add(f.load(cnt, I64, last), _c(1)), cnt, I64, last)
        b.branch(after)
        b.position_at_end(new)
        f.store(v, idx, I32, o)
        f.store(_c(1), cnt, I64, o)
        b.store(b.add(o, _c(1)), out)
        b.branch(after)
        b.position_at_end(after)

    f.loops.range(lo, hi, _c(1), fold, "fold")
    return f.get(out)


def weigh_row(f: Fn, d: ir.Value, lo: ir.Value, hi: ir.Value, p: dict, sqrt, fabs) -> None:
    """TfidfTransformer.transform on one row (binary, idf, norm), then ``y[d, j]``: the sum
    of ``v * W[col, j]`` over the row's entries in column order from 0.0 (csr_matvecs adds each
    entry's product into y, zero-initialised, in that order: the same additions)."""
    b, a = f.b, f.a
    idx, cnt, idf, val = p["out_idx"], p["out_cnt"], p["idf"], p["out_val"]
    w, y = p["w"], p["y"]
    binary = b.icmp_unsigned("!=", a["binary"], _c(0))

    def tf(i: ir.Value) -> None:
        v = b.select(binary, ir.Constant(F64, 1.0), b.sitofp(f.load(cnt, I64, i), F64))
        # without idf_ the caller passes ones: v * 1.0 is v
        weight = f.load(idf, F64, b.sext(f.load(idx, I32, i), I64))
        f.store(b.fmul(v, weight), val, F64, i)

    f.loops.range(lo, hi, _c(1), tf, "tf")

    def normalise(l2: bool) -> None:
        s = f.var(ir.Constant(F64, 0.0), "norm.sum")

        def add(i: ir.Value) -> None:
            v = f.load(val, F64, i)
            term = b.fmul(v, v) if l2 else b.call(fabs, [v])
            b.store(b.fadd(f.get(s, F64), term), s)

        f.loops.range(lo, hi, _c(1), add, "norm.add")
        total = f.get(s, F64)

        def divide() -> None:
            by = b.call(sqrt, [total]) if l2 else total
            f.loops.range(lo, hi, _c(1), lambda i: f.store(
                b.fdiv(f.load(val, F64, i), by), val, F64, i), "norm.div")

        f.when(b.fcmp_ordered("!=", total, ir.Constant(F64, 0.0)), divide, "norm.nz")

    f.when(b.icmp_signed("==", a["norm"], _c(2)), lambda: normalise(True), "l2")
    f.when(b.icmp_signed("==", a["norm"], _c(1)), lambda: normalise(False), "l1")
    k = a["k"]

    def output(j: ir.Value) -> None:  # y[d, j]: 0.0 + v * W[col, j] entry after entry
        acc = f.var(ir.Constant(F64, 0.0), "proj.acc")

        def add(i: ir.Value) -> None:
            wv = f.load(w, F64, b.add(b.mul(b.sext(f.load(idx, I32, i), I64), k), j))
            b.store(b.fadd(f.get(acc, F64), b.fmul(f.load(val, F64, i), wv)), acc)

        f.loops.range(lo, hi, _c(1), add, "proj.add")
        f.store(f.get(acc, F64), y, F64, b.add(b.mul(d, k), j))

    f.loops.range(_c(0), k, _c(1), output, "project")


def end_row(f: Fn, p: dict, d: ir.Value, row0: ir.Value, row_end: ir.Value, pos: ir.Value,
            sqrt, fabs) -> None:
    """Close document d's row [row0, row_end): the next row starts at its end, indptr[d + 1],
    then, when asked (``weigh``), its values and projection (weigh_row)."""
    b = f.b
    b.store(row_end, pos)
    f.store(b.trunc(row_end, I32), p["indptr"], I32, b.add(d, _c(1)))
    f.when(b.icmp_unsigned("!=", f.a["weigh"], _c(0)),
           lambda: weigh_row(f, d, row0, row_end, p, sqrt, fabs), "weigh")


def mark_column(f: Fn, p: dict, col: ir.Value, step: ir.Value | None = None) -> None:
    """Count one occurrence of ``col`` in the row being built: ``seen[col] += 1``, and on the
    first one its bit in ``bits`` (one per column) and in ``top`` (one per 64 columns).
    ``step`` (i32, +-1: HashingVectorizer's signs) adds it instead; a column whose sum came
    back to 0 is then new again, so the bit itself says whether it is marked."""
    b = f.b
    seen = f.load(p["seen"], I32, col)
    word = b.lshr(col, _c(6))
    bit = b.shl(_c(1), b.and_(col, _c(63)))

    def first() -> None:
        f.store(b.or_(f.load(p["bits"], I64, word), bit), p["bits"], I64, word)
        top = b.lshr(col, _c(12))
        f.store(b.or_(f.load(p["top"], I64, top), b.shl(_c(1), b.and_(word, _c(63)))),
                p["top"], I64, top)

    new = b.icmp_signed("==", seen, _c(0, I32)) if step is None else b.icmp_unsigned(
        "==", b.and_(f.load(p["bits"], I64, word), bit), _c(0))
    f.when(new, first, "mark.first")
    f.store(b.add(seen, _c(1, I32) if step is None else step), p["seen"], I32, col)


def bitmap_row(f: Fn, p: dict, cttz, n_top: ir.Value, row0: ir.Value) -> ir.Value:
    """The row's (column, count) pairs in column order from the marks of ``mark_column``,
    written from ``row0`` of out_idx / out_cnt (the sorted, counted row count_row makes, with
    no sort: the set bits are read in order), sums that cancelled to 0 included (scipy's
    sum_duplicates keeps them as explicit zeros); the marks are cleared for the next row.
    Returns the row's end."""
    b = f.b
    out = f.var(row0, "bm.out")
    false = ir.Constant(ir.IntType(1), 0)

    def top_word(tw: ir.Value) -> None:
        t = f.var(f.load(p["top"], I64, tw), "bm.t")

        def words() -> None:
            f.store(_c(0), p["top"], I64, tw)
            th, tb, td = f.loop("bm.words")
            b.cbranch(b.icmp_unsigned("!=", f.get(t), _c(0)), tb, td)
            b.position_at_end(tb)
            tv = f.get(t)
            word = b.add(b.shl(tw, _c(6)), b.call(cttz, [tv, false]))
            b.store(b.and_(tv, b.sub(tv, _c(1))), t)
            w = f.var(f.load(p["bits"], I64, word), "bm.w")
            f.store(_c(0), p["bits"], I64, word)
            wh, wb, wd = f.loop("bm.cols")
            b.cbranch(b.icmp_unsigned("!=", f.get(w), _c(0)), wb, wd)
            b.position_at_end(wb)
            wv = f.get(w)
            col = b.add(b.shl(word, _c(6)), b.call(cttz, [wv, false]))
            b.store(b.and_(wv, b.sub(wv, _c(1))), w)
            o = f.get(out)
            count = f.load(p["seen"], I32, col)
            f.store(b.trunc(col, I32), p["out_idx"], I32, o)
            f.store(b.sext(count, I64), p["out_cnt"], I64, o)
            f.store(_c(0, I32), p["seen"], I32, col)
            b.store(b.add(o, _c(1)), out)
            b.branch(wh)
            b.position_at_end(wd)
            b.branch(th)
            b.position_at_end(td)

        f.when(b.icmp_unsigned("!=", f.get(t), _c(0)), words, "bm.top")

    f.loops.range(_c(0), n_top, _c(1), top_word, "bm.scan")
    return f.get(out)
