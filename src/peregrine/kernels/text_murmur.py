"""HashingVectorizer's feature hashing, compiled (runtime/text_hash.py runs it; its NumPy
``murmur3_32`` is the reference): for every token i and every n in ngram_range whose tokens
i .. i+n-1 lie in one document, the UTF-8 bytes of the n tokens joined by one space are
hashed with MurmurHash3 x86_32, seed 0 (sklearn.utils.murmurhash3_32(feature, seed=0,
positive=False)); the feature's column is ``abs(h) % n_features`` (abs(-2**31) = 2**31, in
int64) and its sign -1 when ``alternate_sign`` and h < 0.

The n-gram starting at token i grows one token at a time in a scratch buffer (each token is
encoded once per n-gram that holds it, never gathered through index arrays), so an n-gram of
n tokens costs its bytes, not n passes. Returns the number of features written.
"""

from __future__ import annotations

from functools import partial

from llvmlite import ir

from peregrine.kernels.irutil import I8, I32, I64
from peregrine.kernels.text_ir import Fn, GenericKernel, kernel_entry
from peregrine.kernels.text_ir import const as _c

ARGS = ("codes", "tok_s", "tok_e", "tok_doc", "m", "lo", "hi", "n_features", "alt", "scratch",
        "out_col", "out_sign", "out_doc")
_C1, _C2 = 0xCC9E2D51, 0x1B873593




def _i32(v: int) -> ir.Constant:
    return ir.Constant(I32, v)


def _rotl(b: ir.IRBuilder, x: ir.Value, r: int) -> ir.Value:
    return b.or_(b.shl(x, _i32(r)), b.lshr(x, _i32(32 - r)))


def murmur3_32(f: Fn, buf: ir.Value, length: ir.Value) -> ir.Value:
    """MurmurHash3 x86_32, seed 0, of ``buf[0:length]`` (i32; the buffer has 3 bytes of slack
    past ``length``: the tail's bytes are read and masked)."""
    b = f.b
    h = f.var(_i32(0), "mh")
    blocks = b.ashr(length, _c(2))
    q = f.var(_c(0), "mq")
    head, body, done = f.loop("mblock")
    b.cbranch(b.icmp_signed("<", f.get(q), blocks), body, done)
    b.position_at_end(body)
    qv = f.get(q)
    # little-endian bytes, unaligned: x86 and aarch64 load them as one word
    k = b.load(f.addr(buf, I8, b.shl(qv, _c(2))), typ=I32, align=1)
    k = b.mul(_rotl(b, b.mul(k, _i32(_C1)), 15), _i32(_C2))
    x = _rotl(b, b.xor(f.get(h, I32), k), 13)
    b.store(b.add(b.mul(x, _i32(5)), _i32(0xE6546B64)), h)
    b.store(b.add(qv, _c(1)), q)
    b.branch(head)
    b.position_at_end(done)
    rem = b.and_(length, _c(3))
    tail = b.shl(blocks, _c(2))
    k1 = _i32(0)
    for j in (2, 1, 0):
        byte = b.zext(f.load(buf, I8, b.add(tail, _c(j))), I32)
        k1 = b.xor(k1, b.select(b.icmp_signed(">", rem, _c(j)), b.shl(byte, _i32(8 * j)),
                                _i32(0)))
    k1 = b.mul(_rotl(b, b.mul(k1, _i32(_C1)), 15), _i32(_C2))  # 0 stays 0
    hv = b.xor(b.xor(f.get(h, I32), k1), b.trunc(length, I32))
    hv = b.xor(hv, b.lshr(hv, _i32(16)))
    hv = b.mul(hv, _i32(0x85EBCA6B))
    hv = b.xor(hv, b.lshr(hv, _i32(13)))
    hv = b.mul(hv, _i32(0xC2B2AE35))
    return b.xor(hv, b.lshr(hv, _i32(16)))


def hashed_column(f: Fn, buf: ir.Value, length: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(column, flip) of the feature ``buf[0:length]``: ``abs(h) % n_features`` in int64 (so
    abs(-2**31) is 2**31) and whether its sign is -1 (``alt`` and h < 0)."""
    b, a = f.b, f.a
    h = b.sext(murmur3_32(f, buf, length), I64)
    neg = b.icmp_signed("<", h, _c(0))
    col = b.srem(b.select(neg, b.sub(_c(0), h), h), a["n_features"])
    return col, b.and_(neg, b.icmp_signed("!=", a["alt"], _c(0)))


def encode_utf8(f: Fn, codes: ir.Value, buf: ir.Value, start: ir.Value, end: ir.Value,
            pos: ir.Value) -> None:
    """UTF-8 of ``codes[start:end]`` appended at ``buf[*pos]`` (surrogates as 3 bytes, as
    Python's "surrogatepass"); up to 3 bytes past the end are scribbled on."""
    b = f.b
    j = f.var(start, "ej")
    head, body, done = f.loop("enc")
    b.cbranch(b.icmp_signed("<", f.get(j), end), body, done)
    b.position_at_end(body)
    jv = f.get(j)
    c = b.zext(f.load(codes, I32, jv), I64)
    n = b.add(_c(1), b.add(b.zext(b.icmp_unsigned(">=", c, _c(0x80)), I64),
                           b.add(b.zext(b.icmp_unsigned(">=", c, _c(0x800)), I64),
                                 b.zext(b.icmp_unsigned(">=", c, _c(0x10000)), I64))))
    lead = b.select(b.icmp_signed("==", n, _c(1)), c,
                    b.select(b.icmp_signed("==", n, _c(2)), b.or_(_c(0xC0), b.lshr(c, _c(6))),
                             b.select(b.icmp_signed("==", n, _c(3)),
                                      b.or_(_c(0xE0), b.lshr(c, _c(12))),
                                      b.or_(_c(0xF0), b.lshr(c, _c(18))))))
    p = f.get(pos)
    f.store(b.trunc(lead, I8), buf, I8, p)
    for k in (1, 2, 3):  # continuation byte k: bits 6 (n - 1 - k) and up, when k < n
        shift = b.mul(_c(6), b.sub(b.sub(n, _c(1)), _c(k)))
        shift = b.select(b.icmp_signed(">", n, _c(k)), shift, _c(0))
        cont = b.or_(_c(0x80), b.and_(b.lshr(c, shift), _c(0x3F)))
        f.store(b.trunc(cont, I8), buf, I8, b.add(p, _c(k)))
    b.store(b.add(p, n), pos)
    b.store(b.add(jv, _c(1)), j)
    b.branch(head)
    b.position_at_end(done)


def _build(symbol: str, triple: str) -> ir.Module:
    m, fn, b, f = kernel_entry(symbol, triple, ARGS)
    a = f.a
    p = {name: f.ptr(name) for name in ("codes", "tok_s", "tok_e", "tok_doc", "scratch",
                                         "out_col", "out_sign", "out_doc")}
    out = f.var(_c(0), "out")
    i = f.var(_c(0), "i")
    pos = f.var(_c(0), "pos")
    n = f.var(_c(1), "n")
    head, body, done = f.loop("tok")
    b.cbranch(b.icmp_signed("<", f.get(i), a["m"]), body, done)
    b.position_at_end(body)
    iv = f.get(i)
    doc = f.load(p["tok_doc"], I64, iv)
    b.store(_c(0), pos)
    b.store(_c(1), n)
    ghead, gbody, gdone = f.loop("gram")
    nv = f.get(n)
    last = b.add(iv, b.sub(nv, _c(1)))
    check = b.append_basic_block("gram.doc")
    b.cbranch(b.and_(b.icmp_signed("<=", nv, a["hi"]), b.icmp_signed("<", last, a["m"])),
              check, gdone)
    b.position_at_end(check)
    b.cbranch(b.icmp_signed("==", f.load(p["tok_doc"], I64, last), doc), gbody, gdone)
    b.position_at_end(gbody)

    def space() -> None:
        at = f.get(pos)
        f.store(ir.Constant(I8, 0x20), p["scratch"], I8, at)
        b.store(b.add(at, _c(1)), pos)

    f.when(b.icmp_signed(">", nv, _c(1)), space, "sp")
    encode_utf8(f, p["codes"], p["scratch"], f.load(p["tok_s"], I64, last),
            f.load(p["tok_e"], I64, last), pos)

    def emit() -> None:
        col, flip = hashed_column(f, p["scratch"], f.get(pos))
        o = f.get(out)
        f.store(col, p["out_col"], I64, o)
        f.store(b.select(flip, _c(-1), _c(1)), p["out_sign"], I64, o)
        f.store(doc, p["out_doc"], I64, o)
        b.store(b.add(o, _c(1)), out)

    f.when(b.icmp_signed(">=", f.get(n), a["lo"]), emit, "emit")
    b.store(b.add(f.get(n), _c(1)), n)
    b.branch(ghead)
    b.position_at_end(gdone)
    b.store(b.add(f.get(i), _c(1)), i)
    b.branch(head)
    b.position_at_end(done)
    b.ret(f.get(out))
    return m


# the kernel's jit.KernelSource: ``MurmurKernelSpec()``
MurmurKernelSpec = partial(GenericKernel, "text_murmur", 1, _build)
