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

import contextlib
import contextvars
import gc
import hashlib
import os
import platform
import signal
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Protocol

import llvmlite
import llvmlite.binding as llvm

from peregrine import config
from peregrine.kernels.threads import usable_cpus

STATS = {"compiled": 0, "disk_hits": 0, "memory_hits": 0}
_OBJECT_MAGICS = (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\x64\x86")  # ELF, Mach-O, COFF x86-64
_lock = threading.Lock()
_loaded: dict[str, tuple[object, int]] = {}  # key -> (engine kept alive, function address)
_built: dict[str, bytes] = {}  # key -> object code load_all compiled, until kernel_address loads it


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
    are two. A source may also have a ``cost_hint`` (relative compile time, default 1)."""

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


@contextlib.contextmanager
def _no_gc():
    """llvmlite.ir builds a module from hundreds of thousands of small objects, and the cyclic
    collector, started every few hundred allocations, walks the process's whole heap each time
    (torch's and scikit-learn's objects, the user's models): it took more than half of the
    build (LightGBM 500 x 256 leaves, 4 kernels: 1.0 s with it, 0.44 s without). The module's
    own cycles are collected by the next collection after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def compile_object(spec: KernelSource, target: Target) -> bytes:
    """IR -> optimised module -> object code for ``target``."""
    tm = target_machine(target)
    with _no_gc():
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
        obj, origin = _built.pop(key, None), "compiled"  # load_all's, already on disk
        if obj is None and use_disk and path.is_file():
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


# ---------------------------------------------------------------- several kernels at once --
# llvmlite runs every LLVM call behind one process-wide lock, so threads cannot compile two
# kernels at once; forked processes can. A cold compile of a forest builds two to four kernels
# (batch and few-rows, per compare dtype) of similar cost, which is most of its time.
_CHILD_TIMEOUT_S = 600.0


def compile_jobs(threads: int | None = None) -> int:
    """Processes a compile may use: the compiled model's thread count (what the user lets it
    run on; None: the CPUs this process may use), unless ``PEREGRINE_COMPILE_JOBS`` says
    otherwise."""
    return config.compile_jobs() or max(1, usable_cpus() if threads is None else threads)


_BATCH: contextvars.ContextVar[list | None] = contextvars.ContextVar("peregrine_jit_batch",
                                                                      default=None)


@contextlib.contextmanager
def together(jobs: int):
    """Kernels asked for through :func:`defer` inside the block are compiled at its end, all
    at once (:func:`load_all`), and then each asker's ``then`` runs (and loads its kernels).
    A compile wraps its forests' and fused regions' preparation in one block, so a pipeline's
    kernels (several methods, two input dtypes, batch and few-rows forms) share the
    processes. Nothing is compiled if the block raises."""
    batch: list = []
    token = _BATCH.set(batch)
    try:
        yield
    finally:
        _BATCH.reset(token)
    by_target: dict[Target, list[KernelSource]] = {}
    for target, specs, _ in batch:
        by_target.setdefault(target, []).extend(specs)
    for target, specs in by_target.items():
        load_all(specs, target, jobs=jobs)
    for _, _, then in batch:
        then()


def defer(specs: list[KernelSource], then: Any, target: Target | None = None) -> bool:
    """Inside :func:`together`: note ``specs`` (for ``target``, default the host) and run
    ``then()`` once they are compiled; returns False outside one (the caller compiles now)."""
    batch = _BATCH.get()
    if batch is None:
        return False
    batch.append((target or Target.host(), list(specs), then))
    return True


def load_all(specs: list[KernelSource], target: Target | None = None, jobs: int = 1) -> int:
    """Compile the kernels of ``specs`` that neither memory nor the disk cache holds, in up
    to ``jobs`` processes, so that ``kernel_address`` then only loads them. Returns how many
    were compiled. Children are forked, so they inherit the specs (nothing is pickled); each
    takes the next kernel from a shared pipe of indices (a short one may follow a long one),
    writes its object to a file and exits. The parent compiles from the same pipe meanwhile.
    A child that fails or hangs costs only its kernels being compiled again here."""
    target = target or Target.host()
    todo: dict[str, KernelSource] = {}
    for spec in specs:
        key = cache_key(spec, target)
        if key not in _loaded and key not in _built and key not in todo \
                and not (cache_dir() / f"{key}.o").is_file():
            todo[key] = spec
    jobs = min(jobs, len(todo))
    if jobs < 2 or not sys.platform.startswith("linux"):
        return 0  # kernel_address compiles them one by one, as it always did
    # longest first: the processes take kernels in turn, so a long one taken last would
    # leave the others idle (the batch kernels of two input dtypes cost twice the few-rows
    # ones); KernelSource.cost_hint is optional
    keys = sorted(todo, key=lambda k: -float(getattr(todo[k], "cost_hint", 1.0)))
    for start in range(0, len(keys), 256):  # the pipe hands out one byte per kernel
        chunk = keys[start:start + 256]
        with tempfile.TemporaryDirectory(prefix="peregrine-build-") as tmp:
            objects = _compile_forked([todo[k] for k in chunk], target, jobs, Path(tmp))
        for i, key in enumerate(chunk):
            obj = objects.get(i)
            if obj is None:  # its child failed: compile it here
                obj = compile_object(todo[key], target)
            write_atomic(cache_dir() / f"{key}.o", obj)
            _built[key] = obj
    return len(keys)


def _compile_forked(specs: list[KernelSource], target: Target, jobs: int,
                    tmp: Path) -> dict[int, bytes]:
    _init()
    target_machine(target)  # made once here, inherited by the children
    read_end, write_end = os.pipe()
    os.write(write_end, bytes(range(len(specs))))
    os.close(write_end)  # an empty pipe now reads as the end: no kernel left
    pids: list[int] = []
    objects: dict[int, bytes] = {}
    llvm_lock = getattr(getattr(llvm.ffi, "lib", None), "_lock", None)
    try:
        for _ in range(jobs - 1):
            # no other thread is inside LLVM or this cache while forking (the child gets
            # their locks as they are at this instant)
            try:
                with _lock, (llvm_lock or contextlib.nullcontext()), \
                        warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)  # with threads, 3.12+
                    pid = os.fork()
            except OSError:  # no process to spare (limits, memory): fewer helpers, or none
                break
            if pid == 0:
                _child(specs, target, read_end, tmp)  # never returns
            pids.append(pid)
        while (b := os.read(read_end, 1)):
            objects[b[0]] = compile_object(specs[b[0]], target)
        _wait(pids)
        pids = []
    finally:
        for pid in pids:  # interrupted here: the children go too
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        os.close(read_end)
    for i in range(len(specs)):
        if i not in objects:
            with contextlib.suppress(OSError):
                obj = (tmp / f"{i}.o").read_bytes()
                if obj.startswith(_OBJECT_MAGICS):
                    objects[i] = obj
    return objects


def _child(specs: list[KernelSource], target: Target, read_end: int, tmp: Path) -> None:
    code = 1
    try:
        while (b := os.read(read_end, 1)):
            obj = compile_object(specs[b[0]], target)
            part = tmp / f"{b[0]}.part"
            part.write_bytes(obj)
            part.rename(tmp / f"{b[0]}.o")  # whole or absent
        code = 0
    finally:
        os._exit(code)  # no atexit handlers, no flushing the parent's buffers twice


def _wait(pids: list[int]) -> None:
    deadline = time.monotonic() + _CHILD_TIMEOUT_S
    left = list(pids)
    while left:
        for pid in list(left):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                left.remove(pid)
        if left:
            if time.monotonic() > deadline:
                for pid in left:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                        os.waitpid(pid, 0)
                return
            time.sleep(0.002)
