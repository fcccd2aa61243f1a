"""The native executable: the model's graph lowered per set of outputs (lower.py) into a plan
of compiled forests (program.py), fused row kernels (kernels/fused.py) and op rules, run by one
executor.

Each TREE_ENSEMBLE node becomes a :class:`ForestProgram`. The element-wise ops right after it
(links, affine, binary probabilities, a classifier's decision) run fused in its kernel
(epilogue.py); the row-wise ops in front of it run as one fused row kernel (a ``RowRegion``,
fusion.py); an output computed by row-wise ops alone is one fused row kernel; every other op
runs its rule (``ir/semantics``, ``rules.run``), so those ops stay defined in exactly one place.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from peregrine.backends.base import Executable
from peregrine.backends.native import rules
from peregrine.backends.native.fusion import FusedForest, RowRegion
from peregrine.backends.native.lower import Plan, lower
from peregrine.backends.native.program import FLOAT64, INPUT_DTYPES, ForestProgram
from peregrine.ir import Node, Op
from peregrine.kernels import jit
from peregrine.kernels.fused import RowKernel, checked_runner, narrow_outputs, row_kernel
from peregrine.kernels.threads import usable_cpus
from peregrine.options import CompileOptions

# Row blocks for a plan of NumPy rules: about 8 MiB of intermediate values per block (a kernel
# SVM's (rows, support vectors) matrix would otherwise take gigabytes for a large batch), and
# enough rows that NumPy's per-call overhead stays small.
BLOCK_BYTES = 1 << 23
MIN_BLOCK_ROWS = 4096


class NativeExecutable(Executable):
    def __init__(self, spec, options: CompileOptions, programs: dict[str, ForestProgram],
                 reasons: dict[str, str], target: jit.Target) -> None:
        self.spec, self.options, self.programs = spec, options, programs
        self.reasons, self.target = reasons, target
        self.fused = options.fused_kernels  # lower.Kernels
        self._plans: dict[tuple[str, ...], Plan] = {}
        self._direct: dict[tuple[str, ...], Any] = {}
        self._rules: dict[str, Any] = {}  # node -> its prepared rule (rules.prepare)
        # each method's plan now, so kernels compile (and errors show) at compile time
        for output in sorted({m.output for m in spec.methods.values()}):
            self.plan((output,))

    # ------------------------------------------------------- lower.Kernels, for the passes --
    def rows(self, outputs: tuple[str, ...]) -> RowKernel | None:
        graph = self.spec.graph
        kernel = row_kernel(graph, [graph.outputs[o] for o in outputs],
                            narrow_outputs(self.spec, outputs))
        if kernel is not None:
            kernel.prepare()
        return kernel

    def branch(self, ends: tuple[str, ...]) -> RowKernel | None:
        """The fused row kernel computing nodes ``ends`` from the input, each stored in the
        dtype its rule returns (the plan's other steps read them as they read the rules')."""
        kernel = row_kernel(self.spec.graph, list(ends), ["rule"] * len(ends))
        if kernel is not None:
            kernel.prepare()
        return kernel

    def prologue(self, end: str, step: FusedForest) -> tuple | None:
        """The fused row kernel computing forest ``step``'s input ``end``, stored in the dtype
        the forest compares float64 input in (float32 for the libraries that round their
        input to float32 first: the kernel's rounding is NumPy's astype, so the same values
        reach the same comparisons)."""
        region = self.spec.graph.steps([end])
        if all(n.op is Op.SELECT for n in region):
            # nothing computed, only columns taken: NumPy's take then the forest's own cast
            # measured faster (SelectKBest(20 of 500) -> forest, 300K rows: 0.49 s against
            # the kernel's 0.70 s, which loads each 500-wide row whole)
            return None
        dtype = self.programs[step.tree.name].cmp_dtype(FLOAT64)
        kernel = row_kernel(self.spec.graph, [end], [dtype.name])
        if kernel is None:
            return None
        kernel.prepare()
        return kernel, dtype

    # ------------------------------------------------------------------------ plans --
    def plan(self, outputs: tuple[str, ...]) -> Plan:
        """The lowered plan computing ``outputs`` (lower.py), made once."""
        plan = self._plans.get(outputs)
        if plan is None:
            plan = self._plans[outputs] = lower(self.spec.graph, outputs, self)
            direct = self._direct_call(plan)
            if direct is not None:
                self._direct[outputs] = direct
        return plan

    def _direct_call(self, plan: Plan) -> Any:
        """``X -> the output`` for a plan that is one forest kernel on the input, in the
        method's dtype, with the few-rows slot inlined (ForestProgram.caller)."""
        if not (plan.kernel_only and len(plan.outputs) == 1) or \
                not isinstance(plan.steps[1], FusedForest):
            return None
        step = plan.steps[1]
        dtype = step.dtype if step.dtype.kind == "i" else self._method_dtype(plan.outputs[0])
        return self.programs[step.tree.name].caller(
            step.program, step.width, lambda X: self._forest(step, X, dtype), dtype)

    def runner(self, output: str) -> Any:
        """The online path (``Executable.runner``): a fused output's row kernel, checking the
        source's NaN/inf policy as it reads; a forest kernel through its few-rows slot, then
        the plan's remaining rules (argmax, ...) without ``run``'s per-call dispatch; any
        other plan through the executor (the runtime skips its generic input handling)."""
        plan = self.plan((output,))
        if plan.kernel_only and isinstance(plan.steps[1], RowRegion):
            kernel = plan.steps[1].kernel
            if not all(kernel.supports(d) for d in INPUT_DTYPES):
                return None  # the executor picks the kernel or the rules per input dtype
            return checked_runner(kernel, self.spec, self.options,
                                  partial(default_threads, self.options))
        direct = self._direct.get((output,))
        if direct is not None:
            return direct
        steps, key = plan.steps, (output,)
        if len(steps) < 3 or steps[0].op is not Op.INPUT or \
                not isinstance(steps[1], FusedForest) or \
                not all(isinstance(s, Node) for s in steps[2:]):
            # any other plan: the executor itself, minus the generic path's input handling
            return lambda X: self.run(X, key)[output]
        step, rest, result = steps[1], steps[2:], plan.ends[0]
        first = self.programs[step.tree.name].caller(
            step.program, step.width, lambda X: self._forest(step, X), step.dtype)
        x_name, end = steps[0].name, step.end
        fns = [(n.name, n.inputs, rules.prepare(n, self.options)) for n in rest]

        def run(X: np.ndarray) -> np.ndarray:
            values = {x_name: X, end: first(X)}
            for name, inputs, fn in fns:
                values[name] = fn([values[i] for i in inputs])
            return values[result]

        return run

    # --------------------------------------------------------------------- executor --
    def run(self, X: Any, outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
        """The one executor: the plan's steps in order (each by its kind, ``_STEPS``), a row
        block at a time where the plan says so (``Plan.blocked``)."""
        direct = self._direct.get(outputs)
        if direct is not None and type(X) is np.ndarray:
            return {outputs[0]: direct(X)}  # the few-rows slot, in the method's dtype
        if not isinstance(X, np.ndarray):
            X = X.detach().cpu().numpy()  # a torch tensor handed to a CPU backend
        plan = self.plan(outputs)
        if plan.blocked:
            block = self._block_rows(plan)
            if X.shape[0] > block:
                # Sequential: blocks on the thread pool measured slower for BLAS-bound plans
                # (kernel SVMs, KernelPCA), whose BLAS calls already use every core. A plan
                # with row regions (400K rows of the bench_passes injection case, process
                # CPU: 0.16 s in blocks of 2-8 MiB, 0.20 s of 32 MiB, 0.26 s of 128 MiB;
                # AMD EPYC Zen 4).
                parts = [self._steps(plan, X[i:i + block])
                         for i in range(0, X.shape[0], block)]
                return {o: np.concatenate([p[o] for p in parts]) for o in outputs}
        return self._steps(plan, X)

    def _steps(self, plan: Plan, X: np.ndarray) -> dict[str, np.ndarray]:
        values: dict[str, Any] = {}
        for step in plan.steps:
            _STEPS[type(step)](self, step, X, values)
        return {o: values[e] for o, e in zip(plan.outputs, plan.ends)}

    def _rule_step(self, node: Node, X: np.ndarray, values: dict[str, Any]) -> None:
        if node.op is Op.INPUT:
            values[node.name] = X
            return
        fn = self._rules.get(node.name)
        if fn is None:
            fn = self._rules[node.name] = rules.prepare(node, self.options)
        values[node.name] = fn([values[i] for i in node.inputs])

    def _forest_step(self, step: FusedForest, X: np.ndarray, values: dict[str, Any]) -> None:
        src = step.tree.inputs[0]
        x, prog = values[src], self.programs[step.tree.name]
        if isinstance(x, np.ndarray) and x.ndim == 2 and x.shape[0] > prog.small_rows:
            # the input in the dtype the forest compares in, converted once a call for every
            # forest reading it (AdaBoost's 50 trees each converted the whole batch: a
            # quarter of its time); NumPy's rounding either way
            cmp = prog.cmp_dtype(x.dtype)
            if x.dtype != cmp:
                key = (src, cmp.str)
                cast = values.get(key)  # type: ignore[call-overload]
                if cast is None:
                    cast = values[key] = x.astype(cmp)  # type: ignore[index]
                x = cast
        values[step.end] = self._forest(step, x)

    def _region_step(self, step: RowRegion, X: np.ndarray, values: dict[str, Any]) -> None:
        if X.ndim == 2 and X.dtype in INPUT_DTYPES and step.kernel.supports(X.dtype):
            outs = step.kernel.run(np.ascontiguousarray(X), default_threads(self.options))
            values.update(zip(step.ends, outs))
            return
        for node in step.nodes:  # an input dtype the kernel does not fuse: the ops' rules
            self._rule_step(node, X, values)

    def _block_rows(self, plan: Plan) -> int:
        row_bytes = 8 * sum(max(1, int(step.width or 1)) for step in plan.steps)
        return max(MIN_BLOCK_ROWS, BLOCK_BYTES // row_bytes)

    def _method_dtype(self, output: str) -> np.dtype:
        """The float dtype the public method returning ``output`` casts to (float64 when
        methods disagree or the method returns labels)."""
        dtypes = {np.dtype(m.dtype) for m in self.spec.methods.values()
                  if m.output == output and m.labels is None and m.dtype != "input"}
        return dtypes.pop() if len(dtypes) == 1 and next(iter(dtypes)).kind == "f" else FLOAT64

    def _forest(self, step: FusedForest, X: np.ndarray, out_dtype: np.dtype | None = None
                ) -> np.ndarray:
        out_dtype = step.dtype if out_dtype is None else out_dtype
        prog = self.programs[step.tree.name]
        out = prog(X, step.program, step.width, out_dtype=out_dtype)
        if out is not None:  # (a few rows come back in float64)
            return out.astype(out_dtype, copy=False)
        value = prog.raw(X)  # trees ran in parallel: the chain runs as its NumPy rules
        for node in step.chain:
            value = rules.run(node, [value], self.options)
        return value.astype(out_dtype, copy=False)

    def explain(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "backend": "native (LLVM via llvmlite)",
            "target": f"{self.target.cpu} ({self.target.simd_bytes * 8}-bit SIMD, "
                      f"{self.target.isa})",
        }
        fused = {",".join(k): s.kernel.symbols for k, s in self.row_kernels().items()}
        if fused:
            out["fused_kernels"] = fused
        out["lowering"] = {",".join(k): list(p.report) or ["rules only"]
                           for k, p in self._plans.items()}
        for name, prog in self.programs.items():
            out[f"{name} schedule"] = str(prog.schedule)
            out[f"{name} schedule (CompileOptions.schedule)"] = prog.schedule.to_json()
            out[f"{name} why"] = self.reasons.get(name, "")
            out[f"{name} threads"] = prog.n_threads
            for key, val in prog.describe().items():
                out[f"{name} {key}"] = val
        return out

    def row_kernels(self) -> dict[tuple[str, ...], RowRegion]:
        """The outputs computed by one fused row kernel alone, per output set planned."""
        return {k: p.steps[1] for k, p in self._plans.items()
                if p.kernel_only and isinstance(p.steps[1], RowRegion)}

    def artifact_state(self) -> dict[str, Any]:
        return {"target": {"cpu": self.target.cpu, "features": self.target.features},
                "forests": {name: p.state() for name, p in self.programs.items()}}


def default_threads(options: CompileOptions) -> int:
    return options.n_threads or usable_cpus()


# The executor's step kinds (lower.py), each run by one method: a table keyed by type, like the
# semantics' rule tables keyed by op.
_STEPS = {Node: NativeExecutable._rule_step, FusedForest: NativeExecutable._forest_step,
          RowRegion: NativeExecutable._region_step}
