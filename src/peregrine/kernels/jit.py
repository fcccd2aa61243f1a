"""Target machine, optimisation pipeline, on-disk object cache and loading (MCJIT).

Object code is cached in ``<config.cache_dir()>/native`` (``$PEREGRINE_CACHE_DIR``, default
``~/.cache/peregrine``) under a
key made of the kernel spec, the code generator's own source, the llvmlite and LLVM versions and
the target CPU name and features, so a cached object is never loaded into a process that could
not have produced it. Cached objects are loaded into MCJIT with ``add_object_file``: a hit costs
no LLVM optimisation or code generation at all.

Debugging: ``PEREGRINE_DUMP_LLVM=<dir>`` (see ``peregrine.config``) writes each kernel's unoptimised IR,
optimised IR and
assembly there.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import tempfile
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Protocol

import llvmlite
import llvmlite.binding as llvm

from peregrine import config

STATS = {"compiled": 0, "disk_hits": 0, "memory_hits": 0}
_OBJECT_MAGICS = (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\x64\x86")  # ELF, Mach-O, COFF x86-64
_lock = threading.Lock()
_loaded: dict[str, tuple[object, int]] = {}  # key -> (engine kept alive, function address)


@dataclass(frozen=True)
class Target:
    """CPU the code is generated for. ``host()`` is what llvmlite detects (AVX-512 here);
    ``generic()`` is baseline x86-64 (SSE2), the portable fallback every x86-64 CPU runs."""

    cpu: str
    features: str

    @classmethod
    @cache
    def host(cls) -> Target:
        """The CPU this process runs on, or the level ``PEREGRINE_CPU_LEVEL`` forces (so one
        machine can run the code paths an AVX2 or SSE4.2 CPU takes)."""
        level = config.cpu_level()
        if level is not None:
            return cls(level.llvm_cpu, level.llvm_features)
        try:
            features = llvm.get_host_cpu_features().flatten()
        except RuntimeError:  # LLVM cannot read features on some hosts: take the CPU defaults
            features = ""
        return cls(llvm.get_host_cpu_name(), features)

    @classmethod
    def generic(cls) -> Target:
        machine = platform.machine().lower()
        return cls("x86-64" if machine in ("x86_64", "amd64") else "generic", "")

    def has(self, feature: str) -> bool:
        return f"+{feature}" in self.features.split(",")

    @property
    def isa(self) -> str:
        """Instruction-set family the code generator specialises for (lane permutes)."""
        if self.has("avx512f"):
            return "avx512"
        if self.has("avx2"):
            return "avx2"
        return "generic"

    @property
    def simd_bytes(self) -> int:
        """Widest vector register the target has (drives the default vector width)."""
        if self.has("avx512f"):
            return 64
        if self.has("avx2"):
            return 32
        return 16


@cache
def _init() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@cache
def target_machine(target: Target) -> llvm.TargetMachine:
    """The machine that optimises and emits code (never handed to an engine)."""
    return _new_target_machine(target)


def _new_target_machine(target: Target) -> llvm.TargetMachine:
    _init()
    t = llvm.Target.from_triple(llvm.get_process_triple())
    return t.create_target_machine(cpu=target.cpu, features=target.features, opt=3,
                                   reloc="default", codemodel="jitdefault", jit=True)


class KernelSource(Protocol):
    """What the jit compiles: a kernel's parameters (``key``, its cache identity), its
    function's name and the LLVM module that defines it. The forest kernels
    (``backends/native/codegen.KernelSpec``) and the fused row kernels (``rowwise.RowSpec``)
    are two."""

    @property
    def key(self) -> str: ...

    @property
    def symbol(self) -> str: ...

    def build_ir(self, triple: str) -> Any: ...


@cache
def _source_hash(spec_module: str) -> str:
    """The generators' source is part of the key: editing this library or the module that
    defines the spec's kernel invalidates old objects."""
    h = hashlib.sha256()
    dirs = {Path(__file__).parent, Path(sys.modules[spec_module].__file__).parent}
    for path in sorted(p for d in dirs for p in d.glob("*.py")):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def cache_key(spec: KernelSource, target: Target) -> str:
    parts = [spec.key, _source_hash(type(spec).__module__), llvmlite.__version__,
             ".".join(map(str, llvm.llvm_version_info)), target.cpu, target.features]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def cache_dir() -> Path:
    return config.cache_dir() / "native"


def compile_object(spec: KernelSource, target: Target) -> bytes:
    """IR -> optimised module -> object code for ``target``."""
    tm = target_machine(target)
    text = str(spec.build_ir(llvm.get_process_triple()))
    mod = llvm.parse_assembly(text)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    d = config.dump_llvm_dir()
    if d is not None:
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{spec.symbol}.ll").write_text(text)
        (d / f"{spec.symbol}.opt.ll").write_text(str(mod))
        (d / f"{spec.symbol}.s").write_text(tm.emit_assembly(mod))
    return tm.emit_object(mod)


def kernel_address(spec: KernelSource, target: Target | None = None, *,
                   use_disk: bool = True) -> tuple[int, str]:
    """Address of the compiled kernel and where it came from ('memory', 'disk', 'compiled')."""
    target = target or Target.host()
    key = cache_key(spec, target)
    with _lock:
        if key in _loaded:
            STATS["memory_hits"] += 1
            return _loaded[key][1], "memory"
        path = cache_dir() / f"{key}.o"
        obj, origin = None, "compiled"
        if use_disk and path.is_file():
            try:
                obj, origin = path.read_bytes(), "disk"
            except OSError:
                obj = None
            if obj is not None and not obj.startswith(_OBJECT_MAGICS):  # not LLVM's output
                obj = None
        if obj is None:
            obj = compile_object(spec, target)
            if use_disk:
                write_atomic(path, obj)
        engine, address = _load(obj, spec.symbol, target)
        if address == 0 and origin == "disk":  # unusable cache entry: rebuild it once
            obj, origin = compile_object(spec, target), "compiled"
            write_atomic(path, obj)
            engine, address = _load(obj, spec.symbol, target)
        if address == 0:
            raise RuntimeError(f"native kernel {spec.symbol} did not load")
        STATS["disk_hits" if origin == "disk" else "compiled"] += 1
        _loaded[key] = (engine, address)
        return address, origin


def _load(obj: bytes, symbol: str, target: Target) -> tuple[object, int]:
    _init()
    # an engine owns (and frees) its target machine, so each gets a fresh one
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _new_target_machine(target))
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    return engine, engine.get_function_address(symbol)


def write_atomic(path: Path, data: bytes) -> None:
    """Concurrent processes may race to fill the cache; rename makes each write all-or-nothing."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache directory only costs recompilation
