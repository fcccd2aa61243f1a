"""Native CPU backend: LLVM machine code for tree ensembles through llvmlite.

Pipeline (one module each): ``schedule`` (what to generate) -> ``layout`` (pack the Forest into
flat node arrays) -> ``codegen`` (LLVM IR of a kernel generic over the model's numbers) ->
``jit`` (optimise, emit, cache on disk, load) -> ``executable`` (threads, the ops around trees).
Schedules are chosen in ``peregrine.tune.native_schedule`` unless ``CompileOptions.schedule``
names one.
"""

from __future__ import annotations

import importlib.util
from typing import ClassVar

from peregrine.backends.base import Backend, Executable
from peregrine.backends.native.schedule import (
    Lanes,
    Layout,
    LoopOrder,
    Parallel,
    Schedule,
    as_schedule,
)
from peregrine.errors import UnsupportedModelError
from peregrine.frontends.base import ModelSpec
from peregrine.ir import Op
from peregrine.options import CompileOptions


class NativeBackend(Backend):
    name = "native"
    description = "LLVM machine code (llvmlite): scheduled, vectorised tree walks on the CPU"
    devices: ClassVar[tuple[str, ...]] = ("cpu",)

    @classmethod
    def available(cls) -> bool:
        return importlib.util.find_spec("llvmlite") is not None

    @classmethod
    def compile(cls, spec: ModelSpec, options: CompileOptions, device: str) -> Executable:
        if device.split(":")[0] != "cpu":
            raise UnsupportedModelError(f"native backend runs on the CPU, not on {device!r}")
        return compile_spec(spec, options)


def compile_spec(spec: ModelSpec, options: CompileOptions, target=None) -> Executable:
    """Build the executable; ``target`` (a ``jit.Target``) defaults to the host CPU."""
    from peregrine.backends.native import jit
    from peregrine.backends.native.executable import (
        ForestProgram,
        NativeExecutable,
        default_threads,
    )
    from peregrine.tune.native_schedule import Choice, choose_schedule

    target = target or jit.Target.host()
    try:
        requested = as_schedule(options.schedule)
    except (TypeError, ValueError) as exc:
        raise UnsupportedModelError(f"CompileOptions.schedule: {exc}") from exc
    threads = default_threads(options)
    programs, reasons = {}, {}
    for node in spec.graph.nodes:
        if node.op is not Op.TREE_ENSEMBLE:
            continue
        forest = node.attrs["forest"]
        if requested is not None:
            choice = Choice(requested, None, 0, "set by CompileOptions.schedule")
        else:
            choice = choose_schedule(forest, options, target, threads)
        prog = ForestProgram(forest, choice.schedule, precision=options.precision,
                             target=target, n_threads=threads, small=choice.few_rows,
                             small_rows=choice.few_rows_max)
        prog.prepare()  # every kernel now (or from the disk cache), not on the first call
        programs[node.name], reasons[node.name] = prog, choice.why
    return NativeExecutable(spec, options, programs, reasons, target)


__all__ = ["Lanes", "Layout", "LoopOrder", "NativeBackend", "Parallel", "Schedule", "compile_spec"]
