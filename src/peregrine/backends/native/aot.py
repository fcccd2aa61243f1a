"""Ahead-of-time libraries: a compiled program as a shared library and a C header, loadable
from C with no Python and no LLVM, linking only libc and libm (docs/export.md).

The library runs exactly what the native backend runs in the process (``executable.py``):
each forest with the element-wise ops fused after it in one kernel (``fuse_plan``), the
row-wise ops around forests as fused row kernels (``kernels/rowwise.py``), an output made of
row-wise ops only as one row kernel. The kernels are generated from the same specs, for the
requested triple and CPU, with the model's numbers (packed node arrays, epilogue programs,
row-kernel parameters) embedded as constant data instead of passed from NumPy. A small C
runtime (``aot_c.py``) wraps them into one public function per method and input dtype.

Steps:
  lower      spec -> :class:`Lowered`: per (method, input dtype) a list of kernel calls over
             row-block buffers, the kernel specs and the data blobs (``Lowered``)
  emit       each kernel spec -> optimised object for the triple (cached on disk), and one
             object of the constant data (``emit_objects``)
  link       C runtime + objects -> ``cc -shared`` (``aot_c.link``)

Why the kernels keep their descriptor interface rather than baking the model into code: the
same kernel (and so the same bits) as in the process, and compile time that does not grow with
the number of nodes.
"""

from __future__ import annotations

import hashlib
import platform
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from peregrine import config
from peregrine.backends.native import NATIVE_OPS
from peregrine.backends.native.codegen import DESC, SCALARS
from peregrine.backends.native.fusion import FusedForest, fuse_plan
from peregrine.backends.native.layout import pack
from peregrine.backends.native.program import kernel_spec
from peregrine.backends.native.tune import heuristic
from peregrine.errors import UnsupportedModelError
from peregrine.ir import Graph, Node, Op
from peregrine.ir.semantics.trees import compute_dtype
from peregrine.ir.spec import METHOD_NAMES
from peregrine.kernels import jit, rowwise
from peregrine.kernels.fused import narrow_outputs
from peregrine.options import CompileOptions

DTYPES = ("float32", "float64")  # the two entry points of every method
# x86-64 microarchitecture levels (the psABI's): LLVM CPU name and the features the kernels may
# use. v2 and v3 are the levels PEREGRINE_CPU_LEVEL forces; v4 adds AVX-512.
_V2 = "+cx16,+popcnt,+sahf,+sse3,+sse4.1,+sse4.2,+ssse3"
_V3 = _V2 + ",+avx,+avx2,+bmi,+bmi2,+f16c,+fma,+lzcnt,+movbe,+xsave"
_V4 = _V3 + ",+avx512f,+avx512bw,+avx512cd,+avx512dq,+avx512vl"

# the ops a library's programs hold: the native ones but KNN, whose kernel (knn_kernel.py) the
# runtime calls between programs from Python, as it calls the rules
AOT_OPS = NATIVE_OPS - {Op.KNN}


@dataclass(frozen=True)
class AotTarget:
    """A platform a library can be built for: the LLVM triple, the C compiler that links for
    it, the CPUs (LLVM name, features) code may be generated for."""

    name: str
    triple: str
    machine: str  # platform.machine() of a host that runs it natively
    cross_cc: str  # Debian's cross compiler for it
    cpus: dict[str, tuple[str, str]]
    default_cpu: str

    def cc(self) -> str:
        return "gcc" if platform.machine().lower() == self.machine else self.cross_cc

    def native(self) -> bool:
        return platform.machine().lower() == self.machine


TARGETS = {
    "x86_64-linux-gnu": AotTarget(
        "x86_64-linux-gnu", "x86_64-unknown-linux-gnu", "x86_64", "x86_64-linux-gnu-gcc",
        {"x86-64": ("x86-64", ""), "x86-64-v2": ("x86-64-v2", _V2),
         "x86-64-v3": ("x86-64-v3", _V3), "x86-64-v4": ("x86-64-v4", _V4)}, "x86-64"),
    # the generic AArch64 CPU (Armv8-A, NEON): the kernels take their scalar-walk path there
    "aarch64-linux-gnu": AotTarget(
        "aarch64-linux-gnu", "aarch64-unknown-linux-gnu", "aarch64", "aarch64-linux-gnu-gcc",
        {"generic": ("generic", "+neon")}, "generic"),
}


def resolve_target(target: str, cpu: str | None) -> tuple[AotTarget, jit.Target]:
    """The platform and the CPU to generate for; ``cpu="host"`` is this machine's CPU (when
    the target is this machine's architecture): fastest here, not portable."""
    t = TARGETS.get(target)
    if t is None:
        raise UnsupportedModelError(
            f"shared-library target {target!r} is not supported; use one of "
            f"{', '.join(TARGETS)}")
    name = t.default_cpu if cpu is None else cpu
    if name == "host" and t.native():
        return t, jit.Target.host()
    if name not in t.cpus:
        extra = ", host" if t.native() else ""
        raise UnsupportedModelError(
            f"CPU {name!r} is not supported for target {target}; use one of "
            f"{', '.join(t.cpus)}{extra}")
    return t, jit.Target(*t.cpus[name])


# ---------------------------------------------------------------------------- program --
@dataclass(frozen=True)
class Buffer:
    """A value's storage for one block of rows: ``width`` columns of ``dtype``, rows
    ``stride`` elements apart. ``X`` is the caller's input."""

    name: str
    dtype: str  # float32 | float64 | int64
    width: int
    stride: int


@dataclass(frozen=True)
class ForestKernel:
    """A forest kernel and the descriptor of the packed arrays it reads."""

    symbol: str
    desc: tuple[tuple[str, Any], ...]  # DESC slot -> ("data", blob name) or ("int", value)


@dataclass(frozen=True)
class ForestCall:
    """One forest and its fused epilogue over a block: the batch kernel (rows in lanes), or
    for at most ``few_rows`` rows the latency kernel (trees in lanes), as in the process.
    Both sum in the library's order: the same bits."""

    batch: ForestKernel
    few: ForestKernel | None
    few_rows: int
    n_trees: int
    program: tuple[float, ...]  # the epilogue program (epilogue.encode)
    src: Buffer
    dst: Buffer


@dataclass(frozen=True)
class RowsCall:
    kernel: str  # symbol
    params: str  # blob name (float64)
    src: Buffer
    dsts: tuple[Buffer, ...]


@dataclass(frozen=True)
class MethodProgram:
    """What one public entry point runs, per block of rows, and how its result is stored."""

    method: str
    x_dtype: str
    calls: tuple[ForestCall | RowsCall, ...]
    result: Buffer
    round32: bool  # the method returns float32: round each value as NumPy's astype does


@dataclass
class Lowered:
    """Everything a library is built from."""

    source: str
    n_features: int
    target: str
    cpu: str
    programs: list[MethodProgram] = field(default_factory=list)
    kernels: dict[str, Any] = field(default_factory=dict)  # symbol -> KernelSpec / RowSpec
    data: dict[str, bytes] = field(default_factory=dict)  # blob name -> bytes
    widths: dict[str, int] = field(default_factory=dict)  # method -> values per row
    labels: tuple[str, ...] = ()  # class index -> label, as text
    columns: tuple[str, ...] = ()  # what each input column holds (names, category codes)
    check_nan: bool = False  # the source rejects NaN: the entry points return an error
    check_inf: bool = False

    def blob(self, value: np.ndarray) -> str:
        """The name of a constant array holding ``value``'s bytes (one copy per content)."""
        raw = np.ascontiguousarray(value).tobytes() or b"\0"
        name = "d_" + hashlib.sha256(raw).hexdigest()[:16]
        self.data.setdefault(name, raw)
        return name


def lower(spec: Any, options: CompileOptions, target: AotTarget, cpu: jit.Target,
          methods: list[str] | None = None) -> Lowered:
    """The library's program for ``spec`` (a ModelSpec): raises UnsupportedModelError naming
    what cannot be exported."""
    graph = spec.graph
    if spec.hash_columns:
        raise UnsupportedModelError(
            f"{spec.source}: columns {sorted(spec.hash_columns)} are hashed strings "
            "(CatBoost categorical features); a shared library takes numbers only")
    if spec.input_checks:
        raise UnsupportedModelError(
            f"{spec.source}: checks rows it may reject ({spec.input_checks[0][0]}); a "
            "shared library cannot raise per row")
    names = ([m for m in METHOD_NAMES if m in spec.methods] if methods is None
             else list(methods))
    missing = [m for m in names if m not in spec.methods]
    if missing or not names:
        what = f"has no {', '.join(missing)}" if missing else "no methods asked for"
        raise UnsupportedModelError(f"{spec.source}: {what}; available: "
                                    f"{', '.join(spec.methods)}")
    outputs = {m: graph.outputs[spec.methods[m].output] for m in names}
    foreign = sorted({n.op.name for n in graph.steps(outputs.values())
                      if n.op not in AOT_OPS})
    if foreign:
        raise UnsupportedModelError(
            f"{spec.source}: cannot be exported as a shared library: ops "
            f"{', '.join(foreign)} are not compiled into a library's programs (the native "
            "backend runs them from Python: their NumPy rules, or KNN's own kernel)")
    low = Lowered(spec.source, spec.n_features, target.name, cpu.cpu,
                  check_nan=not spec.allow_nan, check_inf=not spec.allow_inf)
    low.columns = _columns(spec)
    predict = spec.methods.get("predict")
    if predict is not None and predict.labels is not None:
        low.labels = tuple(_label_text(v) for v in np.asarray(predict.labels).tolist())
    for m in names:
        method = spec.methods[m]
        node = graph.node(outputs[m])
        low.widths[m] = 1 if method.squeeze else int(node.width or 1)
        narrow = narrow_outputs(spec, (method.output,))[0]
        for dt in DTYPES:
            low.programs.append(_lower_method(low, spec, options, cpu, m, node, narrow, dt))
    return low


def _columns(spec: Any, shown: int = 256, categories: int = 8) -> tuple[str, ...]:
    """Column notes for the header: names, and for pandas category columns the codes the
    library takes (a category's position in the list the source recorded at fit time)."""
    names, cats = spec.feature_names, spec.category_maps
    if not names and not cats:
        return ()
    out = []
    for i in range(min(spec.n_features, shown)):
        text = f"{i}: {names[i]}" if names else f"{i}:"
        if i in cats:
            codes = ", ".join(f"{k} = {_label_text(v)}" for k, v in
                              enumerate(cats[i][:categories]))
            more = ", ..." if len(cats[i]) > categories else ""
            text += f" (category codes: {codes}{more}; other values: NaN)"
        out.append(text)
    if spec.n_features > shown:
        out.append(f"... {spec.n_features - shown} more")
    return tuple(out)


def _label_text(v: Any) -> str:
    return v if isinstance(v, str) else str(v)


def _lower_method(low: Lowered, spec: Any, options: CompileOptions, cpu: jit.Target, m: str,
                  node: Node, narrow: bool, dt: str) -> MethodProgram:
    graph = spec.graph
    method = spec.methods[m]
    X = Buffer("X", dt, spec.n_features, spec.n_features)
    labelled = method.labels is not None
    if method.dtype not in ("float64", "float32", "input") and not (
            labelled or node.dtype == "int64"):
        raise UnsupportedModelError(f"{spec.source}.{m} returns {method.dtype} from a "
                                    f"{node.dtype} value; not exportable")
    # the runtime's final cast (CompiledModel): float32 methods, and "input" on float32 rows
    round32 = not labelled and (method.dtype == "float32" or (
        method.dtype == "input" and dt == "float32"))
    calls: list[ForestCall | RowsCall] = []
    # an output of row-wise ops only: the one row kernel the process runs for it
    whole = rowwise.plan(graph, [node.name], [narrow], dt)
    if whole is not None:
        out = _rows_call(low, whole, X, "v0")
        return MethodProgram(m, dt, (out,), out.dsts[0], round32)
    # the rules' dtype flow: which values are float32 for this input dtype
    f32 = {}
    for n in graph.toposort():
        f32[n.name] = (dt == "float32" if n.op is Op.INPUT else
                       n.attrs.float32_out([f32[i] for i in n.inputs]))
    buffers = {graph_input(graph).name: X}
    # decisions stay row-wise segments: a forest call's buffer is float64, class indices int64
    plan = fuse_plan(graph, {node.name}, decisions=False)
    segment: list[Node] = []

    def close() -> None:
        if segment:
            calls.append(_segment(low, spec, segment, buffers, _read_outside(
                plan, segment, node.name), f32))
            segment.clear()

    for step in plan:
        if isinstance(step, FusedForest):
            close()
            calls.append(_forest_call(low, step, buffers, options, cpu, len(buffers)))
            buffers[step.end] = calls[-1].dst
        elif step.op is not Op.INPUT:
            if segment:
                inside, src = {n.name for n in segment}, _source(segment)
                if any(i not in inside and i != src for i in step.inputs):
                    close()
            segment.append(step)
    close()
    result = buffers[node.name]
    return MethodProgram(m, dt, tuple(calls), result, round32)


def graph_input(graph: Graph) -> Node:
    return next(n for n in graph.nodes if n.op is Op.INPUT)


def _read_outside(plan: list, segment: list[Node], output: str) -> set[str]:
    """Values read by steps outside ``segment`` or returned: what the segment must store."""
    inside = {n.name for n in segment}
    out = {output}
    for step in plan:
        if isinstance(step, FusedForest):
            out.update(step.tree.inputs)
        elif step.name not in inside:
            out.update(step.inputs)
    return out


def _source(segment: list[Node]) -> str:
    """The one value a segment of row-wise nodes reads from outside itself."""
    inside = {n.name for n in segment}
    srcs = {i for n in segment for i in n.inputs if i not in inside}
    if len(srcs) != 1:
        raise UnsupportedModelError(
            f"row-wise ops {', '.join(n.op.name for n in segment)} read several values "
            f"({', '.join(sorted(srcs))}); a shared library fuses one source per kernel")
    return srcs.pop()


def _segment(low: Lowered, spec: Any, segment: list[Node], buffers: dict[str, Buffer],
             readers: set[str], f32: dict[str, bool]) -> RowsCall:
    """Row-wise nodes reading one value: a row kernel over a graph whose input is that value."""
    src_name = _source(segment)
    src = buffers[src_name]
    if src.dtype == "int64" or src.stride != src.width:
        raise UnsupportedModelError(
            f"{spec.source}: {segment[0].op.name} reads a {src.dtype} value of {src.width} "
            f"columns in rows of {src.stride}; not exportable")
    wanted = [n.name for n in segment if n.name in readers]
    # a stored value keeps the dtype its rule gives it (float32 flows stay float32)
    narrow = [f32[n] for n in wanted]
    sub = Graph((Node(src_name, Op.INPUT, (), {}, "float64", src.width), *segment),
                {n: n for n in wanted})
    plan = rowwise.plan(sub, wanted, narrow, src.dtype)
    if plan is None:
        raise UnsupportedModelError(
            f"{spec.source}: ops {', '.join(n.op.name for n in segment)} do not fit one "
            f"fused row kernel (widths up to {rowwise.MAX_WIDTH}, {rowwise.MAX_WEIGHTS} "
            "weights); not exportable")
    call = _rows_call(low, plan, src, f"v{len(buffers)}")
    buffers.update(zip(wanted, call.dsts))
    return call


def _rows_call(low: Lowered, plan: Any, src: Buffer, stem: str) -> RowsCall:
    low.kernels[plan.spec.symbol] = plan.spec
    dsts = tuple(Buffer(f"{stem}_{k}", dtype, w, w)
                 for k, (dtype, w) in enumerate(zip(plan.out_dtypes, plan.out_widths)))
    return RowsCall(plan.spec.symbol, low.blob(plan.params), src, dsts)


def _forest_call(low: Lowered, step: FusedForest, buffers: dict[str, Buffer],
                 options: CompileOptions, cpu: jit.Target, index: int) -> ForestCall:
    forest = step.tree.attrs.forest
    src = buffers[step.tree.inputs[0]]
    if src.dtype == "int64":
        raise UnsupportedModelError(f"a forest reads integer values ({step.tree.inputs[0]}); "
                                    "not exportable")
    if forest.n_trees == 0:
        raise UnsupportedModelError("a forest with no trees is not exportable")
    choice = heuristic(forest, cpu)
    cmp = compute_dtype(forest, np.dtype(src.dtype), options.precision)
    packs: dict[tuple, Any] = {}

    def kernel(schedule: Any) -> ForestKernel:
        key = schedule  # what packing depends on (with the CPU: the representation)
        packed = packs.get(key)
        if packed is None:
            packed = packs[key] = pack(forest, schedule, cmp, cpu)
        # the kernel reads the value in its own dtype and converts it to the compare dtype,
        # as the process's np.asarray(X, compare dtype) does (IEEE conversions: same bits)
        spec = kernel_spec(packed, schedule, np.dtype(src.dtype), cpu, forest.n_features)
        low.kernels[spec.symbol] = spec
        desc = []
        for name in DESC:
            if name == "n_features":
                desc.append((name, ("int", forest.n_features)))
            elif name in SCALARS:
                desc.append((name, ("int", int(getattr(packed, name)))))
            else:  # a pointer slot (codegen.SCALARS says which are not)
                arr = getattr(packed, name)
                if not isinstance(arr, np.ndarray):
                    raise TypeError(f"descriptor slot {name!r} is not an array")
                desc.append((name, ("data", low.blob(arr))))
        return ForestKernel(spec.symbol, tuple(desc))

    batch = kernel(choice.schedule)
    few = None if choice.few_rows is None else kernel(choice.few_rows)
    width = max(step.width, forest.n_outputs)
    dst = Buffer(f"v{index}", "float64", step.width, width)
    return ForestCall(batch, few, choice.few_rows_max if few else 0, forest.n_trees,
                      tuple(float(v) for v in step.program), src, dst)


# ------------------------------------------------------------------------------ emit --
def emit_objects(low: Lowered, target: AotTarget, cpu: jit.Target) -> list[bytes]:
    """Object code for the target: one object per kernel, optimised as the JIT optimises (O3,
    no fast-math, no FMA contraction: the same arithmetic) and cached on disk like the JIT's
    (``<cache dir>/aot``: a model of a known shape costs no LLVM time), then one object with
    the constant data and the store functions. Position-independent code throughout."""
    import llvmlite.binding as llvm

    _init_targets()
    tm = llvm.Target.from_triple(target.triple).create_target_machine(
        cpu=cpu.cpu, features=cpu.features, opt=3, reloc="pic", codemodel="default")
    objects = []
    for symbol in sorted(low.kernels):
        spec = low.kernels[symbol]
        key = hashlib.sha256(f"{jit.cache_key(spec, cpu)}|{target.triple}|pic".encode())
        path = config.cache_dir() / "aot" / f"{key.hexdigest()[:32]}.o"
        try:
            obj = path.read_bytes()
        except OSError:
            obj = b""
        if not obj.startswith(b"\x7fELF"):
            obj = _compile(tm, str(spec.build_ir(target.triple)), target)
            jit.write_atomic(path, obj)
        objects.append(obj)
    return [*objects, _compile(tm, _data_module(low, target), target)]


def _data_module(low: Lowered, target: AotTarget) -> str:
    from llvmlite import ir

    data = store_module(target.triple)
    for name, raw in sorted(low.data.items()):
        ty = ir.ArrayType(ir.IntType(8), len(raw))
        g = ir.GlobalVariable(data, ty, name=name)
        g.global_constant = True
        g.initializer = ir.Constant(ty, bytearray(raw))
        g.align = 64
    return str(data)


def _compile(tm: Any, text: str, target: AotTarget) -> bytes:
    import llvmlite.binding as llvm

    mod = llvm.parse_assembly(text)
    mod.triple = target.triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
    pb.getModulePassManager().run(mod, pb)
    return tm.emit_object(mod)




# The result's copy out, one function per stored dtype (``aot_c`` calls them): in IR rather
# than C because the conversions are the point. GCC 12.2 at -O2 (Debian 12's compiler) drops
# the ``(double)(float)x`` of a float32 method when it vectorises the copy loop; LLVM keeps
# every fptrunc. The int64 values are class indices and flags: exact in double.
STORES = {"float64": False, "float64_round32": True, "float32": False, "int64": False}


def store_symbol(dtype: str, round32: bool) -> str:
    key = f"{dtype}_round32" if round32 and dtype == "float64" else dtype
    return f"peregrine_aot_store_{key}"


def store_module(triple: str) -> Any:
    """``store(v, stride, width, rows, out)``: out[i * width + j] = double(v[i * stride + j])
    for the value buffers' dtypes, rounded to float32 first for float32 methods."""
    from llvmlite import ir

    module = ir.Module(name="peregrine_aot_store")
    module.triple = triple
    for key, round32 in STORES.items():
        _store_function(module, key.removesuffix("_round32"), round32)
    return module


def _store_function(module: Any, dtype: str, round32: bool) -> None:
    from llvmlite import ir

    from peregrine.kernels.irutil import F32, F64, I64, PTR, Loops, gep

    ty = {"float64": F64, "float32": F32, "int64": I64}[dtype]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, I64, I64, I64, PTR]),
                     name=store_symbol(dtype, round32))
    v, stride, width, rows, out = fn.args
    entry = fn.append_basic_block("entry")
    b = ir.IRBuilder(entry)
    loops, one, zero = Loops(b, entry), ir.Constant(I64, 1), ir.Constant(I64, 0)

    def col(i, j):
        x = b.load(gep(b, v, [b.add(b.mul(i, stride), j)], source_etype=ty), typ=ty)
        if ty is I64:
            x = b.sitofp(x, F64)
        elif ty is F32:
            x = b.fpext(x, F64)
        elif round32:  # NumPy's astype(float32): round to nearest even, once
            x = b.fpext(b.fptrunc(x, F32), F64)
        b.store(x, gep(b, out, [b.add(b.mul(i, width), j)], source_etype=F64))

    loops.range(zero, rows, one, lambda i: loops.range(zero, width, one,
                                                       lambda j: col(i, j), "col"), "row")
    b.ret_void()


_INITIALISED: list[bool] = []


def _init_targets() -> None:
    import llvmlite.binding as llvm

    if not _INITIALISED:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        _INITIALISED.append(True)


PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
