"""The tvm backend: the IR graph lowered node by node (``ops.LOWERINGS``) into one Relax
function per requested set of outputs and input dtype, built by TVM for the host CPU
(``build.py``), and the Executable the runtime calls.

Fallbacks. An op without a lowering (``ops.fallback_ops()``) runs its NumPy rule: the Relax program
calls a packed function registered from this process (``peregrine.tvm.<program>.<node>.<dtype>``)
that evaluates the rule on its inputs and writes the output. The cached library names those
functions but holds no Python: each executable registers them again from the IR it was given.

Concurrency. A Relax virtual machine keeps per-call state, so each Python thread gets its own VM
over the one shared library.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import tvm
from tvm import relax

from peregrine.backends.base import Backend, Executable
from peregrine.backends.tvm import build, onehot
from peregrine.backends.tvm.ops import (
    LOWERINGS,
    Context,
    cast,
    dtype_of,
    fallback_ops,
    lower_node,
    rule_only,
)
from peregrine.backends.tvm.trees import choose_strategy
from peregrine.errors import UnsupportedModelError
from peregrine.ir import Op
from peregrine.ir.spec import GUARD, ModelSpec
from peregrine.options import CompileOptions

DTYPES = ("float32", "float64")


def program_outputs(spec: ModelSpec) -> tuple[str, ...]:
    """Every graph output, in one function per input dtype: the methods share their forest
    and featurizers, and one function per output set cost the LLVM back end (most of the build
    time) one more copy of each shared op per set, while the extra heads (an argmax, a log) cost
    a small fraction of a walk at run time."""
    return tuple(sorted(o for o in spec.graph.outputs if not o.startswith(GUARD)))  # (guards.py)


def function_name(dtype: str) -> str:
    return f"main_{dtype}"


def probe(spec: ModelSpec, dtype: str, options: CompileOptions) -> dict[str, np.ndarray]:
    """Every node's value on one row of ones by the NumPy rules: the dtype and width each
    fallback returns (some rules keep their input's dtype, e.g. ORDINAL_ENCODE's copy)."""
    graph = spec.graph
    values: dict[str, Any] = {}
    for node in graph.toposort():
        if node.op is Op.INPUT:
            values[node.name] = np.ones((1, spec.n_features), dtype=dtype)
            continue
        try:
            values[node.name] = np.asarray(
                node.attrs.rule(node, [values[i] for i in node.inputs], options))
        except Exception:  # noqa: BLE001 - a rule that rejects the probe row: static dtype
            values[node.name] = np.zeros((1, int(node.width or 1)), dtype=node.dtype)
    return values


def aligned_copy(X: np.ndarray, alignment: int = 64) -> np.ndarray:
    """A C-contiguous copy of ``X`` whose data starts on an ``alignment``-byte boundary (NumPy
    copies 2.6x faster than ``tvm.runtime.tensor``: 77 vs 200 ms for 100K x 286 doubles,
    Intel Xeon family 6 model 207)."""
    buf = np.empty(X.nbytes + alignment, dtype=np.uint8)
    start = -buf.ctypes.data % alignment
    out = buf[start:start + X.nbytes].view(X.dtype).reshape(X.shape)
    np.copyto(out, X)
    return out


_pool = {"threads": None}
_pool_lock = threading.Lock()


def use_threads(n: int | None) -> None:
    """Size TVM's thread pool to ``CompileOptions.n_threads`` (None: TVM's own default). The
    pool belongs to the process, so it follows the model called last; resizing happens only
    when the count changes."""
    if not n or _pool["threads"] == n:
        return
    with _pool_lock:
        if _pool["threads"] != n:
            tvm.get_global_func("runtime.config_threadpool")(1, int(n))  # 1: all big cores
            _pool["threads"] = n


class TvmExecutable(Executable):
    backend_name = "tvm"

    def __init__(self, spec: ModelSpec, options: CompileOptions, device: str = "cpu") -> None:
        if device != "cpu":
            raise UnsupportedModelError(f"tvm backend runs on cpu, not on {device!r}")
        self.spec = spec
        self.options = options
        self.outputs = program_outputs(spec)
        self.key = build.program_key(spec.graph, self.outputs, options, spec.n_features)
        self._probes = {dt: probe(spec, dt, options) for dt in DTYPES}
        self._register_fallbacks()
        self.built = build.load_or_build(self.key, self._relax_module)
        self._local = threading.local()

    # ------------------------------------------------------------------- fallbacks --
    def _fallback_name(self, node_name: str, dtype: str) -> str:
        return f"peregrine.tvm.{self.key}.{node_name}.{dtype}"

    def _fallback_nodes(self) -> list:
        # plus the nodes of lowered ops that run their rule (ops.rule_only)
        fallback = fallback_ops()
        return [n for n in self.spec.graph.nodes if n.op in fallback or rule_only(n)]

    def _register_fallbacks(self) -> None:
        options = self.options
        for node in self._fallback_nodes():
            for dt in DTYPES:
                out_dtype = self._probes[dt][node.name].dtype

                def run(*args: Any, node: Any = node, out_dtype: Any = out_dtype) -> None:
                    *ins, out = args
                    value = node.attrs.rule(node, [a.numpy() for a in ins], options)
                    value = np.asarray(value).astype(out_dtype, copy=False)
                    out.copyfrom(np.ascontiguousarray(value.reshape(tuple(out.shape))))

                tvm.register_global_func(self._fallback_name(node.name, dt), run, override=True)

    # ----------------------------------------------------------------- the program --
    def _relax_module(self) -> tvm.IRModule:
        spec, graph = self.spec, self.spec.graph
        bb = relax.BlockBuilder()
        shared: dict[Any, Any] = {}
        wanted = [graph.outputs[o] for o in self.outputs]
        for dt in DTYPES:
            probes = self._probes[dt]
            rows = tvm.tirx.Var("n", "int64")
            x = relax.Var("x", relax.TensorType((rows, spec.n_features), dt))

            def fallback(node: Any, ins: list, dt: str = dt, rows: Any = rows) -> Any:
                ref = self._probes[dt][node.name]
                out = relax.TensorType((rows, int(ref.shape[1])), str(ref.dtype))
                return relax.call_dps_packed(self._fallback_name(node.name, dt), ins, out)

            ctx = Context(bb, self.options, rows, fallback=fallback, shared=shared)
            with bb.function(function_name(dt), [x]):
                with bb.dataflow():
                    values: dict[str, Any] = {n.name: x for n in graph.nodes
                                              if n.op is Op.INPUT}
                    order = graph.steps(wanted)
                    # a LINEAR reading one-hot indicators picks its weight rows (onehot.py)
                    f32 = {n.name: str(probes[n.name].dtype) == "float32" for n in order}
                    linears, absorbed = onehot.plan(graph, order, set(wanted), f32)
                    for node in order:
                        if node.name in absorbed:
                            continue
                        expr = (onehot.lower(node, linears[node.name], values)
                                if node.name in linears else
                                lower_node(ctx, node, [values[i] for i in node.inputs]))
                        value = bb.emit(expr)
                        # the rule's dtype (lowerings follow it; a fallback returns it)
                        want = str(probes[node.name].dtype)
                        if dtype_of(value) != want:
                            value = bb.emit(cast(value, want))
                        values[node.name] = value
                    result = bb.emit_output(relax.Tuple([values[w] for w in wanted]))
                bb.emit_func_output(result)
        return bb.get()

    # ------------------------------------------------------------------------ calls --
    def _vm(self) -> relax.VirtualMachine:
        vm = getattr(self._local, "vm", None)
        if vm is None:
            vm = self._local.vm = build.virtual_machine(self.built.module)
        return vm

    def _call(self, X: np.ndarray) -> dict[str, Any]:
        X = np.asarray(X)
        if X.dtype.name not in DTYPES:
            X = X.astype(np.float64)
        # TVM's code assumes 64-byte aligned buffers: hand over in place when the array is
        # aligned and C-contiguous, copy otherwise (NumPy aligns its data to 16 bytes)
        if not (X.flags.c_contiguous and X.ctypes.data % 64 == 0):
            X = aligned_copy(X)
        arg = tvm.runtime.from_dlpack(X)
        use_threads(self.options.n_threads)
        return dict(zip(self.outputs, self._vm()[function_name(X.dtype.name)](arg)))

    # Results are handed over through DLPack, without a copy: each call's outputs are fresh
    # tensors the array keeps alive (``Tensor.numpy()`` copied them: 22 ms for 100K x 64
    # doubles, and 48 -> 30 us a one-row call, Intel Xeon family 6 model 207)
    def run(self, X: Any, outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
        if not isinstance(X, np.ndarray):
            X = X.detach().cpu().numpy()
        values = self._call(X)
        return {o: np.from_dlpack(values[o]) for o in outputs}

    def runner(self, output: str) -> Any:
        call = self._call
        return lambda X: np.from_dlpack(call(X)[output])

    # ---------------------------------------------------------------------- metadata --
    def tree_info(self) -> list[dict[str, Any]]:
        out = []
        for node in self.spec.graph.nodes:
            if node.op is Op.TREE_ENSEMBLE:
                forest = node.attrs.forest
                strategy, reason = choose_strategy(forest, self.options)
                out.append({"node": node.name, "strategy": strategy.value, "reason": reason,
                            "n_trees": forest.n_trees, "max_depth": forest.max_depth()})
        return out

    def explain(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "backend": "tvm",
            "device": "cpu",
            "target": str(build.host_target()),
            "tvm_version": tvm.__version__,
            "library": ("cache hit" if self.built.cache_hit else "built")
                       + f" in {self.built.seconds:.2f} s ({self.built.path})",
        }
        fallbacks = sorted({n.op.name for n in self._fallback_nodes()})
        if fallbacks:
            info["fallback_ops"] = fallbacks  # run by their NumPy rules
        trees = self.tree_info()
        if len(trees) == 1:
            info.update({k: v for k, v in trees[0].items() if k != "node"})
        elif trees:
            info["forests"] = trees
        return info

    def artifact_state(self) -> dict[str, Any]:
        """Recorded for inspection only: loading rebuilds from the stored IR (or finds the
        library in the local cache by the program's key); no library is stored."""
        return {"tvm_version": tvm.__version__, "program_key": self.key,
                "tree_strategies": {t["node"]: t["strategy"] for t in self.tree_info()}}


class TvmBackend(Backend):
    name = "tvm"
    description = "TVM (Relax) program built for the host CPU; trees as compiled walks"
    devices = ("cpu",)

    @classmethod
    def lowered(cls) -> frozenset[Op]:
        return frozenset(LOWERINGS)

    @classmethod
    def fallback(cls) -> frozenset[Op]:
        return fallback_ops()

    @classmethod
    def compile(cls, spec: ModelSpec, options: CompileOptions, device: str) -> Executable:
        return TvmExecutable(spec, options, device)
