"""Span lookup, compiled (runtime/text_char.py calls it for character n-grams; the NumPy
``text_tokens._Tokens.lookup`` is the reference): for each span [s, e) of the code points, its
polynomial hash ``sum (c_{s+j} + 1) B^j`` mod 2**64, a probe of the terms' open-addressing table
(``HashTable``: home slot ``(h * MIX) >> shift``, linear probing, an empty slot holds -1), then
the code points compared with the term it hit; the term's id, or -1.
"""

from __future__ import annotations

from functools import partial

from llvmlite import ir

from peregrine.kernels.irutil import I1, I32, I64
from peregrine.kernels.text_ir import MIX, GenericKernel, kernel_entry
from peregrine.kernels.text_ir import const as _c

ARGS = ("codes", "starts", "ends", "n", "slot_key", "slot_val", "mask", "shift", "base",
        "vcodes", "vstart", "vlen", "out")




def _build(symbol: str, triple: str) -> ir.Module:
    m, fn, b, f = kernel_entry(symbol, triple, ARGS)
    a = f.a
    p = {name: f.ptr(name) for name in ("codes", "starts", "ends", "slot_key", "slot_val",
                                         "vcodes", "vstart", "vlen", "out")}
    h, pw, j = f.var(_c(0), "h"), f.var(_c(1), "pw"), f.var(_c(0), "j")
    pos, found, same = f.var(_c(0), "pos"), f.var(_c(-1), "found"), f.var(_c(0), "same")

    def span(i: ir.Value) -> None:
        s, e = f.load(p["starts"], I64, i), f.load(p["ends"], I64, i)
        b.store(_c(0), h)
        b.store(_c(1), pw)
        b.store(s, j)
        head, body, done = f.loop("hash")  # h = sum (c_{s+j} + 1) B^j, wrapping
        b.cbranch(b.icmp_signed("<", f.get(j), e), body, done)
        b.position_at_end(body)
        jv, pv = f.get(j), f.get(pw)
        c = b.zext(f.load(p["codes"], I32, jv), I64)
        b.store(b.add(f.get(h), b.mul(b.add(c, _c(1)), pv)), h)  # (c + 1): _hash_runs
        b.store(b.mul(pv, a["base"]), pw)
        b.store(b.add(jv, _c(1)), j)
        b.branch(head)
        b.position_at_end(done)
        hv = f.get(h)
        b.store(b.lshr(b.mul(hv, _c(MIX)), a["shift"]), pos)
        b.store(_c(-1), found)
        head, body, done = f.loop("probe")
        b.branch(body)
        b.position_at_end(body)
        at = f.get(pos)
        v = f.load(p["slot_val"], I64, at)
        hit = b.and_(b.icmp_signed(">=", v, _c(0)),
                     b.icmp_unsigned("==", f.load(p["slot_key"], I64, at), hv))
        b.store(b.select(hit, v, _c(-1)), found)
        b.store(b.and_(b.add(at, _c(1)), a["mask"]), pos)
        b.cbranch(b.or_(hit, b.icmp_signed("<", v, _c(0))), done, head)
        b.position_at_end(done)
        got = f.get(found)

        def verify() -> None:  # a hash hit is a term only if the code points are its own
            length = b.sub(e, s)
            b.store(b.zext(b.icmp_signed("==", f.load(p["vlen"], I64, got), length), I64), same)
            base = f.load(p["vstart"], I64, got)
            b.store(_c(0), j)
            head, body, done = f.loop("cmp")
            more = b.and_(b.icmp_signed("<", f.get(j), length),
                          b.trunc(f.get(same), I1))
            b.cbranch(more, body, done)
            b.position_at_end(body)
            jv = f.get(j)
            eq = b.icmp_unsigned("==", f.load(p["codes"], I32, b.add(s, jv)),
                                 f.load(p["vcodes"], I32, b.add(base, jv)))
            b.store(b.zext(eq, I64), same)
            b.store(b.add(jv, _c(1)), j)
            b.branch(head)
            b.position_at_end(done)
            b.store(b.select(b.trunc(f.get(same), I1), got, _c(-1)), found)

        f.when(b.icmp_signed(">=", got, _c(0)), verify, "verify")
        f.store(f.get(found), p["out"], I64, i)

    f.loops.range(_c(0), a["n"], _c(1), span, "span")
    b.ret(_c(0))
    return m


# the kernel's jit.KernelSource: ``SpanKernelSpec()``
SpanKernelSpec = partial(GenericKernel, "text_spans", 1, _build)
