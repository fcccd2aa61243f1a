"""The text boundary's compiled tokenizer (runtime/text_native.py runs it; runtime/text.py is
the NumPy path it reproduces, docs/text.md the design): one pass over the documents' UTF-32
code points, one document at a time while its row is in cache:

1. scan: lowercase, find the runs of token characters, hash each (``sum (c_j + 1) B^j`` mod 2**64)
   and prefetch its slot in the token table (the misses of a document's tokens overlap);
2. resolve: probe each token's id, verify it code point by code point, drop stop words, emit
   the unigram columns;
3. n-grams: the keys of consecutive known tokens, prefetched, then probed; emit the columns;
4. the row (text_rows.py): sort and count the columns, weigh them (idf, l1/l2) and project.

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
from peregrine.kernels.text_rows import count_row, end_row

# the argument vector, in order (int64 each: an address or a number). Scratch, sized by the
# caller for the longest document: tok_s/tok_n/tok_h (each token's start, length, hash), ids
# (the kept tokens' ids), gkeys (n-gram keys). ``reuse``: every row is written from index 0
# of the outputs (only the projection is wanted, so the rows stay in L1)
ARGS = ("codes", "n_docs", "bounds", "klass", "lower", "min_len",
        "tok_slots", "tok_mask", "tok_shift", "base", "vcodes", "vstart", "vlen", "is_stop",
        "uni_col", "gram_slots", "gram_mask", "gram_shift", "radix", "lo", "hi",
        "tok_s", "tok_n", "tok_h", "ids", "gkeys", "reuse",
        "out_idx", "out_cnt", "indptr", "weigh", "idf", "norm", "binary", "out_val", "k", "w",
        "y")


def _build(symbol: str, triple: str) -> ir.Module:
    m, fn, b, f = kernel_entry(symbol, triple, ARGS)
    a = f.a
    p = {name: f.ptr(name) for name in ARGS}
    lowering = b.icmp_unsigned("!=", a["lower"], _c(0))
    prefetch = prefetcher(m)
    special = fn.append_basic_block("special")  # lower() needs Python: return 1
    code = lowered(f, p["codes"], p["lower"], lowering, special)

    def is_token_char(c: ir.Value) -> ir.Value:
        return b.icmp_unsigned("!=", f.load(p["klass"], I8, c), _c(0, I8))

    def fetch(table: str, key: ir.Value, shift: str) -> None:
        fetch_slot(f, prefetch, p[table], key, a[shift])

    def probe(table: str, mask: str, shift: str, key: ir.Value, name: str) -> ir.Value:
        return probe_slots(f, p[table], a[mask], a[shift], key, name)

    pos = f.var(_c(0), "pos")
    f.store(_c(0, I32), p["indptr"], I32, _c(0))

    def emit(col: ir.Value) -> None:
        at = f.get(pos)
        f.store(b.trunc(col, I32), p["out_idx"], I32, at)
        b.store(b.add(at, _c(1)), pos)

    def scan(d: ir.Value) -> ir.Value:
        """Phase 1: the document's runs (start, length, hash); returns how many."""
        i = f.var(f.load(p["bounds"], I64, d), "i")
        end = b.sub(f.load(p["bounds"], I64, b.add(d, _c(1))), _c(1))
        nt = f.var(_c(0), "nt")
        head, body, done = f.loop("scan")
        b.cbranch(b.icmp_signed("<", f.get(i), end), body, done)
        b.position_at_end(body)
        start = f.get(i)
        skip = b.append_basic_block("skip")
        run = b.append_basic_block("run")
        b.cbranch(is_token_char(code(start)), run, skip)
        b.position_at_end(skip)
        b.store(b.add(start, _c(1)), i)
        b.branch(head)
        b.position_at_end(run)  # a maximal run of token characters
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
        b.store(b.add(f.get(h), b.mul(b.add(c, _c(1)), p0)), h)  # (c + 1): _hash_runs
        b.store(b.mul(p0, a["base"]), pw)
        b.store(b.add(cur, _c(1)), i)
        b.branch(rh)
        b.position_at_end(rd)
        n = b.sub(f.get(i), start)
        token = b.append_basic_block("token")
        b.cbranch(b.icmp_signed("<", n, a["min_len"]), head, token)
        b.position_at_end(token)
        t = f.get(nt)
        hv = f.get(h)
        f.store(start, p["tok_s"], I64, t)
        f.store(n, p["tok_n"], I64, t)
        f.store(hv, p["tok_h"], I64, t)
        fetch("tok_slots", hv, "tok_shift")
        b.store(b.add(t, _c(1)), nt)
        b.branch(head)
        b.position_at_end(done)
        return f.get(nt)

    def resolve(j: ir.Value, kept: ir.Value) -> None:
        """Phase 2: token j's id (-1: no term's token), verified; stop words dropped."""
        start, n = f.load(p["tok_s"], I64, j), f.load(p["tok_n"], I64, j)
        tid = f.var(probe("tok_slots", "tok_mask", "tok_shift", f.load(p["tok_h"], I64, j),
                          "tok"), "tid")

        verify_term(f, p, tid, n, lambda k: code(b.add(start, k)))
        t = f.get(tid)
        known = b.icmp_signed(">=", t, _c(0))
        stop = b.and_(known, b.icmp_unsigned(
            "!=", f.load(p["is_stop"], I8, b.select(known, t, _c(0))), _c(0, I8)))

        def keep() -> None:  # stop words leave the sequence before the n-grams
            at = f.get(kept)
            f.store(t, p["ids"], I64, at)
            b.store(b.add(at, _c(1)), kept)

            def unigram() -> None:
                col = b.sext(f.load(p["uni_col"], I32, t), I64)
                f.when(b.icmp_signed(">=", col, _c(0)), lambda: emit(col), "uni.hit")

            f.when(b.and_(known, b.icmp_unsigned("!=", a["uni_col"], _c(0))), unigram, "uni")

        f.when(b.not_(stop), keep, "keep")

    def keys(j: ir.Value, ng: ir.Value) -> None:
        """Phase 3: the keys of the n-grams ending at kept token j (ids + 1 as digits in base
        radix), each prefetched."""
        t = f.load(p["ids"], I64, j)

        def build() -> None:
            key = f.var(b.add(t, _c(1)), "key")
            scale = f.var(_c(1), "scale")
            g = f.var(_c(2), "g")
            gh, gb, gd = f.loop("gram")
            gn = f.get(g)
            more = b.and_(b.icmp_signed("<=", gn, a["hi"]),
                          b.icmp_signed(">=", b.sub(j, b.sub(gn, _c(1))), _c(0)))
            b.cbranch(more, gb, gd)
            b.position_at_end(gb)
            prev = f.load(p["ids"], I64, b.sub(j, b.sub(gn, _c(1))))
            go = b.append_basic_block("gram.go")
            b.cbranch(b.icmp_signed("<", prev, _c(0)), gd, go)
            b.position_at_end(go)
            sc = b.mul(f.get(scale), a["radix"])
            b.store(sc, scale)
            kv = b.add(f.get(key), b.mul(b.add(prev, _c(1)), sc))
            b.store(kv, key)

            def push() -> None:
                at = f.get(ng)
                f.store(kv, p["gkeys"], I64, at)
                fetch("gram_slots", kv, "gram_shift")
                b.store(b.add(at, _c(1)), ng)

            f.when(b.icmp_signed(">=", gn, a["lo"]), push, "gram.want")
            b.store(b.add(gn, _c(1)), g)
            b.branch(gh)
            b.position_at_end(gd)

        f.when(b.icmp_signed(">=", t, _c(0)), build, "grams")

    def gram(q: ir.Value) -> None:
        col = probe("gram_slots", "gram_mask", "gram_shift", f.load(p["gkeys"], I64, q), "gram")
        f.when(b.icmp_signed(">=", col, _c(0)), lambda: emit(col), "gram.hit")

    reuse = b.icmp_unsigned("!=", a["reuse"], _c(0))

    def document(d: ir.Value) -> None:
        b.store(b.select(reuse, _c(0), f.get(pos)), pos)
        row0 = f.get(pos)
        nt = scan(d)
        kept = f.var(_c(0), "kept")
        f.loops.range(_c(0), nt, _c(1), lambda j: resolve(j, kept), "resolve")
        ng = f.var(_c(0), "ng")
        f.loops.range(_c(0), f.get(kept), _c(1), lambda j: keys(j, ng), "keys")
        f.loops.range(_c(0), f.get(ng), _c(1), gram, "probe")
        row_end = count_row(f, p["out_idx"], p["out_cnt"], row0, f.get(pos))
        end_row(f, p, d, row0, row_end, pos, sqrt, fabs)

    sqrt = m.declare_intrinsic("llvm.sqrt", [F64])
    fabs = m.declare_intrinsic("llvm.fabs", [F64])
    f.loops.range(_c(0), a["n_docs"], _c(1), document, "doc")
    b.ret(_c(0))
    b.position_at_end(special)
    b.ret(_c(1))
    return m


# the kernel's jit.KernelSource: ``TextKernelSpec()``
TextKernelSpec = partial(GenericKernel, "text_count", 2, _build)
