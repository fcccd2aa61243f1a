"""Native CPU backend: LLVM machine code for tree ensembles through llvmlite.

Pipeline (one module each): ``schedule`` (what to generate) -> ``layout`` (pack the Forest into
flat node arrays) -> ``codegen`` (LLVM IR of a kernel generic over the model's numbers) ->
``jit`` (optimise, emit, cache on disk, load) -> ``executable`` (threads, the ops around trees).
Schedules are chosen in ``peregrine.backends.native.tune`` unless ``CompileOptions.schedule``
names one.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import threading
from typing import Any, ClassVar

import numpy as np

from peregrine.backends.base import Backend, Executable
from peregrine.backends.native.merge import merge_tree_sums
from peregrine.backends.native.schedule import (
    Lanes,
    Layout,
    LoopOrder,
    Parallel,
    Schedule,
    as_schedule,
)
from peregrine.errors import ArtifactError, UnsupportedModelError
from peregrine.ir import Op
from peregrine.ir.spec import ModelSpec
from peregrine.options import CompileOptions, Precision

# Ops with native code: forests (and the epilogue ops fused into their kernels) and the row-wise
# ops fused into row kernels (kernels/rowwise.py: each row read once, every op in registers).
# The others run their NumPy rule between kernels (rules.run; KERNEL rbf in its expanded BLAS
# form): the fallbacks docs/native.md lists.
NATIVE_OPS = frozenset({
    Op.TREE_ENSEMBLE, Op.AFFINE, Op.LINK, Op.BINARY_PROBA, Op.ARGMAX, Op.THRESHOLD,
    Op.LINEAR, Op.SELECT, Op.CONCAT, Op.CENTER_SCALE, Op.CLIP, Op.NORMALIZE, Op.BINARIZE,
    Op.POLYNOMIAL, Op.UFUNC, Op.CTR_LOOKUP,  # CTR_LOOKUP: its own row kernel (ctr_kernel.py)
    Op.ONE_HOT,  # comparisons in a row kernel, or a linear model's weight rows (rowwise_onehot)
    Op.BSPLINE,  # de Boor per column in a row kernel (rowwise_spline); a wider coef: the rule
    Op.RANGE_CHECK,  # two compares in a row kernel
    Op.KNN,  # its own kernel (knn_kernel.py); cosine and minkowski p not in {1, 2}: the rule
})


class NativeBackend(Backend):
    name = "native"
    description = "LLVM machine code (llvmlite): scheduled, vectorised tree walks on the CPU"
    devices: ClassVar[tuple[str, ...]] = ("cpu",)

    @classmethod
    def available(cls) -> bool:
        return importlib.util.find_spec("llvmlite") is not None

    @classmethod
    def lowered(cls) -> frozenset[Op]:
        return NATIVE_OPS

    @classmethod
    def prefetch(cls) -> None:
        """Load LLVM in a thread while the model is converted. libllvmlite.so is 180 MB and
        takes 0.3 s to load (once per process), most of it in dlopen, which runs without the
        GIL; the frontend meanwhile parses the model (LightGBM's model text, XGBoost's JSON)."""
        global _prefetching
        if _prefetching is None and "peregrine.backends.native.executable" not in sys.modules:
            _prefetching = threading.Thread(target=_load_codegen, name="peregrine-llvm-load",
                                            daemon=True)
            _prefetching.start()

    @classmethod
    def compile(cls, spec: ModelSpec, options: CompileOptions, device: str) -> Executable:
        if device.split(":")[0] != "cpu":
            raise UnsupportedModelError(f"native backend runs on the CPU, not on {device!r}")
        return compile_spec(spec, options)

    @classmethod
    def build(cls, spec: ModelSpec, options: CompileOptions, device: str, *,
              sample: np.ndarray | None = None, saved: dict[str, Any] | None = None
              ) -> Executable:
        if device.split(":")[0] != "cpu":
            raise UnsupportedModelError(f"native backend runs on the CPU, not on {device!r}")
        return compile_spec(spec, options, sample=sample, saved=saved)


_prefetching: threading.Thread | None = None


def _load_codegen() -> None:
    try:
        from peregrine.backends.native import executable  # noqa: F401 - imports llvmlite
        from peregrine.kernels import jit

        jit.target_machine(jit.Target.host())
    except Exception:  # noqa: BLE001 - build() imports again and reports the error itself
        pass


def compile_spec(spec: ModelSpec, options: CompileOptions, target=None, *,
                 sample: np.ndarray | None = None,
                 saved: dict[str, Any] | None = None) -> Executable:
    """Build the executable; ``target`` (a ``jit.Target``) defaults to the host CPU.
    ``sample``: rows at the model's input, measured on when the schedule is tuned.
    ``saved``: an artifact's ``artifact_state()``; its schedules are reused when it was made
    for this CPU (same name and features), so a loaded model runs the kernels it was saved
    with, without tuning again."""
    if _prefetching is not None:  # done before anything forks (jit.load_all)
        _prefetching.join()
    from peregrine.backends.native.executable import NativeExecutable, default_threads
    from peregrine.backends.native.program import ForestProgram
    from peregrine.backends.native.tune import Choice, choose_schedule
    from peregrine.kernels import jit, pyentry

    target = target or jit.Target.host()
    try:
        requested = as_schedule(options.schedule)
    except (TypeError, ValueError) as exc:
        raise UnsupportedModelError(f"CompileOptions.schedule: {exc}") from exc
    threads = default_threads(options)
    stored = _saved_choices(saved, target)
    programs, reasons = {}, {}
    if options.precision in (Precision.AUTO, Precision.FAST):  # forests summing in float64
        graph, merged = merge_tree_sums(spec.graph)
        if merged:
            spec = dataclasses.replace(spec, graph=graph)
            reasons.update(merged)
    for node in spec.graph.nodes:
        if node.op is not Op.TREE_ENSEMBLE:
            continue
        forest = node.attrs.forest
        if requested is not None:
            choice = Choice(requested, None, 0, "set by CompileOptions.schedule")
        elif node.name in stored:
            choice = stored[node.name]
        else:
            rows = None if sample is None else _rows_at(spec, node, sample, options)
            choice = choose_schedule(forest, options, target, threads, sample=rows)
        programs[node.name] = ForestProgram(
            forest, choice.schedule, precision=options.precision, target=target,
            n_threads=threads, small=choice.few_rows, small_rows=choice.few_rows_max)
        reasons[node.name] = "; ".join(r for r in (reasons.get(node.name), choice.why) if r)
    # every kernel now (or from the disk cache), not on the first call, several at once: the
    # forests' first (planning the methods calls them: their one-row buffers), then the fused
    # regions' that NativeExecutable makes while it plans each method
    jobs = jit.compile_jobs(threads)
    with jit.together(jobs):
        pyentry.build_with_kernels()  # every compiled method makes one (its one-row path)
        for prog in programs.values():
            prog.prepare()
    with jit.together(jobs):
        executable = NativeExecutable(spec, options, programs, reasons, target)
    return executable


def _saved_choices(saved: dict[str, Any] | None, target) -> dict[str, Any]:
    """Forest node -> the schedule choice an artifact recorded, when made for this CPU."""
    from peregrine.backends.native.tune import Choice

    if not saved:
        return {}
    where = saved.get("target") or {}
    if where.get("cpu") != target.cpu or where.get("features") != target.features:
        return {}  # another CPU: its vector width and ISA may not suit this one; re-derive
    out = {}
    try:
        for name, state in (saved.get("forests") or {}).items():
            few = state.get("few_rows_schedule")
            out[name] = Choice(Schedule.from_json(state["schedule"]),
                               None if few is None else Schedule.from_json(few),
                               int(state.get("few_rows", 0)),
                               "schedule stored in the artifact (saved on this CPU)")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ArtifactError(f"artifact's native schedule is invalid: {exc}") from exc
    return out


def _rows_at(spec: ModelSpec, node: Any, sample: np.ndarray, options: CompileOptions):
    """The sample's rows as the forest ``node`` reads them (after the ops before it)."""
    graph = spec.graph
    values: dict[str, Any] = {}
    for n in graph.toposort():
        if n.name == node.name:
            return np.asarray(values[node.inputs[0]])
        values[n.name] = sample if n.op is Op.INPUT else n.attrs.rule(
            n, [values[i] for i in n.inputs], options)
    return None


__all__ = ["Lanes", "Layout", "LoopOrder", "NativeBackend", "Parallel", "Schedule", "compile_spec"]
