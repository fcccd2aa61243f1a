"""The native executable: the model's graph run with compiled forests (program.py), fused row
kernels (kernels/fused.py) and the op rules for the rest.

Each TREE_ENSEMBLE node becomes a :class:`ForestProgram`. The element-wise ops right after it
(links, affine, binary probabilities, a classifier's decision) run fused in its kernel
(epilogue.py); the row-wise ops in front of it run as one fused row kernel (a ``RowRegion``,
fusion.py); an output computed by row-wise ops alone is one fused row kernel; every other op
runs its rule (``ir/semantics``, ``rules.run``), so those ops stay defined in exactly one place.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any

import numpy as np

from peregrine.backends.base import Executable
from peregrine.backends.native import rules
from peregrine.backends.native.fusion import FusedForest, RowRegion, fuse_plan, prologue_regions
from peregrine.backends.native.program import FLOAT64, INPUT_DTYPES, ForestProgram
from peregrine.ir import Op
from peregrine.kernels import jit
from peregrine.kernels.fused import RowKernel, checked_runner, narrow_outputs, row_kernel
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
        self._plans: dict[tuple[str, ...], list] = {}
        self._direct: dict[tuple[str, ...], tuple] = {}
        # outputs computed by row-wise pipeline ops only: one fused kernel each (fused.py),
        # compiled now so errors show at compile time
        self._row_kernels: dict[tuple[str, ...], RowKernel | None] = {}
        for output in sorted({m.output for m in spec.methods.values()}):
            self._rows((output,))

    def _rows(self, outputs: tuple[str, ...]) -> RowKernel | None:
        if outputs not in self._row_kernels:
            kernel = None
            if self.options.fused_kernels:
                graph = self.spec.graph
                kernel = row_kernel(graph, [graph.outputs[o] for o in outputs],
                                    narrow_outputs(self.spec, outputs))
                if kernel is not None:
                    kernel.prepare()
            self._row_kernels[outputs] = kernel
        return self._row_kernels[outputs]

    def _plan(self, outputs: tuple[str, ...]) -> list:
        graph = self.spec.graph
        plan = fuse_plan(graph, {graph.outputs[o] for o in outputs})
        if not self.options.fused_kernels:
            return plan
        return prologue_regions(graph, plan, self._prologue_kernel)

    def _prologue_kernel(self, end: str, step: FusedForest) -> tuple | None:
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

    def runner(self, output: str) -> Any:
        """The online path for an output computed from one forest of the input: the forest
        and its fused ops through the few-rows kernel, then any remaining ops (argmax, ...)
        as their NumPy rules, without ``run``'s per-call planning."""
        rows = self._rows((output,))
        if rows is not None and not all(rows.supports(d) for d in INPUT_DTYPES):
            return None  # the generic path picks the kernel or the rules per input dtype
        if rows is not None:
            return checked_runner(rows, self.spec, self.options,
                                  partial(default_threads, self.options))
        plan = self._plan_for((output,))
        direct = self._direct.get((output,))
        if direct is not None:
            return direct
        if len(plan) < 3 or plan[0].op is not Op.INPUT or not isinstance(plan[1], FusedForest):
            return None
        step, rest, result = plan[1], plan[2:], self.spec.graph.outputs[output]
        if any(isinstance(n, FusedForest) for n in rest):
            return None
        first = self.programs[step.tree.name].caller(
            step.program, step.width, lambda X: self._forest(step, X), step.dtype)
        x_name, end, options = plan[0].name, step.end, self.options

        def run(X: np.ndarray) -> np.ndarray:
            values = {x_name: X, end: first(X)}
            for node in rest:
                values[node.name] = rules.run(node, [values[i] for i in node.inputs],
                                                   options)
            return values[result]

        return run

    def _plan_for(self, outputs: tuple[str, ...]) -> list:
        plan = self._plans.get(outputs)
        if plan is None:
            plan = self._plans[outputs] = self._plan(outputs)
            if len(plan) == 2 and len(outputs) == 1 and isinstance(plan[1], FusedForest):
                step = plan[1]
                prog = self.programs[step.tree.name]
                dtype = (step.dtype if step.dtype.kind == "i"
                         else self._method_dtype(outputs[0]))
                self._direct[outputs] = prog.caller(
                    step.program, step.width, lambda X, s=step, d=dtype: self._forest(s, X, d),
                    dtype)
        return plan

    def run(self, X: Any, outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
        direct = self._direct.get(outputs)
        if direct is not None and type(X) is np.ndarray:
            return {outputs[0]: direct(X)}  # input -> forest and its fused ops, nothing else
        if not isinstance(X, np.ndarray):
            X = X.detach().cpu().numpy()  # a torch tensor handed to a CPU backend
        rows = self._rows(outputs)
        if rows is not None and X.ndim == 2 and X.dtype in INPUT_DTYPES and X.shape[0] and \
                rows.supports(X.dtype):
            res = rows.run(np.ascontiguousarray(X), default_threads(self.options))
            return dict(zip(outputs, res))
        plan = self._plan_for(outputs)
        regions = any(isinstance(step, RowRegion) for step in plan)
        if regions or not any(isinstance(step, FusedForest) for step in plan):
            block = self._block_rows(plan)
            if X.shape[0] > block:
                # rules only (no forest kernel, which splits rows over threads itself): row
                # blocks keep each op's temporaries near the cache instead of full passes.
                # Sequential: blocks on the thread pool measured slower for BLAS-bound plans
                # (kernel SVMs, KernelPCA), whose BLAS calls already use every core. A plan
                # with row regions: a region's output (a forest's input, often much wider
                # than X: one-hot columns) is written and read back a block at a time (400K
                # rows of the bench_passes injection case, process CPU: 0.16 s in blocks of
                # 2-8 MiB, 0.20 s of 32 MiB, 0.26 s of 128 MiB; AMD EPYC Zen 4).
                parts = [self._run_plan(plan, X[i:i + block], outputs)
                         for i in range(0, X.shape[0], block)]
                return {o: np.concatenate([p[o] for p in parts]) for o in outputs}
        return self._run_plan(plan, X, outputs)

    def _block_rows(self, plan: list) -> int:
        row_bytes = 8 * sum(max(1, int(step.width or 1)) for step in plan)
        return max(MIN_BLOCK_ROWS, BLOCK_BYTES // row_bytes)

    def _run_plan(self, plan: list, X: Any, outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
        values: dict[str, Any] = {}
        for step in plan:
            if isinstance(step, FusedForest):
                values[step.end] = self._forest(step, values[step.tree.inputs[0]])
            elif isinstance(step, RowRegion):
                values[step.end] = self._region(step, values)
            elif step.op is Op.INPUT:
                values[step.name] = X
            else:
                values[step.name] = rules.run(step, [values[i] for i in step.inputs],
                                                   self.options)
        graph = self.spec.graph
        return {o: values[graph.outputs[o]] for o in outputs}

    def _region(self, step: RowRegion, values: dict[str, Any]) -> np.ndarray:
        X = next(iter(values.values()))  # the plan's first step is the input
        if X.ndim == 2 and X.dtype in INPUT_DTYPES and step.kernel.supports(X.dtype):
            return step.kernel.run(np.ascontiguousarray(X), default_threads(self.options))[0]
        values = dict(values)  # an input dtype the kernel does not fuse: the ops' rules
        for node in step.nodes:
            values[node.name] = rules.run(node, [values[i] for i in node.inputs], self.options)
        return values[step.end]

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
        fused = {",".join(k): v.symbols for k, v in self._row_kernels.items() if v is not None}
        if fused:
            out["fused_kernels"] = fused
        for name, prog in self.programs.items():
            out[f"{name} schedule"] = str(prog.schedule)
            out[f"{name} schedule (CompileOptions.schedule)"] = prog.schedule.to_json()
            out[f"{name} why"] = self.reasons.get(name, "")
            out[f"{name} threads"] = prog.n_threads
            for key, val in prog.describe().items():
                out[f"{name} {key}"] = val
        return out

    def artifact_state(self) -> dict[str, Any]:
        return {"target": {"cpu": self.target.cpu, "features": self.target.features},
                "forests": {name: p.state() for name, p in self.programs.items()}}


def default_threads(options: CompileOptions) -> int:
    if options.n_threads:
        return options.n_threads
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
