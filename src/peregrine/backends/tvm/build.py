"""Target, schedule, compilation pipeline and the on-disk library cache of the tvm backend.

Target: LLVM for the host CPU (``llvm_get_system_cpu``, the ``-mcpu=native`` of TVM's CLI days),
or the level ``PEREGRINE_CPU_LEVEL`` forces (its CPU name and features), as the native backend.

Schedule: TVM's default CPU pipeline (``relax.backend.cpu_generic``) legalizes and fuses the
Relax ops into TIR functions but leaves their loops serial. One rule is added: the outermost
loop of every loop nest (the rows: every IR op is row-wise) runs in parallel. The tree walks are
written scheduled (``trees.py``) and keep theirs.

Cache: built libraries live in ``<config.cache_dir()>/tvm/<key>.so``, the key hashing the
program (the IR graph with every attribute, the options that steer lowering), this backend's
own source, the TVM version and the target, so a library is never loaded into a process that
could not have produced it. Artifacts store the IR, never a library: ``peregrine.load`` rebuilds
the program or finds it here. Libraries are written to a temporary name and renamed, so a
concurrent reader never sees a partial file.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from dataclasses import dataclass
from enum import Enum
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from tvm import relax, s_tir
from tvm.relax.backend.cpu_generic import pipeline as cpu_generic
from tvm.s_tir import dlight

from peregrine import config
from peregrine.ir import Forest

STATS = {"built": 0, "disk_hits": 0}


@cache
def host_target() -> tvm.target.Target:
    level = config.cpu_level()
    if level is not None:
        attrs = [f for f in level.llvm_features.split(",") if f]
        return tvm.target.Target({"kind": "llvm", "mcpu": level.llvm_cpu, "mattr": attrs})
    return tvm.target.Target({"kind": "llvm", "mcpu": tvm.target.codegen.llvm_get_system_cpu()})


# ------------------------------------------------------------------------- schedule --
@dlight.ScheduleRule.from_callable("peregrine_parallel_rows")
def parallel_rows(func: Any, target: Any, tunable: bool) -> s_tir.Schedule | None:
    """Outermost loop of each loop nest in parallel (when it is data-parallel)."""
    if not isinstance(func, tvm.tirx.PrimFunc):
        return None
    sch = s_tir.Schedule(func)
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        loops = sch.get_loops(block)
        if not loops:
            continue
        try:
            sch.parallel(loops[0])
        except tvm.error.TVMError:  # a reduction or an opaque nest: stays serial
            continue
    return sch


def build_pipeline(target: tvm.target.Target) -> tvm.transform.Pass:
    @tvm.transform.module_pass(opt_level=0, name="PeregrineTvmPipeline")
    def run(mod: tvm.IRModule, _ctx: Any) -> tvm.IRModule:
        with target:
            seq = tvm.transform.Sequential(
                cpu_generic.library_dispatch_passes(target)
                + cpu_generic.legalize_passes(target)
                + [dlight.ApplyDefaultSchedule(parallel_rows)]
                + cpu_generic.dataflow_lower_passes(target)
                + cpu_generic.finalize_passes(target))
            return seq(mod)

    return run


# ---------------------------------------------------------------------------- keys --
def _feed(h: Any, value: Any) -> None:
    """Hash ``value`` by content (arrays by dtype, shape and bytes; dataclasses by field)."""
    if isinstance(value, np.ndarray):
        h.update(f"a{value.dtype.str}{value.shape}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, Forest):
        meta, arrays = value.to_state()
        _feed(h, meta)
        _feed(h, arrays)
    elif isinstance(value, dict):
        h.update(b"d")
        for k in sorted(value, key=str):
            _feed(h, k)
            _feed(h, value[k])
    elif isinstance(value, (list, tuple)):
        h.update(f"l{len(value)}".encode())
        for v in value:
            _feed(h, v)
    elif isinstance(value, Enum):
        h.update(f"e{type(value).__name__}.{value.value}".encode())
    elif hasattr(value, "items") and callable(value.items):  # an op's Attrs
        h.update(type(value).__name__.encode())
        _feed(h, dict(value.items()))
    else:
        h.update(f"{type(value).__name__}:{value!r}".encode())


@cache
def _source_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.read_bytes())
    return h.hexdigest()


def program_key(graph: Any, outputs: tuple[str, ...], options: Any, n_features: int) -> str:
    h = hashlib.sha256()
    for node in graph.toposort():
        _feed(h, (node.name, node.op, node.inputs, node.dtype, node.width, node.attrs))
    _feed(h, (outputs, dict(graph.outputs), n_features, options.precision,
              options.tree_strategy, options.batch_size))
    _feed(h, (_source_digest(), tvm.__version__, str(host_target())))
    return h.hexdigest()[:32]


# --------------------------------------------------------------------------- build --
@dataclass(frozen=True)
class Built:
    module: Any  # the loaded runtime module (a Relax VM executable)
    cache_hit: bool
    seconds: float  # building or loading
    path: Path


def cache_path(key: str) -> Path:
    return config.cache_dir() / "tvm" / f"{key}.so"


def load_or_build(key: str, make_module: Any) -> Built:
    """The library for ``key``: loaded from the cache, or built from ``make_module()`` (an
    IRModule) and stored there."""
    path = cache_path(key)
    start = time.perf_counter()
    if path.exists():
        try:
            module = tvm.runtime.load_module(str(path))
            STATS["disk_hits"] += 1
            return Built(module, True, time.perf_counter() - start, path)
        except (tvm.error.TVMError, OSError, RuntimeError):  # damaged: build it again
            pass
    target = host_target()
    executable = tvm.compile(make_module(), target, relax_pipeline=build_pipeline(target))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", prefix=f".{key}.", dir=path.parent)
    os.close(fd)
    try:
        executable.export_library(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    STATS["built"] += 1
    module = tvm.runtime.load_module(str(path))
    return Built(module, False, time.perf_counter() - start, path)


def virtual_machine(module: Any) -> relax.VirtualMachine:
    return relax.VirtualMachine(module, tvm.cpu())
