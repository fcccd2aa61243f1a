"""HashingVectorizer's word analyzer, compiled (runtime/text_hash_native.py runs it;
runtime/text.py with text_hash.py is the NumPy path it reproduces, docs/text.md the design):
one document at a time, while its row is in cache,

1. its code points, lowercased through the table, are copied into a scratch buffer and its
   tokens found (runs of token characters at least ``min_len`` long, the word tokenizer's
   class table);
2. for each token and each n in ngram_range whose tokens lie in the document, the n tokens
   joined by one space are UTF-8 encoded into a byte buffer as the n-gram grows and hashed
   with MurmurHash3 x86_32, seed 0 (text_murmur.py's code: sklearn's murmurhash3_32); the
   column is ``abs(h) % n_features``, the sign -1 when ``alternate_sign`` and h < 0;
3. the signed counts are summed per column in a dense array marked in a two-level bitmap
   (text_rows.mark_column), and the row read off the bitmap in column order, the sums that
   cancelled kept as explicit zeros (FeatureHasher's ``sum_duplicates`` keeps them);
4. binary, the l1/l2 norm and the projection: the word kernel's code (text_rows.end_row).

Stop words (``stop_slots`` non-zero) leave the token sequence before the n-grams, as
``_word_ngrams`` drops them: each token is hashed as the terms' table hashes (``sum (c_j + 1)
B^j``), probed in the stop words' table and verified code point by code point.

Returns 0, or 1 when lowercasing met a code point only Python lowercases (as text_kernel.py).
"""

from __future__ import annotations

from functools import partial

from llvmlite import ir

from peregrine.kernels.irutil import F64, I8, I32, I64
from peregrine.kernels.text_ir import (
    GenericKernel,
    kernel_entry,
    lowered,
    probe_slots,
    verify_term,
)
from peregrine.kernels.text_ir import const as _c
from peregrine.kernels.text_murmur import encode_utf8, hashed_column
from peregrine.kernels.text_rows import bitmap_row, end_row, mark_column

# the argument vector, in order (int64 each: an address or a number). Scratch, sized by the
# caller for the longest document (the stop words' table and terms as text_kernel.py's token
# table, ``stop_slots`` 0 when there are none): buf (uint32, its lowercased code points),
# tok_s / tok_e (each token's span in buf), bytes (an n-gram's UTF-8, with 8 bytes of slack);
# seen / bits / top / n_top as in text_char_kernel.py
ARGS = ("codes", "n_docs", "bounds", "klass", "lower", "min_len", "lo", "hi", "n_features",
        "alt", "stop_slots", "stop_mask", "stop_shift", "base", "vcodes", "vstart", "vlen",
        "buf", "tok_s", "tok_e", "bytes", "seen", "bits", "top", "n_top", "reuse",
        "out_idx", "out_cnt", "indptr", "weigh", "idf", "norm", "binary", "out_val", "k", "w",
        "y")


def _build(symbol: str, triple: str) -> ir.Module:
    m, fn, b, f = kernel_entry(symbol, triple, ARGS)
    a = f.a
    p = {name: f.ptr(name) for name in ARGS}
    special = fn.append_basic_block("special")  # lower() needs Python: return 1
    code = lowered(f, p["codes"], p["lower"], b.icmp_unsigned("!=", a["lower"], _c(0)),
                   special)
    reuse = b.icmp_unsigned("!=", a["reuse"], _c(0))
    cttz = ir.Function(m, ir.FunctionType(I64, [I64, ir.IntType(1)]), name="llvm.cttz.i64")
    sqrt = m.declare_intrinsic("llvm.sqrt", [F64])
    fabs = m.declare_intrinsic("llvm.fabs", [F64])

    has_stop = b.icmp_unsigned("!=", a["stop_slots"], _c(0))

    def stop_word(s: ir.Value, e: ir.Value) -> ir.Value:
        """Whether buf[s:e] is one of the stop words (i1)."""
        h = f.var(_c(0), "h")
        pw = f.var(_c(1), "pw")

        def add(i: ir.Value) -> None:  # (c + 1) B^j: the terms' hash (_hash_runs)
            c = b.zext(f.load(p["buf"], I32, i), I64)
            b.store(b.add(f.get(h), b.mul(b.add(c, _c(1)), f.get(pw))), h)
            b.store(b.mul(f.get(pw), a["base"]), pw)

        f.loops.range(s, e, _c(1), add, "stop.hash")
        tid = f.var(probe_slots(f, p["stop_slots"], a["stop_mask"], a["stop_shift"],
                                f.get(h), "stop"), "sid")
        verify_term(f, p, tid, b.sub(e, s),
                    lambda k: b.zext(f.load(p["buf"], I32, b.add(s, k)), I64))
        return b.icmp_signed(">=", f.get(tid), _c(0))

    def token_char(c: ir.Value) -> ir.Value:
        return b.icmp_unsigned("!=", f.load(p["klass"], I8, c), _c(0, I8))

    def tokens(start: ir.Value, end: ir.Value) -> ir.Value:
        """Copy the document lowercased into buf; its tokens' spans; returns how many."""
        n = b.sub(end, start)
        f.loops.range(_c(0), n, _c(1), lambda i: f.store(
            b.trunc(code(b.add(start, i)), I32), p["buf"], I32, i), "copy")
        nt = f.var(_c(0), "nt")
        i = f.var(_c(0), "i")
        head, body, done = f.loop("scan")
        b.cbranch(b.icmp_signed("<", f.get(i), n), body, done)
        b.position_at_end(body)
        s = f.get(i)
        skip = b.append_basic_block("skip")
        run = b.append_basic_block("run")
        b.cbranch(token_char(b.zext(f.load(p["buf"], I32, s), I64)), run, skip)
        b.position_at_end(skip)
        b.store(b.add(s, _c(1)), i)
        b.branch(head)
        b.position_at_end(run)  # a maximal run of token characters
        rh, rb, rd = f.loop("run")
        cur = f.get(i)
        test = b.append_basic_block("run.test")
        b.cbranch(b.icmp_signed("<", cur, n), test, rd)
        b.position_at_end(test)
        b.cbranch(token_char(b.zext(f.load(p["buf"], I32, cur), I64)), rb, rd)
        b.position_at_end(rb)
        b.store(b.add(cur, _c(1)), i)
        b.branch(rh)
        b.position_at_end(rd)
        e = f.get(i)

        def keep() -> None:
            t = f.get(nt)
            f.store(s, p["tok_s"], I64, t)
            f.store(e, p["tok_e"], I64, t)
            b.store(b.add(t, _c(1)), nt)

        def candidate() -> None:
            stopped = f.var(ir.Constant(ir.IntType(1), 0), "stopped")
            f.when(has_stop, lambda: b.store(stop_word(s, e), stopped), "stop")
            f.when(b.not_(f.get(stopped, ir.IntType(1))), keep, "keep")

        f.when(b.icmp_signed(">=", b.sub(e, s), a["min_len"]), candidate, "token")
        b.branch(head)
        b.position_at_end(done)
        return f.get(nt)

    at = f.var(_c(0), "at")  # bytes written of the n-gram being grown

    def grams(j: ir.Value, nt: ir.Value) -> None:
        """The n-grams starting at token j, grown one token at a time, hashed and counted."""
        b.store(_c(0), at)

        def grow(g: ir.Value) -> None:  # the n-gram of tokens j .. j + g (n = g + 1)
            t = b.add(j, g)

            def space() -> None:
                v = f.get(at)
                f.store(ir.Constant(I8, 0x20), p["bytes"], I8, v)
                b.store(b.add(v, _c(1)), at)

            f.when(b.icmp_signed(">", g, _c(0)), space, "sp")
            encode_utf8(f, p["buf"], p["bytes"], f.load(p["tok_s"], I64, t),
                        f.load(p["tok_e"], I64, t), at)

            def count() -> None:
                col, flip = hashed_column(f, p["bytes"], f.get(at))
                mark_column(f, p, col, b.select(flip, _c(-1, I32), _c(1, I32)))

            f.when(b.icmp_signed(">=", b.add(g, _c(1)), a["lo"]), count, "want")

        room = b.sub(nt, j)
        top = b.select(b.icmp_signed("<", room, a["hi"]), room, a["hi"])
        f.loops.range(_c(0), top, _c(1), grow, "gram")

    pos = f.var(_c(0), "pos")
    f.store(_c(0, I32), p["indptr"], I32, _c(0))

    def document(d: ir.Value) -> None:
        start = f.load(p["bounds"], I64, d)
        end = b.sub(f.load(p["bounds"], I64, b.add(d, _c(1))), _c(1))
        b.store(b.select(reuse, _c(0), f.get(pos)), pos)
        row0 = f.get(pos)
        nt = tokens(start, end)
        f.loops.range(_c(0), nt, _c(1), lambda j: grams(j, nt), "tok")
        end_row(f, p, d, row0, bitmap_row(f, p, cttz, a["n_top"], row0), pos, sqrt, fabs)

    f.loops.range(_c(0), a["n_docs"], _c(1), document, "doc")
    b.ret(_c(0))
    b.position_at_end(special)
    b.ret(_c(1))
    return m


# the kernel's jit.KernelSource: ``HashKernelSpec()``
HashKernelSpec = partial(GenericKernel, "text_hash_count", 1, _build)
