"""Character n-grams of a vocabulary, compiled (runtime/text_char_native.py runs it;
runtime/text_char.py is the NumPy path it reproduces, docs/text.md the design): one document
at a time, while its row is in cache,

1. its code points, lowercased through the table, are copied into a scratch buffer as
   scikit-learn's analyzers see them: ``char`` squeezes each run of two or more whitespace
   code points into one space (``re.sub(r"\\s\\s+", " ", doc)``); ``char_wb`` copies each word
   of ``doc.split()`` padded to ``" " + w + " "``, one after the other;
2. every window the analyzer yields is hashed as it grows one code point at a time (the
   terms' table hash ``sum (c_j + 1) B^j`` mod 2**64) and its home slot prefetched;
3. each window probes the terms' table, is verified code point by code point and emits its
   term's column; or, for HashingVectorizer (``hashing``), as it grows: its new code point's
   UTF-8 appended to the window's bytes, the bytes hashed with MurmurHash3 x86_32
   (text_murmur.py: the column ``abs(h) % n_features``, the sign -1 when ``alt`` and h < 0)
   and its signed count summed (the sums that cancel kept as explicit zeros, as
   text_hash_kernel.py keeps them);
4. the row (text_rows.py): each column is counted in a dense array and marked in a two-level
   bitmap as it is emitted, so the row's sorted (column, count) pairs are read off the set bits
   (no sort: a Shell sort of ~140 columns per document was half the kernel's time); then
   TfidfTransformer.transform and the projection, the word tokenizer's code (text_kernel.py).

The windows: ``char``, for n in ngram_range, every window of n inside the squeezed document
(none when it is shorter); ``char_wb``, for each padded word of length P, every window of n
for each n < P in the range, and the whole word once when P <= max_n (scikit-learn's
``offset == 0`` break, which also yields a word shorter than min_n whole).

Returns 0; 1 when lowercasing met a code point only Python lowercases (as text_kernel.py);
2 when the next document's emits might not fit in ``cap`` entries: ``stopped[0]`` is that
document, the caller grows the outputs and calls again from it (``first``).
"""

from __future__ import annotations

from functools import partial

from llvmlite import ir

from peregrine.kernels.irutil import F64, I8, I32, I64
from peregrine.kernels.text_ir import (
    GenericKernel,
    fetch_slot,
    kernel_entry,
    lowered,
    prefetcher,
    probe_slots,
    verify_term,
)
from peregrine.kernels.text_ir import const as _c
from peregrine.kernels.text_murmur import encode_utf8, hashed_column
from peregrine.kernels.text_rows import bitmap_row, end_row, mark_column

# the argument vector, in order (int64 each: an address or a number). ``nonspace``: uint8 per
# code point, 1 where it is not whitespace (re's \s, text_tokens._class_table). Scratch, sized
# by the caller for the longest document (doc_bound below): buf (uint32 code points), g_s /
# g_n / g_h (each window's start in buf, length, hash), bytes (a window's UTF-8, with 8 bytes
# of slack; hashing only); for the columns (text_rows.mark_column, zeros, left zero): seen
# (int32 per column), bits (a bit per column), top (a bit per word of bits; n_top words)
ARGS = ("codes", "n_docs", "first", "bounds", "nonspace", "lower", "wb",
        "tok_slots", "tok_mask", "tok_shift", "base", "vcodes", "vstart", "vlen", "lo", "hi",
        "buf", "g_s", "g_n", "g_h", "hashing", "n_features", "alt", "bytes", "seen", "bits",
        "top", "n_top", "reuse", "cap", "stopped",
        "out_idx", "out_cnt", "indptr", "weigh", "idf", "norm", "binary", "out_val", "k", "w",
        "y")
SPACE = 0x20


def doc_bound(length: int, lo: int, hi: int) -> int:
    """At most how many windows a document of ``length`` code points yields (each padded word
    of char_wb adds two code points, and one whole-word window)."""
    return (2 * length + 4) * (hi - lo + 2)


def _build(symbol: str, triple: str) -> ir.Module:
    m, fn, b, f = kernel_entry(symbol, triple, ARGS)
    a = f.a
    p = {name: f.ptr(name) for name in ARGS}
    prefetch = prefetcher(m)
    special = fn.append_basic_block("special")  # lower() needs Python: return 1
    code = lowered(f, p["codes"], p["lower"], b.icmp_unsigned("!=", a["lower"], _c(0)),
                   special)
    word_bounded = b.icmp_unsigned("!=", a["wb"], _c(0))
    hashing = b.icmp_unsigned("!=", a["hashing"], _c(0))
    reuse = b.icmp_unsigned("!=", a["reuse"], _c(0))
    cttz = ir.Function(m, ir.FunctionType(I64, [I64, ir.IntType(1)]), name="llvm.cttz.i64")
    sqrt = m.declare_intrinsic("llvm.sqrt", [F64])
    fabs = m.declare_intrinsic("llvm.fabs", [F64])

    def nonspace(c: ir.Value) -> ir.Value:
        return b.icmp_unsigned("!=", f.load(p["nonspace"], I8, c), _c(0, I8))

    def put(c: ir.Value, n: ir.Value) -> None:  # buf[n] = c; n += 1
        at = f.get(n)
        f.store(b.trunc(c, I32), p["buf"], I32, at)
        b.store(b.add(at, _c(1)), n)

    ng = f.var(_c(0), "ng")

    def windows(off: ir.Value, size: ir.Value, whole: ir.Value) -> None:
        """Push every window of buf[off:off + size] the analyzer yields: n in [lo, hi], or
        n == size (the whole padded word) when ``whole``."""
        def start(s: ir.Value) -> None:
            h, pw = f.var(_c(0), "win.h"), f.var(_c(1), "win.pw")
            u8 = f.var(_c(0), "win.u8")  # hashing: the window's UTF-8 bytes so far
            room = b.sub(size, s)
            top = b.select(b.icmp_signed("<", room, a["hi"]), room, a["hi"])

            def grow(n: ir.Value) -> None:  # the window buf[off + s: off + s + n]
                at = b.add(off, s)
                c = b.zext(f.load(p["buf"], I32, b.add(at, b.sub(n, _c(1)))), I64)
                hv = b.add(f.get(h), b.mul(b.add(c, _c(1)), f.get(pw)))  # (c + 1): NUL counts
                b.store(hv, h)
                b.store(b.mul(f.get(pw), a["base"]), pw)
                want = b.or_(b.icmp_signed(">=", n, a["lo"]),
                             b.and_(whole, b.icmp_signed("==", n, size)))

                def push() -> None:
                    q = f.get(ng)
                    f.store(at, p["g_s"], I64, q)
                    f.store(n, p["g_n"], I64, q)
                    f.store(hv, p["g_h"], I64, q)
                    fetch_slot(f, prefetch, p["tok_slots"], hv, a["tok_shift"])
                    b.store(b.add(q, _c(1)), ng)

                def hashed() -> None:
                    # the new code point's UTF-8 appended (the window's earlier ones are
                    # there already), the window hashed and its signed count added now
                    last = b.add(at, b.sub(n, _c(1)))
                    encode_utf8(f, p["buf"], p["bytes"], last, b.add(last, _c(1)), u8)

                    def count() -> None:
                        col, flip = hashed_column(f, p["bytes"], f.get(u8))
                        mark_column(f, p, col, b.select(flip, _c(-1, I32), _c(1, I32)))

                    f.when(want, count, "win.hash")

                yes = b.append_basic_block("win.hashing")
                no = b.append_basic_block("win.terms")
                after = b.append_basic_block("win.after")
                b.cbranch(hashing, yes, no)
                b.position_at_end(yes)
                hashed()
                b.branch(after)
                b.position_at_end(no)
                f.when(want, push, "win.want")
                b.branch(after)
                b.position_at_end(after)

            b.store(_c(0), u8)
            f.loops.range(_c(1), b.add(top, _c(1)), _c(1), grow, "win.n")

        f.loops.range(_c(0), size, _c(1), start, "win.s")

    def squeezed(lo_: ir.Value, end: ir.Value) -> None:
        """char: the document with each whitespace run of two or more made one space."""
        i, n = f.var(lo_, "sq.i"), f.var(_c(0), "sq.n")
        head, body, done = f.loop("sq")
        b.cbranch(b.icmp_signed("<", f.get(i), end), body, done)
        b.position_at_end(body)
        at = f.get(i)
        c = code(at)
        plain = b.append_basic_block("sq.plain")
        space = b.append_basic_block("sq.space")
        b.cbranch(nonspace(c), plain, space)
        b.position_at_end(plain)
        put(c, n)
        b.store(b.add(at, _c(1)), i)
        b.branch(head)
        b.position_at_end(space)
        j = f.var(b.add(at, _c(1)), "sq.j")
        rh, rb, rd = f.loop("sq.run")
        jv = f.get(j)
        test = b.append_basic_block("sq.run.test")
        b.cbranch(b.icmp_signed("<", jv, end), test, rd)
        b.position_at_end(test)
        b.cbranch(nonspace(code(jv)), rd, rb)
        b.position_at_end(rb)
        b.store(b.add(jv, _c(1)), j)
        b.branch(rh)
        b.position_at_end(rd)
        jv = f.get(j)
        put(b.select(b.icmp_signed(">=", b.sub(jv, at), _c(2)), _c(SPACE), c), n)
        b.store(jv, i)
        b.branch(head)
        b.position_at_end(done)
        windows(_c(0), f.get(n), ir.Constant(ir.IntType(1), 0))

    def words(lo_: ir.Value, end: ir.Value) -> None:
        """char_wb: each word copied padded, its windows pushed."""
        i, n = f.var(lo_, "wb.i"), f.var(_c(0), "wb.n")
        head, body, done = f.loop("wb")
        b.cbranch(b.icmp_signed("<", f.get(i), end), body, done)
        b.position_at_end(body)
        at = f.get(i)
        skip = b.append_basic_block("wb.skip")
        word = b.append_basic_block("wb.word")
        b.cbranch(nonspace(code(at)), word, skip)
        b.position_at_end(skip)
        b.store(b.add(at, _c(1)), i)
        b.branch(head)
        b.position_at_end(word)
        off = f.get(n)
        put(_c(SPACE), n)
        wh, test, wd = f.loop("wb.copy")
        jv = f.get(i)
        b.cbranch(b.icmp_signed("<", jv, end), test, wd)
        b.position_at_end(test)
        c = code(jv)
        take = b.append_basic_block("wb.copy.take")
        b.cbranch(nonspace(c), take, wd)
        b.position_at_end(take)
        put(c, n)
        b.store(b.add(jv, _c(1)), i)
        b.branch(wh)
        b.position_at_end(wd)
        put(_c(SPACE), n)
        windows(off, b.sub(f.get(n), off), ir.Constant(ir.IntType(1), 1))
        b.branch(head)
        b.position_at_end(done)

    # resuming at ``first``: its row starts where the previous call's rows ended
    pos = f.var(b.sext(f.load(p["indptr"], I32, a["first"]), I64), "pos")

    def emit(col: ir.Value) -> None:
        mark_column(f, p, col)

    def gram(q: ir.Value) -> None:
        """Probe window q, verify its code points against the term it hit, emit the term."""
        s, n = f.load(p["g_s"], I64, q), f.load(p["g_n"], I64, q)
        tid = f.var(probe_slots(f, p["tok_slots"], a["tok_mask"], a["tok_shift"],
                                f.load(p["g_h"], I64, q), "tok"), "tid")
        verify_term(f, p, tid, n, lambda k: b.zext(f.load(p["buf"], I32, b.add(s, k)), I64))
        t = f.get(tid)
        f.when(b.icmp_signed(">=", t, _c(0)), lambda: emit(t), "term")

    full = fn.append_basic_block("full")  # the outputs may not hold the next document
    stopped_at = f.var(_c(0), "stopped_at")

    def document(d: ir.Value) -> None:
        start = f.load(p["bounds"], I64, d)
        end = b.sub(f.load(p["bounds"], I64, b.add(d, _c(1))), _c(1))
        length = b.sub(end, start)
        bound = b.mul(b.add(b.mul(length, _c(2)), _c(4)),
                      b.add(b.sub(a["hi"], a["lo"]), _c(2)))
        b.store(b.select(reuse, _c(0), f.get(pos)), pos)
        row0 = f.get(pos)
        fits = b.append_basic_block("fits")
        b.store(d, stopped_at)
        b.cbranch(b.and_(b.not_(reuse), b.icmp_signed(">", b.add(row0, bound), a["cap"])),
                  full, fits)
        b.position_at_end(fits)
        b.store(_c(0), ng)
        both = b.append_basic_block("analyzer.wb")
        plain = b.append_basic_block("analyzer.char")
        after = b.append_basic_block("analyzer.after")
        b.cbranch(word_bounded, both, plain)
        b.position_at_end(both)
        words(start, end)
        b.branch(after)
        b.position_at_end(plain)
        squeezed(start, end)
        b.branch(after)
        b.position_at_end(after)
        f.loops.range(_c(0), f.get(ng), _c(1), gram, "probe")
        end_row(f, p, d, row0, bitmap_row(f, p, cttz, a["n_top"], row0), pos, sqrt, fabs)

    f.loops.range(a["first"], a["n_docs"], _c(1), document, "doc")
    b.ret(_c(0))
    b.position_at_end(special)
    b.ret(_c(1))
    b.position_at_end(full)
    f.store(f.get(stopped_at), p["stopped"], I64, _c(0))
    b.ret(_c(2))
    return m


# the kernel's jit.KernelSource: ``CharKernelSpec()``
CharKernelSpec = partial(GenericKernel, "text_char_count", 2, _build)
