"""The text boundary's compiled tokenizer (runtime/text_native.py runs it; runtime/text.py is
the NumPy path it reproduces, docs/text.md the design): one pass over the documents' UTF-32
code points that lowercases, finds the token runs, hashes and verifies each token, builds the
n-gram keys, counts each document's terms and, when asked, weighs them (idf, l1/l2 norm) and
applies the linear projection, one document at a time while its row is in cache.

One generic kernel (``text_count``), compiled once per machine and cached by ``jit``; the
spec's options are runtime arguments, read from one int64 argument vector (``ARGS``). The
arithmetic is scikit-learn's, in its order and without contraction (no fast-math flags, so
LLVM never fuses a multiply and an add):

* tf-idf: ``v = count * idf[col]`` (TfidfTransformer.transform's ``X.data *= idf_[X.indices]``);
* l2: ``s += v * v`` left to right over the row, ``v / sqrt(s)`` when ``s != 0``; l1: ``s +=
  fabs(v)``, ``v / s`` (sklearn's ``inplace_csr_row_normalize_l1/l2``);
* projection: ``y[k] += v * W[col, k]`` over the row's entries in column order starting from
  0.0 (scipy's ``csr_matvecs``, the product sklearn's ``safe_sparse_dot`` makes).

Returns 0, or 1 when lowercasing met a code point whose ``str.lower()`` is not one
context-free code point (U+0130 lengthens, U+03A3 depends on its neighbours: Final_Sigma);
the caller then lowercases with Python and runs again without the table.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from peregrine.kernels.irutil import F64, I8, I32, I64, PTR, Loops, gep

# the argument vector, in order (int64 each: an address or a number)
ARGS = ("codes", "n_docs", "bounds", "klass", "lower", "min_len",
        "tok_slots", "tok_mask", "tok_shift", "base", "vcodes", "vstart", "vlen", "is_stop",
        "uni_col", "gram_slots", "gram_mask", "gram_shift", "radix", "lo", "hi", "hist",
        "out_idx", "out_cnt", "indptr", "weigh", "idf", "norm", "binary", "out_val", "k", "w",
        "y")
MIX = 0x9E3779B97F4A7C15  # HashTable's multiplier (runtime/text_tokens.py)
LOWER_SPECIAL = 0xFFFFFFFF  # the lowercase table's entry for a code point lower() can't map


@dataclass(frozen=True)
class TextKernelSpec:
    """``jit.KernelSource`` of the text kernel (one generic kernel: no parameters)."""

    version: int = 1

    @property
    def key(self) -> str:
        return f"text_count-v{self.version}"

    @property
    def symbol(self) -> str:
        return "peregrine_text_count"

    def build_ir(self, triple: str) -> ir.Module:
        return _build(self.symbol, triple)


class _Fn:
    """Builder state: the argument vector's values, loops on alloca'd variables."""

    def __init__(self, b: ir.IRBuilder, loops: Loops, argv: ir.Value) -> None:
        self.b, self.loops = b, loops
        self.a = {name: b.load(gep(b, argv, [ir.Constant(I64, i)], I64), typ=I64)
                  for i, name in enumerate(ARGS)}

    def ptr(self, name: str) -> ir.Value:
        return self.b.inttoptr(self.a[name], PTR)

    def load(self, base: ir.Value, elem: ir.Type, idx: ir.Value) -> ir.Value:
        return self.b.load(gep(self.b, base, [idx], elem), typ=elem)

    def store(self, value: ir.Value, base: ir.Value, elem: ir.Type, idx: ir.Value) -> None:
        self.b.store(value, gep(self.b, base, [idx], elem))

    def var(self, init: ir.Value, name: str) -> ir.Value:
        return self.loops.var(init.type, init, name)

    def get(self, slot: ir.Value, typ: ir.Type = I64) -> ir.Value:
        return self.b.load(slot, typ=typ)

    def loop(self, name: str):
        """(head, body, done) blocks of a while loop; the caller fills head's test."""
        b = self.b
        head = b.append_basic_block(f"{name}.head")
        body = b.append_basic_block(f"{name}.body")
        done = b.append_basic_block(f"{name}.done")
        b.branch(head)
        b.position_at_end(head)
        return head, body, done

    def when(self, cond: ir.Value, then, name: str) -> None:
        b = self.b
        yes = b.append_basic_block(f"{name}.then")
        after = b.append_basic_block(f"{name}.after")
        b.cbranch(cond, yes, after)
        b.position_at_end(yes)
        then()
        if not b.block.is_terminated:
            b.branch(after)
        b.position_at_end(after)


def _c(v: int, t: ir.Type = I64) -> ir.Constant:
    return ir.Constant(t, v)


def _build(symbol: str, triple: str) -> ir.Module:
    m = ir.Module(name="peregrine_text")
    m.triple = triple
    fn = ir.Function(m, ir.FunctionType(I64, [PTR]), name=symbol)
    fn.args[0].add_attribute("noalias")
    entry = fn.append_basic_block("entry")
    b = ir.IRBuilder(entry)
    f = _Fn(b, Loops(b, entry), fn.args[0])
    a = f.a
    codes, bounds, klass = f.ptr("codes"), f.ptr("bounds"), f.ptr("klass")
    lower_p, slots, vcodes = f.ptr("lower"), f.ptr("tok_slots"), f.ptr("vcodes")
    vstart, vlen, is_stop = f.ptr("vstart"), f.ptr("vlen"), f.ptr("is_stop")
    uni_col, gslots, hist = f.ptr("uni_col"), f.ptr("gram_slots"), f.ptr("hist")
    out_idx, out_cnt, indptr = f.ptr("out_idx"), f.ptr("out_cnt"), f.ptr("indptr")
    idf, out_val, w, y = f.ptr("idf"), f.ptr("out_val"), f.ptr("w"), f.ptr("y")
    lowering = b.icmp_unsigned("!=", a["lower"], _c(0))
    sqrt = m.declare_intrinsic("llvm.sqrt", [F64])
    fabs = m.declare_intrinsic("llvm.fabs", [F64])
    special = fn.append_basic_block("special")  # lower() needs Python: return 1

    def code(i: ir.Value) -> ir.Value:
        """The (lowercased) code point at i, as i64; branches to ``special`` when the table
        cannot lowercase it."""
        c = f.load(codes, I32, i)
        cur = b.block
        low = b.append_basic_block("low")
        join = b.append_basic_block("low.join")
        b.cbranch(lowering, low, join)
        b.position_at_end(low)
        lc = f.load(lower_p, I32, b.zext(c, I64))
        ok = b.append_basic_block("low.ok")
        b.cbranch(b.icmp_unsigned("==", lc, _c(LOWER_SPECIAL, I32)), special, ok)
        b.position_at_end(ok)
        b.branch(join)
        b.position_at_end(join)
        phi = b.phi(I32)
        phi.add_incoming(c, cur)
        phi.add_incoming(lc, ok)
        return b.zext(phi, I64)

    def is_token_char(c: ir.Value) -> ir.Value:
        return b.icmp_unsigned("!=", f.load(klass, I8, c), _c(0, I8))

    def probe(table: ir.Value, mask: ir.Value, shift: ir.Value, key: ir.Value,
              name: str) -> ir.Value:
        """HashTable.get for one key: the value, -1 when absent (linear probing)."""
        pos = f.var(b.lshr(b.mul(key, _c(MIX)), shift), f"{name}.pos")
        out = f.var(_c(-1), f"{name}.out")
        head, body, done = f.loop(name)
        p = f.get(pos)
        val = f.load(table, I64, b.add(b.shl(p, _c(1)), _c(1)))
        b.cbranch(b.icmp_signed("<", val, _c(0)), done, body)
        b.position_at_end(body)
        k = f.load(table, I64, b.shl(p, _c(1)))
        found = b.append_basic_block(f"{name}.found")
        nxt = b.append_basic_block(f"{name}.next")
        b.cbranch(b.icmp_unsigned("==", k, key), found, nxt)
        b.position_at_end(found)
        b.store(val, out)
        b.branch(done)
        b.position_at_end(nxt)
        b.store(b.and_(b.add(p, _c(1)), mask), pos)
        b.branch(head)
        b.position_at_end(done)
        return f.get(out)

    def emit(col: ir.Value, pos: ir.Value) -> None:
        p = f.get(pos)
        f.store(b.trunc(col, I32), out_idx, I32, p)
        b.store(b.add(p, _c(1)), pos)

    pos = f.var(_c(0), "pos")
    f.store(_c(0, I32), indptr, I32, _c(0))
    hi, radix = a["hi"], a["radix"]

    def document(d: ir.Value) -> None:
        i = f.var(f.load(bounds, I64, d), "i")
        end = b.sub(f.load(bounds, I64, b.add(d, _c(1))), _c(1))
        row0 = f.get(pos)
        f.loops.range(_c(0), hi, _c(1), lambda k: f.store(_c(-1), hist, I64, k), "clear")
        head, body, done = f.loop("scan")
        b.cbranch(b.icmp_signed("<", f.get(i), end), body, done)
        b.position_at_end(body)
        start = f.get(i)
        c0 = code(start)
        skip = b.append_basic_block("skip")
        run = b.append_basic_block("run")
        b.cbranch(is_token_char(c0), run, skip)
        b.position_at_end(skip)
        b.store(b.add(start, _c(1)), i)
        b.branch(head)
        # a maximal run of token characters: its polynomial hash sum c_j B^j (mod 2**64)
        b.position_at_end(run)
        h = f.var(_c(0), "h")
        pw = f.var(_c(1), "pw")
        rh, rb, rd = f.loop("run")
        cur = f.get(i)
        b.cbranch(b.icmp_signed("<", cur, end), rb, rd)
        b.position_at_end(rb)
        c = code(cur)
        take = b.append_basic_block("run.take")
        b.cbranch(is_token_char(c), take, rd)
        b.position_at_end(take)
        p0 = f.get(pw)
        b.store(b.add(f.get(h), b.mul(c, p0)), h)
        b.store(b.mul(p0, a["base"]), pw)
        b.store(b.add(cur, _c(1)), i)
        b.branch(rh)
        b.position_at_end(rd)
        n = b.sub(f.get(i), start)
        token = b.append_basic_block("token")
        b.cbranch(b.icmp_signed("<", n, a["min_len"]), head, token)
        b.position_at_end(token)
        tid = f.var(probe(slots, a["tok_mask"], a["tok_shift"], f.get(h), "tok"), "tid")

        def verify() -> None:  # a hash hit is the term only if the code points are equal
            t = f.get(tid)
            bad = b.append_basic_block("verify.bad")
            same = b.append_basic_block("verify.len")
            b.cbranch(b.icmp_signed("==", f.load(vlen, I64, t), n), same, bad)
            b.position_at_end(same)
            vs = f.load(vstart, I64, t)
            j = f.var(_c(0), "j")
            vh, vb, vd = f.loop("verify")
            b.cbranch(b.icmp_signed("<", f.get(j), n), vb, vd)
            b.position_at_end(vb)
            jj = f.get(j)
            mine = code(b.add(start, jj))
            theirs = b.zext(f.load(vcodes, I32, b.add(vs, jj)), I64)
            step = b.append_basic_block("verify.step")
            b.cbranch(b.icmp_unsigned("==", mine, theirs), step, bad)
            b.position_at_end(step)
            b.store(b.add(jj, _c(1)), j)
            b.branch(vh)
            b.position_at_end(bad)
            b.store(_c(-1), tid)
            b.branch(vd)
            b.position_at_end(vd)

        f.when(b.icmp_signed(">=", f.get(tid), _c(0)), verify, "hit")
        t = f.get(tid)
        known = b.icmp_signed(">=", t, _c(0))
        stop = b.and_(known, b.icmp_unsigned(
            "!=", f.load(is_stop, I8, b.select(known, t, _c(0))), _c(0, I8)))
        keep = b.append_basic_block("keep")
        b.cbranch(stop, head, keep)  # stop words leave the sequence before the n-grams
        b.position_at_end(keep)

        def unigram() -> None:
            col = b.sext(f.load(uni_col, I32, t), I64)
            f.when(b.icmp_signed(">=", col, _c(0)), lambda: emit(col, pos), "uni.hit")

        f.when(b.and_(known, b.icmp_unsigned("!=", a["uni_col"], _c(0))), unigram, "uni")

        def grams() -> None:  # key of the n-gram ending here: digits id + 1 in base radix
            key = f.var(b.add(t, _c(1)), "key")
            scale = f.var(_c(1), "scale")
            g = f.var(_c(2), "g")
            gh, gb, gd = f.loop("gram")
            b.cbranch(b.icmp_signed("<=", f.get(g), hi), gb, gd)
            b.position_at_end(gb)
            gn = f.get(g)
            prev = f.load(hist, I64, b.sub(gn, _c(2)))
            go = b.append_basic_block("gram.go")
            b.cbranch(b.icmp_signed("<", prev, _c(0)), gd, go)
            b.position_at_end(go)
            sc = b.mul(f.get(scale), radix)
            b.store(sc, scale)
            kv = b.add(f.get(key), b.mul(b.add(prev, _c(1)), sc))
            b.store(kv, key)

            def look() -> None:
                col = probe(gslots, a["gram_mask"], a["gram_shift"], kv, "gram")
                f.when(b.icmp_signed(">=", col, _c(0)), lambda: emit(col, pos), "gram.hit")

            f.when(b.icmp_signed(">=", gn, a["lo"]), look, "gram.want")
            b.store(b.add(gn, _c(1)), g)
            b.branch(gh)
            b.position_at_end(gd)

        f.when(known, grams, "grams")
        # shift the history: hist[0] is the latest token (ids of unknown tokens are -1)
        f.loops.range(_c(1), hi, _c(1), lambda k: f.store(
            f.load(hist, I64, b.sub(b.sub(hi, k), _c(1))), hist, I64, b.sub(hi, k)), "shift")
        f.store(t, hist, I64, _c(0))
        b.branch(head)
        b.position_at_end(done)
        row_end = _count_row(f, out_idx, out_cnt, row0, f.get(pos))
        b.store(row_end, pos)
        f.store(b.trunc(row_end, I32), indptr, I32, b.add(d, _c(1)))
        f.when(b.icmp_unsigned("!=", a["weigh"], _c(0)),
               lambda: _weigh_row(f, d, row0, row_end, out_idx, out_cnt, idf, out_val, w, y,
                                  sqrt, fabs), "weigh")

    f.loops.range(_c(0), a["n_docs"], _c(1), document, "doc")
    b.ret(_c(0))
    b.position_at_end(special)
    b.ret(_c(1))
    return m


def _count_row(f: _Fn, idx: ir.Value, cnt: ir.Value, lo: ir.Value, hi: ir.Value) -> ir.Value:
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


def _weigh_row(f: _Fn, d: ir.Value, lo: ir.Value, hi: ir.Value, idx: ir.Value, cnt: ir.Value,
               idf: ir.Value, val: ir.Value, w: ir.Value, y: ir.Value, sqrt, fabs) -> None:
    """TfidfTransformer.transform on one row (binary, idf, norm), then ``y[d] += v * W[col]``
    entry by entry (csr_matvecs' order)."""
    b, a = f.b, f.a
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

    def project(i: ir.Value) -> None:
        v = f.load(val, F64, i)
        wrow = b.mul(b.sext(f.load(idx, I32, i), I64), k)
        yrow = b.mul(d, k)

        def axpy(j: ir.Value) -> None:
            at = b.add(yrow, j)
            f.store(b.fadd(f.load(y, F64, at), b.fmul(v, f.load(w, F64, b.add(wrow, j)))),
                    y, F64, at)

        f.loops.range(_c(0), k, _c(1), axpy, "axpy")

    f.loops.range(lo, hi, _c(1), project, "project")
