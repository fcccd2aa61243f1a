"""Builder helpers for the text kernel (text_kernel.py, text_rows.py): named int64 arguments,
loads and stores by element index, while loops and conditionals on alloca'd variables (SROA
and mem2reg turn them into registers)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from peregrine.kernels.irutil import I32, I64, PTR, Loops, gep


class Fn:
    """Builder state: the argument vector's values, loops on alloca'd variables."""

    def __init__(self, b: ir.IRBuilder, loops: Loops, argv: ir.Value,
                 names: tuple[str, ...]) -> None:
        self.b, self.loops = b, loops
        self.a = {name: b.load(gep(b, argv, [ir.Constant(I64, i)], I64), typ=I64)
                  for i, name in enumerate(names)}

    def ptr(self, name: str) -> ir.Value:
        return self.b.inttoptr(self.a[name], PTR)

    def addr(self, base: ir.Value, elem: ir.Type, idx: ir.Value) -> ir.Value:
        return gep(self.b, base, [idx], elem)

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


def const(v: int, t: ir.Type = I64) -> ir.Constant:
    return ir.Constant(t, v)


@dataclass(frozen=True)
class GenericKernel:
    """``jit.KernelSource`` of a text kernel: one generic function (nothing model-specific
    baked in) named ``peregrine_<name>``, cached under ``<name>-v<version>``."""

    name: str
    version: int
    build: Callable[[str, str], ir.Module]  # (symbol, triple) -> the module

    @property
    def key(self) -> str:
        return f"{self.name}-v{self.version}"

    @property
    def symbol(self) -> str:
        return f"peregrine_{self.name}"

    def build_ir(self, triple: str) -> ir.Module:
        return self.build(self.symbol, triple)


def kernel_entry(symbol: str, triple: str, names: tuple[str, ...]
                 ) -> tuple[ir.Module, ir.Function, ir.IRBuilder, Fn]:
    """A module holding ``int64 symbol(int64 *argv)`` and the builder state at its entry,
    with the arguments ``names`` loaded from argv."""
    m = ir.Module(name=symbol)
    m.triple = triple
    fn = ir.Function(m, ir.FunctionType(I64, [PTR]), name=symbol)
    fn.args[0].add_attribute("noalias")
    entry = fn.append_basic_block("entry")
    b = ir.IRBuilder(entry)
    return m, fn, b, Fn(b, Loops(b, entry), fn.args[0], names)


# ------------------------------------------------ pieces both tokenizer kernels share --
MIX = 0x9E3779B97F4A7C15  # HashTable's multiplier (runtime/text_tokens.py)
LOWER_SPECIAL = 0xFFFFFFFF  # the lowercase table's entry for a code point lower() can't map


def lowered(f: Fn, codes: ir.Value, table: ir.Value, lowering: ir.Value,
            special: ir.Block) -> Callable[[ir.Value], ir.Value]:
    """``code(i)``: the code point at i (int32 array ``codes``), through the lowercase
    ``table`` when ``lowering``, as i64; branches to ``special`` where the table cannot
    lowercase it (the caller lowercases with Python and runs again)."""
    b = f.b

    def code(i: ir.Value) -> ir.Value:
        c = f.load(codes, I32, i)
        cur = b.block
        low = b.append_basic_block("low")
        join = b.append_basic_block("low.join")
        b.cbranch(lowering, low, join)
        b.position_at_end(low)
        lc = f.load(table, I32, b.zext(c, I64))
        ok = b.append_basic_block("low.ok")
        b.cbranch(b.icmp_unsigned("==", lc, const(LOWER_SPECIAL, I32)), special, ok)
        b.position_at_end(ok)
        b.branch(join)
        b.position_at_end(join)
        phi = b.phi(I32)
        phi.add_incoming(c, cur)
        phi.add_incoming(lc, ok)
        return b.zext(phi, I64)

    return code


def home(f: Fn, key: ir.Value, shift: ir.Value) -> ir.Value:
    """A key's home slot: ``(key * MIX) >> shift`` (HashTable._home)."""
    return f.b.lshr(f.b.mul(key, const(MIX)), shift)


def prefetcher(m: ir.Module) -> ir.Function:
    return ir.Function(m, ir.FunctionType(ir.VoidType(), [PTR, I32, I32, I32]),
                       name="llvm.prefetch.p0")


def fetch_slot(f: Fn, prefetch: ir.Function, slots: ir.Value, key: ir.Value,
               shift: ir.Value) -> None:
    """Prefetch a key's home slot of an interleaved (key, value) table."""
    slot = f.addr(slots, I64, f.b.shl(home(f, key, shift), const(1)))
    f.b.call(prefetch, [slot, const(0, I32), const(3, I32), const(1, I32)])


def probe_slots(f: Fn, slots: ir.Value, mask: ir.Value, shift: ir.Value, key: ir.Value,
                name: str) -> ir.Value:
    """HashTable.get for one key of an interleaved (key, value) table: the value, -1 when
    absent (linear probing; an empty slot's value is -1)."""
    b = f.b
    pos = f.var(home(f, key, shift), f"{name}.pos")
    out = f.var(const(-1), f"{name}.out")
    head, body, done = f.loop(name)
    at = f.get(pos)
    val = f.load(slots, I64, b.add(b.shl(at, const(1)), const(1)))
    b.cbranch(b.icmp_signed("<", val, const(0)), done, body)
    b.position_at_end(body)
    k = f.load(slots, I64, b.shl(at, const(1)))
    found = b.append_basic_block(f"{name}.found")
    nxt = b.append_basic_block(f"{name}.next")
    b.cbranch(b.icmp_unsigned("==", k, key), found, nxt)
    b.position_at_end(found)
    b.store(val, out)
    b.branch(done)
    b.position_at_end(nxt)
    b.store(b.and_(b.add(at, const(1)), mask), pos)
    b.branch(head)
    b.position_at_end(done)
    return f.get(out)


def verify_term(f: Fn, p: dict[str, ir.Value], tid: ir.Value, n: ir.Value,
                ours: Callable[[ir.Value], ir.Value]) -> None:
    """A hash hit is the term only if the code points are equal: sets the variable ``tid``
    (a probe's answer, >= 0) to -1 unless term ``tid`` (``vlen``/``vstart`` into ``vcodes``)
    is the ``n`` code points ``ours(k)`` (i64 each), k = 0 .. n - 1."""
    b = f.b

    def check() -> None:
        t = f.get(tid)
        bad = b.append_basic_block("verify.bad")
        same = b.append_basic_block("verify.len")
        b.cbranch(b.icmp_signed("==", f.load(p["vlen"], I64, t), n), same, bad)
        b.position_at_end(same)
        vs = f.load(p["vstart"], I64, t)
        k = f.var(const(0), "k")
        vh, vb, vd = f.loop("verify")
        b.cbranch(b.icmp_signed("<", f.get(k), n), vb, vd)
        b.position_at_end(vb)
        kk = f.get(k)
        theirs = b.zext(f.load(p["vcodes"], I32, b.add(vs, kk)), I64)
        step = b.append_basic_block("verify.step")
        b.cbranch(b.icmp_unsigned("==", ours(kk), theirs), step, bad)
        b.position_at_end(step)
        b.store(b.add(kk, const(1)), k)
        b.branch(vh)
        b.position_at_end(bad)
        b.store(const(-1), tid)
        b.branch(vd)
        b.position_at_end(vd)

    f.when(b.icmp_signed(">=", f.get(tid), const(0)), check, "hit")
