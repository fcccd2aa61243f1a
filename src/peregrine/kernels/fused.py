"""Running fused row-wise kernels (rowwise.py): one compiled kernel per input dtype, rows split
over the native backend's thread pool (ctypes drops the GIL for each call), outputs allocated
in their final dtype and written once by the kernel."""

from __future__ import annotations

import ctypes
import hashlib
import math
import threading
from functools import partial
from typing import Any

import numpy as np
from llvmlite import ir

from peregrine.errors import NonFiniteInput
from peregrine.ir import Graph
from peregrine.kernels import jit
from peregrine.kernels.irutil import F64, I64, PTR, gep
from peregrine.kernels.rowwise import RowPlan, plan
from peregrine.kernels.threads import pool

ROW_KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                              ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
# Below this many input values per thread a hand-off to the pool (tens of microseconds) costs
# more than the rows take: the kernel reads about one value per nanosecond.
PARALLEL_MIN_VALUES = 1 << 16
DTYPES = ("float32", "float64")


class RowKernel:
    """The outputs ``wanted`` of ``graph`` as one fused kernel per input dtype, built on first
    use of that dtype (``prepare`` builds them up front). ``fusable`` is False when some node is
    not a row-wise op the generator knows; callers then keep their own program. A graph may
    fuse for float64 input and not for float32 (a step whose float32 form the generator does
    not reproduce, e.g. NumPy's float32 exp): ``supports`` tells, per input dtype."""

    def __init__(self, graph: Graph, wanted: list[str], narrow: list[bool | str]) -> None:
        self._graph, self._wanted, self._narrow = graph, list(wanted), list(narrow)
        self._plans: dict[str, RowPlan | None] = {}
        self._fns: dict[str, Any] = {}
        self._calls: dict[np.dtype, tuple] = {}
        self._lock = threading.Lock()
        self.fusable = self._plan("float64") is not None

    def _plan(self, dtype: str) -> RowPlan | None:
        if dtype not in self._plans:
            self._plans[dtype] = plan(self._graph, self._wanted, self._narrow, dtype)
        return self._plans[dtype]

    def _fn(self, dtype: str) -> tuple[Any, RowPlan]:
        fn = self._fns.get(dtype)
        if fn is None:
            with self._lock:
                fn = self._fns.get(dtype)
                if fn is None:
                    p = self._plan(dtype)
                    address, _ = jit.kernel_address(p.spec)
                    fn = self._fns[dtype] = (ROW_KERNEL(address), p)
                    # what run() needs per call, keyed by the dtype object (its .name costs
                    # ~2 us, a third of a one-row call): kernel, plan, parameter address,
                    # output (dtype, width) pairs
                    self._calls[np.dtype(dtype)] = (
                        fn[0], p, p.params.ctypes.data,
                        tuple(zip(p.out_dtypes, p.out_widths)))
        return fn

    def supports(self, dtype: Any) -> bool:
        return self._plan(np.dtype(dtype).name) is not None

    def prepare(self, dtypes: tuple[str, ...] = DTYPES) -> None:
        """Compile now (errors surface at compile time; no first-call latency), the dtypes'
        kernels at once; inside ``jit.together``, at the end of the compile with the others."""
        specs = [self._plan(d).spec for d in dtypes if self.supports(d)]
        if jit.defer(specs, lambda: self.prepare(dtypes)):
            return
        jit.load_all(specs, jobs=jit.compile_jobs())
        for dtype in dtypes:
            if self.supports(dtype):
                self._fn(dtype)

    @property
    def symbols(self) -> dict[str, str]:
        return {d: p.spec.symbol for d, p in self._plans.items() if p is not None}

    def run(self, X: np.ndarray, n_threads: int, check: bool = False) -> list[np.ndarray]:
        """Outputs for a C-contiguous 2-D float32/float64 ``X``. ``check``: raise
        NonFiniteInput when X holds a NaN or an infinity (the outputs are then discarded)."""
        call = self._calls.get(X.dtype)
        if call is None:
            self._fn(X.dtype.name)
            call = self._calls[X.dtype]
        fn, p, params, shapes = call
        n = X.shape[0]
        outs = [np.empty((n, w), dtype=dt) for dt, w in shapes]
        # addresses through ctypes (~0.2 us) rather than ndarray.ctypes (~1 us each): at one
        # row these calls were half the time
        ptrs = (ctypes.c_void_p * len(outs))(*[_address(o) for o in outs])
        x_ptr, out_ptr = _address(X), ctypes.addressof(ptrs)
        threads = max(1, min(n_threads, n * max(1, X.shape[1]) // PARALLEL_MIN_VALUES))
        flags = (ctypes.c_double * threads)()
        base = ctypes.addressof(flags)
        if threads == 1:
            fn(x_ptr, 0, n, params, out_ptr, base)
        else:
            bounds = np.linspace(0, n, threads + 1).astype(np.int64)
            jobs = [pool(threads).submit(fn, x_ptr, int(bounds[i]), int(bounds[i + 1]), params,
                                          out_ptr, base + 8 * i)
                    for i in range(1, threads)]
            fn(x_ptr, 0, int(bounds[1]), params, out_ptr, base)
            for job in jobs:
                job.result()
        if check and not math.isfinite(sum(flags)):
            raise NonFiniteInput
        return outs


def _address(a: np.ndarray) -> int:
    """The address of ``a``'s first element."""
    try:
        return ctypes.addressof(_CHAR_AT(a))
    except (TypeError, ValueError, BufferError):  # read-only or exotic buffers
        return a.ctypes.data


_CHAR_AT = ctypes.c_char.from_buffer


def row_kernel(graph: Graph, wanted: list[str], narrow: list[bool | str]) -> RowKernel | None:
    kernel = RowKernel(graph, wanted, narrow)
    return kernel if kernel.fusable else None


def narrow_outputs(spec: Any, outputs: tuple[str, ...]) -> list[bool]:
    """Per output: every method returning it keeps the input's float dtype (sklearn's
    transformers on float32), so the kernel stores it in that dtype."""
    return [{m.dtype for m in spec.methods.values() if m.output == o} == {"input"}
            for o in outputs]


def checked_runner(kernel: RowKernel, spec: Any, options: Any, threads: Any) -> Any:
    """``Executable.runner`` for a fused output: the kernel straight on numpy, checking the
    source's NaN/inf policy in the same pass (``checks_finite``; raises NonFiniteInput).
    Where the kernel's output is float64 for both input dtypes, ``run.native`` makes the
    method a machine-code builtin for a few rows (kernels/pyentry.py, through ``_row_entry``)."""
    check = options.validate_input and not (spec.allow_nan and spec.allow_inf)

    def run(X: np.ndarray) -> np.ndarray:
        return kernel.run(np.ascontiguousarray(X), threads(), check)[0]

    run.checks_finite = check  # type: ignore[attr-defined]
    plans = [kernel._plan(d) for d in DTYPES]
    if len(kernel._wanted) == 1 and all(p is not None and p.out_dtypes == ("float64",)
                                        for p in plans):
        run.dtype = np.dtype(np.float64)  # type: ignore[attr-defined]
        run.native = partial(_row_entry, kernel, run)  # type: ignore[attr-defined]
    return run


# The few-rows builtin (pyentry.make_entry) calls ``void kernel(int64 *args)`` with the copied
# rows, their count and an output buffer in the argument words; a row kernel takes its six
# arguments separately, so a one-function shim (the same for every row kernel) unpacks them:
# args = [x, stride (rows are contiguous: unused), rows, out, params, row kernel's address].
ENTRY_ROWS = 64
_SHIM_ARGS = 6


class _ShimSource:
    symbol = "peregrine_rowshim_v1"

    @property
    def key(self) -> str:
        return hashlib.sha256(self.symbol.encode()).hexdigest()[:20]

    def build_ir(self, triple: str) -> ir.Module:
        module = ir.Module(name=self.symbol)
        module.triple = triple
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), name=self.symbol)
        b = ir.IRBuilder(fn.append_basic_block("entry"))

        def word(k: int) -> ir.Value:
            return b.load(gep(b, fn.args[0], [ir.Constant(I64, k)], source_etype=I64), typ=I64)

        outs = b.alloca(PTR, name="outs")
        b.store(b.inttoptr(word(3), PTR), outs)
        flag = b.alloca(F64, name="flag")  # the finite check: the entry did it while copying
        row_ty = ir.FunctionType(ir.VoidType(), [PTR, I64, I64, PTR, PTR, PTR])
        target = b.inttoptr(word(5), row_ty.as_pointer())
        b.call(target, [b.inttoptr(word(0), PTR), ir.Constant(I64, 0), word(2),
                        b.inttoptr(word(4), PTR), outs, flag])
        b.ret_void()
        return module


def _row_entry(kernel: RowKernel, call: Any, fallback: Any = None, finite_only: bool = False,
               name: str = "run", doc: str = "", bound: float = math.inf) -> Any:
    """``call`` as a pyentry builtin over this row kernel (None where one cannot be made)."""
    from peregrine.kernels.pyentry import make_entry

    try:
        shim = jit.kernel_address(_ShimSource())[0]
    except Exception:  # noqa: BLE001  (no shim: the Python path stays)
        return None
    kernels, keep = {}, []
    for d in DTYPES:
        fn, p = kernel._fn(d)
        template = np.array([0, 0, 0, 0, p.params.ctypes.data,
                             ctypes.cast(fn, ctypes.c_void_p).value], np.int64)
        kernels[np.dtype(d)] = (shim, d == "float32", template)
        keep.append((fn, p, template))
    width = kernel._plans["float64"].out_widths[0]
    return make_entry(name, doc, call if fallback is None else fallback,
                      n_features=int(kernel._plans["float64"].spec.n_features),
                      max_rows=ENTRY_ROWS, width=width, out_stride=width,
                      out_dtype=np.float64, finite_only=finite_only, kernels=kernels,
                      slots={"x": 0, "stride": 1, "re": 2, "out": 3}, keep=(kernel, keep),
                      bound=bound)
