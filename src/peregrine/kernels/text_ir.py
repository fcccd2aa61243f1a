"""Builder helpers for the text kernel (text_kernel.py, text_rows.py): named int64 arguments,
loads and stores by element index, while loops and conditionals on alloca'd variables (SROA
and mem2reg turn them into registers)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from peregrine.kernels.irutil import I64, PTR, Loops, gep


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
