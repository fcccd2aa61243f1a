"""Small helpers over llvmlite.ir for the kernel generator: lane-polymorphic values (one code
path emits SIMD and scalar walks), counted loops, and the x86 lane permutes."""

from __future__ import annotations

from llvmlite import ir

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()
FLOATS = {"float32": F32, "float64": F64}

# lane permutes (vpermd/vpermps) by (isa, lanes, element type): a 16- or 8-entry table lookup
# in one instruction, used for the levels whose nodes fit in one register
PERMUTES = {
    ("avx512", 16, I32): "llvm.x86.avx512.permvar.si.512",
    ("avx512", 16, F32): "llvm.x86.avx512.permvar.sf.512",
    ("avx512", 8, I32): "llvm.x86.avx2.permd",
    ("avx512", 8, F32): "llvm.x86.avx2.permps",
    ("avx2", 8, I32): "llvm.x86.avx2.permd",
    ("avx2", 8, F32): "llvm.x86.avx2.permps",
}
# two-register permutes (vpermi2d/vpermi2ps): a 2 x lanes entry table in one instruction
PERMUTES2 = {
    ("avx512", 16, I32): "llvm.x86.avx512.vpermi2var.d.512",
    ("avx512", 16, F32): "llvm.x86.avx512.vpermi2var.ps.512",
    ("avx512", 8, I32): "llvm.x86.avx512.vpermi2var.d.256",
    ("avx512", 8, F32): "llvm.x86.avx512.vpermi2var.ps.256",
}
MAX_TABLE_REGS = 4  # deeper levels gather: a lookup over more registers costs more than a gather


class Splat(ir.Constant):
    """A vector constant with ``value`` in every lane, written as LLVM's ``splat (T v)``. The
    list form makes ``width`` constant objects and formats each of them wherever the vector
    appears: a third of the Python time building a forest kernel's IR text (LightGBM 500 x
    256 leaves). LLVM parses both into the same constant."""

    def __init__(self, elem: ir.Type, width: int, value) -> None:
        scalar = value if isinstance(value, ir.Constant) else ir.Constant(elem, value)
        self.type = ir.VectorType(elem, width)
        self.constant = [scalar] * width  # as the list form holds it, for llvmlite's own uses

    def _get_reference(self) -> str:
        c = self.constant[0]
        return f"splat ({c.type} {c.get_reference()})"


_SPLATS: dict[tuple, Splat] = {}


def splat(elem: ir.Type, width: int, value) -> Splat:
    """The shared :class:`Splat` of ``value`` (constants carry no parent, so one object serves
    every module; its text is formatted once)."""
    key = (str(elem), width, type(value), repr(value))  # repr: -0.0 is not 0.0, NaN is NaN
    c = _SPLATS.get(key)
    if c is None:
        if len(_SPLATS) > 4096:
            _SPLATS.clear()
        c = _SPLATS[key] = Splat(elem, width, value)
    return c


class Lanes:
    """Values of ``width`` lanes: vectors when width > 1, scalars otherwise, so one code path
    emits both SIMD and scalar walks."""

    def __init__(self, module: ir.Module, b: ir.IRBuilder, width: int) -> None:
        self.m, self.b, self.w = module, b, width

    def ty(self, elem: ir.Type) -> ir.Type:
        return elem if self.w == 1 else ir.VectorType(elem, self.w)

    def const(self, elem: ir.Type, value) -> ir.Constant:
        return ir.Constant(elem, value) if self.w == 1 else splat(elem, self.w, value)

    def splat(self, scalar: ir.Value) -> ir.Value:
        if self.w == 1:
            return scalar
        v = self.b.insert_element(ir.Constant(self.ty(scalar.type), ir.Undefined), scalar,
                                  ir.Constant(I32, 0))
        return self.b.shuffle_vector(v, v, splat(I32, self.w, 0))

    def lane_ids(self, first: int) -> ir.Value:
        return self.const(I32, first) if self.w == 1 else ir.Constant(
            self.ty(I32), list(range(first, first + self.w)))

    def intrinsic(self, name: str, ret: ir.Type, args: list[ir.Value], **kw) -> ir.Value:
        fn = self.m.globals.get(name)
        if fn is None:
            fn = ir.Function(self.m, ir.FunctionType(ret, [a.type for a in args]), name=name)
        return self.b.call(fn, args, **kw)

    def _suffix(self, elem: ir.Type) -> str:
        base = {F32: "f32", F64: "f64", I32: "i32", I8: "i8", I64: "i64"}[elem]
        return base if self.w == 1 else f"v{self.w}{base}"

    def addr(self, base: ir.Value, elem: ir.Type, idx: ir.Value) -> ir.Value:
        p = gep(self.b, base, [idx], source_etype=elem)
        if self.w > 1:
            p.type = ir.VectorType(PTR, self.w)  # llvmlite types a vector GEP as a scalar ptr
        return p

    def gather(self, base: ir.Value, elem: ir.Type, idx: ir.Value) -> ir.Value:
        """base[idx] per lane (every lane valid)."""
        p = self.addr(base, elem, idx)
        if self.w == 1:
            return self.b.load(p, typ=elem)
        s = self._suffix(elem)
        return self.intrinsic(f"llvm.masked.gather.{s}.v{self.w}p0", self.ty(elem), [
            p, ir.Constant(I32, align(elem)),
            self.const(I1, 1), ir.Constant(self.ty(elem), ir.Undefined)])

    def masked_load(self, ptrs: ir.Value, elem: ir.Type, mask: ir.Value) -> ir.Value:
        s = self._suffix(elem)
        return self.intrinsic(f"llvm.masked.gather.{s}.v{self.w}p0", self.ty(elem), [
            ptrs, ir.Constant(I32, align(elem)), mask, self.const(elem, 0.0)])

    def masked_store(self, value: ir.Value, ptrs: ir.Value, elem: ir.Type, mask: ir.Value):
        s = self._suffix(elem)
        self.intrinsic(f"llvm.masked.scatter.{s}.v{self.w}p0", ir.VoidType(), [
            value, ptrs, ir.Constant(I32, align(elem)), mask])

    def permute(self, tables: list[ir.Value], idx: ir.Value, isa: str) -> ir.Value:
        """tables[idx // lanes][idx % lanes] per lane, from registers (see PERMUTES)."""
        elem = tables[0].type.element
        two = PERMUTES2.get((isa, self.w, elem))
        if two is not None and len(tables) > 1:
            parts = [self.intrinsic(two, tables[0].type, [tables[i], idx, tables[i + 1]])
                     for i in range(0, len(tables), 2)]
            span = 2 * self.w
        else:
            one = PERMUTES[isa, self.w, elem]
            parts = [self.intrinsic(one, t.type, [t, idx]) for t in tables]
            span = self.w
        while len(parts) > 1:  # pick among the partial lookups by the index's higher bits
            bit = self.b.icmp_unsigned("!=", self.b.and_(idx, self.const(I32, span)),
                                       self.const(I32, 0))
            parts = [self.b.select(bit, parts[i + 1], parts[i]) for i in range(0, len(parts), 2)]
            span *= 2
        return parts[0]

    def all_true(self, mask: ir.Value) -> ir.Value:
        if self.w == 1:
            return mask
        bits = self.b.bitcast(mask, ir.IntType(self.w))
        return self.b.icmp_unsigned("==", bits, ir.Constant(ir.IntType(self.w), -1))

    def unary(self, name: str, x: ir.Value) -> ir.Value:
        elem = x.type if self.w == 1 else x.type.element
        return self.intrinsic(f"llvm.{name}.{self._suffix(elem)}", x.type, [x])

    def sum(self, x: ir.Value) -> ir.Value:
        """Sum of the lanes of a float64 value, in lane order: the same bits on every target
        (a reassociating reduction would follow each target's register width)."""
        if self.w == 1:
            return x
        return self.intrinsic(f"llvm.vector.reduce.fadd.{self._suffix(F64)}", F64,
                              [ir.Constant(F64, -0.0), x])


    def fold(self, start: ir.Value, x: ir.Value) -> ir.Value:
        """``start + x[0] + x[1] + ...``, one lane after the other (a library's sequential sum
        of the values the lanes hold: no reassociation, so the same bits on every target)."""
        if self.w == 1:
            return self.b.fadd(start, x)
        elem = x.type.element
        return self.intrinsic(f"llvm.vector.reduce.fadd.{self._suffix(elem)}", elem, [start, x])


def align(elem: ir.Type) -> int:
    return {F32: 4, F64: 8, I32: 4, I8: 1, I64: 8}[elem]


class Loops:
    """Counted loops on alloca'd counters (SROA/mem2reg turn them into phis)."""

    def __init__(self, b: ir.IRBuilder, entry: ir.Block) -> None:
        self.b, self.entry = b, entry

    def var(self, typ: ir.Type, init: ir.Value | None = None, name: str = "") -> ir.Value:
        with self.b.goto_block(self.entry):
            self.b.position_at_start(self.entry)
            slot = self.b.alloca(typ, name=name)
        if init is not None:
            self.b.store(init, slot)
        return slot

    def range(self, start: ir.Value, stop: ir.Value, step: ir.Value, body, name: str) -> None:
        b = self.b
        i = self.var(start.type, start, name)
        cond = b.append_basic_block(f"{name}.cond")
        loop = b.append_basic_block(f"{name}.body")
        done = b.append_basic_block(f"{name}.end")
        b.branch(cond)
        b.position_at_end(cond)
        cur = b.load(i, typ=start.type)
        b.cbranch(b.icmp_signed("<", cur, stop), loop, done)
        b.position_at_end(loop)
        body(cur)
        b.store(b.add(cur, step), i)
        b.branch(cond)
        b.position_at_end(done)


def void_function(module: ir.Module, name: str, args: list[ir.Type], noalias: tuple[int, ...]
                  ) -> tuple[ir.Function, ir.IRBuilder, Loops, ir.Block]:
    """A ``void name(args...)`` kernel ready for its body: the arguments at ``noalias``
    marked so, an entry block that holds only allocas (``Loops.var``, fixed-size scratch), and
    the builder positioned in the block after it. Returns (function, builder, loops, entry)."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), args), name=name)
    for i in noalias:
        fn.args[i].add_attribute("noalias")
    entry = fn.append_basic_block("entry")
    b = ir.IRBuilder(entry)
    loops = Loops(b, entry)
    body = fn.append_basic_block("start")
    b.branch(body)
    b.position_at_end(body)
    return fn, b, loops, entry


def gep(b: ir.IRBuilder, base: ir.Value, idx: list, source_etype: ir.Type) -> ir.Value:
    p = b.gep(base, idx, source_etype=source_etype)
    p.type = PTR  # opaque pointers: the element type travels with each load/store
    return p


def imin(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)

