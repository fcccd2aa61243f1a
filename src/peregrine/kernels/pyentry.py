"""A C-level Python callable around a few-rows kernel: ``entry(X) -> ndarray``.

One call of a compiled model on one row costs the kernel (~2-3 us for 500 trees) plus what
Python does around it: an attribute lookup, the inline input checks, a copy into the kernel's
buffer, the ctypes call (argument conversion, GIL hand-off) and a cast of the output into a new
array. Each step is 0.1-0.3 us in Python; together they were ~1.6 us. This module generates,
with LLVM, one function ``PyObject *entry(self, args, nargs, kwnames)`` (a METH_FASTCALL
builtin, so CPython calls it without building an argument tuple) that does those steps in
machine code for a call with one positional argument X:

* checks that X is exactly an ``np.ndarray`` with 2 dimensions, the model's width, 1 to
  ``max_rows`` rows and a float32 or float64 dtype in native byte order (others: fallback);
* copies the rows, any strides, into a stack buffer in the kernel's compare dtype (float64 to
  float32 is LLVM's ``fptrunc``, the round-to-nearest-even that NumPy's ``astype`` does) and,
  when the model rejects NaN or infinity, notes any such value;
* calls the kernel without the GIL (``PyEval_SaveThread``), writes into a stack buffer;
* allocates the result with NumPy's ``PyArray_New`` and rounds/casts the float64 outputs into
  it as ``astype`` would (float32: ``fptrunc``; int64 class indices: ``fptosi``).

Anything else (another type, a non-finite value the model rejects, too many rows or features
for the stack buffers; ``X=`` as a keyword or another argument count: the call as made) calls
the Python ``fallback`` and returns what it returns: the
entry is an accelerator for the cases it checks, never a second set of rules. Every call keeps
its buffers on its own stack, so threads may call it at once (the kernel runs without the GIL).

The function is generic: everything model-specific (sizes, kernel and argument templates per
input dtype, the NumPy and CPython addresses) sits in a context block read at run time, so one
object file serves every model and is cached like the kernels. The context is an int64 array
held by the builtin's ``self`` (a tuple that also keeps the fallback and the kernel's buffers
alive). The CPython and NumPy struct offsets it reads are checked against live objects before
an entry is made; where they differ (another interpreter build) ``make_entry`` returns None and
callers keep their Python path.
"""

from __future__ import annotations

import ctypes
import hashlib
import inspect
import math
import pickle
import sys
import threading
from typing import Any

import numpy as np
from llvmlite import ir

from peregrine.kernels import jit
from peregrine.kernels.irutil import F32, F64, I1, I32, I64, PTR, gep

# stack buffers: rows x features of the input, rows x kernel columns of the output
X_CAP = 4096
OUT_CAP = 1024
# context block slots (int64 each)
CTX = ("n_features", "max_rows", "width", "out_stride", "out_code", "out_typenum",
       "finite_only", "fallback", "array_type", "array_new", "save_thread", "restore_thread",
       "call_one", "vectorcall", "cmp32_f32", "cmp32_f64", "fn_f32", "fn_f64",
       "args_f32", "args_f64", "n_args", "arg_x", "arg_stride", "arg_re", "arg_out", "bound")
_C = {name: i for i, name in enumerate(CTX)}
OUT_CODES = {np.dtype(np.float64): 0, np.dtype(np.float32): 1, np.dtype(np.int64): 2}
# CPython / NumPy object layout (checked by _layout_ok before any entry is made)
OB_TYPE, TUPLE_ITEM0 = 8, 24
ARR_DATA, ARR_ND, ARR_DIMS, ARR_STRIDES, ARR_DESCR = 16, 24, 32, 40, 56
DESCR_BYTEORDER, DESCR_TYPE_NUM = 26, 28  # PyArray_Descr, NumPy 1.x and 2.x alike
METH_FASTCALL_KEYWORDS = 0x0080 | 0x0002


class _EntrySource:
    """The entry's LLVM module, for ``jit.kernel_address`` (cached on disk like kernels)."""

    symbol = "peregrine_pyentry_v3"

    @property
    def key(self) -> str:
        return hashlib.sha256(f"{self.symbol}|{X_CAP}|{OUT_CAP}|{CTX}".encode()).hexdigest()[:20]

    def build_ir(self, triple: str) -> ir.Module:
        return _build(self.symbol, triple)


def _build(symbol: str, triple: str) -> ir.Module:
    module = ir.Module(name=symbol)
    module.triple = triple
    # METH_FASTCALL | METH_KEYWORDS: (self, args, nargs, kwnames)
    fn = ir.Function(module, ir.FunctionType(PTR, [PTR, PTR, I64, PTR]), name=symbol)
    entry = fn.append_basic_block("entry")
    b = ir.IRBuilder(entry)
    self_, argv, nargs, kwnames = fn.args

    def at(p: ir.Value, off: int, typ: ir.Type = I64) -> ir.Value:
        return b.load(gep(b, p, [ir.Constant(I64, off)], source_etype=ir.IntType(8)), typ=typ)

    xbuf = b.alloca(ir.ArrayType(F64, X_CAP), name="xbuf")  # float32 rows use its first half
    obuf = b.alloca(ir.ArrayType(F64, OUT_CAP), name="obuf")
    args = b.alloca(ir.ArrayType(I64, 16), name="args")
    dims2 = b.alloca(ir.ArrayType(I64, 2), name="dims")
    bad = b.alloca(I1, name="bad")
    ctx = at(at(self_, TUPLE_ITEM0, PTR), ARR_DATA, PTR)

    def c(name: str) -> ir.Value:
        return b.load(gep(b, ctx, [ir.Constant(I64, _C[name])], source_etype=I64), typ=I64)

    # one positional argument and no keywords, else the fallback gets the call as it came
    # (``X=...``, no argument, two: the Python function's own handling and errors)
    one = fn.append_basic_block("one")
    other = fn.append_basic_block("other")
    plain = b.and_(b.icmp_signed("==", nargs, ir.Constant(I64, 1)),
                   b.icmp_unsigned("==", kwnames, ir.Constant(PTR, None)))
    b.cbranch(plain, one, other)
    b.position_at_end(other)
    vcall_ty = ir.FunctionType(PTR, [PTR, PTR, I64, PTR])
    b.ret(b.call(_fnptr(b, c("vectorcall"), vcall_ty),
                 [b.inttoptr(c("fallback"), PTR), argv, nargs, kwnames]))
    b.position_at_end(one)
    X = b.load(argv, typ=PTR)
    fallback = fn.append_basic_block("fallback")
    checks = [fn.append_basic_block(f"check{i}") for i in range(4)]
    # X is exactly an ndarray of 2 dimensions
    is_arr = b.icmp_unsigned("==", at(X, OB_TYPE), c("array_type"))
    b.cbranch(is_arr, checks[0], fallback)
    b.position_at_end(checks[0])
    b.cbranch(b.icmp_signed("==", at(X, ARR_ND, I32), ir.Constant(I32, 2)), checks[1], fallback)
    b.position_at_end(checks[1])
    dims, strides = at(X, ARR_DIMS, PTR), at(X, ARR_STRIDES, PTR)
    n, nf = at(dims, 0), at(dims, 8)
    s0, s1 = at(strides, 0), at(strides, 8)
    out_stride, width = c("out_stride"), c("width")
    ok = b.and_(b.icmp_signed("==", nf, c("n_features")), b.icmp_signed(">=", n,
                                                                         ir.Constant(I64, 1)))
    ok = b.and_(ok, b.icmp_signed("<=", n, c("max_rows")))
    ok = b.and_(ok, b.icmp_signed("<=", b.mul(n, nf), ir.Constant(I64, X_CAP)))
    ok = b.and_(ok, b.icmp_signed("<=", b.mul(n, out_stride), ir.Constant(I64, OUT_CAP)))
    b.cbranch(ok, checks[2], fallback)
    b.position_at_end(checks[2])
    descr = at(X, ARR_DESCR, PTR)
    num = at(descr, DESCR_TYPE_NUM, I32)
    native_order = b.icmp_unsigned("!=", at(descr, DESCR_BYTEORDER, ir.IntType(8)),
                                   ir.Constant(ir.IntType(8), ord(">")))
    is64 = b.icmp_signed("==", num, ir.Constant(I32, np.dtype(np.float64).num))
    is_float = b.or_(is64, b.icmp_signed("==", num, ir.Constant(I32, np.dtype(np.float32).num)))
    b.cbranch(b.and_(is_float, native_order), checks[3], fallback)
    b.position_at_end(checks[3])
    cmp32 = b.icmp_signed("!=", b.select(is64, c("cmp32_f64"), c("cmp32_f32")),
                          ir.Constant(I64, 0))
    data = at(X, ARR_DATA, PTR)
    b.store(ir.Constant(I1, 0), bad)
    bound = b.bitcast(c("bound"), F64)
    _copy_rows(b, fn, data, n, nf, s0, s1, is64, cmp32, xbuf, bad, bound)
    finite_only = b.icmp_signed("!=", c("finite_only"), ir.Constant(I64, 0))
    reject = b.and_(finite_only, b.load(bad, typ=I1))
    run = fn.append_basic_block("run")
    b.cbranch(reject, fallback, run)

    b.position_at_end(run)
    template = b.inttoptr(b.select(is64, c("args_f64"), c("args_f32")), PTR)
    _loop(b, fn, ir.Constant(I64, 0), c("n_args"), "args", lambda i: b.store(
        b.load(gep(b, template, [i], source_etype=I64), typ=I64),
        gep(b, args, [ir.Constant(I64, 0), i], source_etype=args.allocated_type)))

    def put(slot: str, value: ir.Value) -> None:
        b.store(value, gep(b, args, [ir.Constant(I64, 0), c(slot)],
                           source_etype=args.allocated_type))

    put("arg_x", b.ptrtoint(xbuf, I64))
    put("arg_stride", nf)
    put("arg_re", n)
    put("arg_out", b.ptrtoint(obuf, I64))
    kernel_ty = ir.FunctionType(ir.VoidType(), [PTR])
    kernel = b.inttoptr(b.select(is64, c("fn_f64"), c("fn_f32")), PTR)
    save_ty = ir.FunctionType(PTR, [])
    restore_ty = ir.FunctionType(ir.VoidType(), [PTR])
    save = b.call(_fnptr(b, c("save_thread"), save_ty), [])
    b.call(_fnptr(b, kernel, kernel_ty, cast=False), [b.bitcast(args, PTR)])
    b.call(_fnptr(b, c("restore_thread"), restore_ty), [save])
    b.store(n, gep(b, dims2, [ir.Constant(I64, 0), ir.Constant(I64, 0)],
                   source_etype=dims2.allocated_type))
    b.store(width, gep(b, dims2, [ir.Constant(I64, 0), ir.Constant(I64, 1)],
                       source_etype=dims2.allocated_type))
    new_ty = ir.FunctionType(PTR, [PTR, I32, PTR, I32, PTR, PTR, I32, I32, PTR])
    null = ir.Constant(PTR, None)
    arr = b.call(_fnptr(b, c("array_new"), new_ty), [
        b.inttoptr(c("array_type"), PTR), ir.Constant(I32, 2), b.bitcast(dims2, PTR),
        b.trunc(c("out_typenum"), I32), null, null, ir.Constant(I32, 0), ir.Constant(I32, 0),
        null])
    fill = fn.append_basic_block("fill")
    fail = fn.append_basic_block("fail")
    b.cbranch(b.icmp_unsigned("==", arr, null), fail, fill)
    b.position_at_end(fail)
    b.ret(null)  # PyArray_New set the exception (MemoryError)
    b.position_at_end(fill)
    _store_out(b, fn, at(arr, ARR_DATA, PTR), obuf, n, width, out_stride, c("out_code"))
    b.ret(arr)

    b.position_at_end(fallback)
    call_ty = ir.FunctionType(PTR, [PTR, PTR])
    b.ret(b.call(_fnptr(b, c("call_one"), call_ty), [b.inttoptr(c("fallback"), PTR), X]))
    return module


def _fnptr(b: ir.IRBuilder, addr: ir.Value, ty: ir.FunctionType, cast: bool = True):
    """A call target from an address (opaque pointers: llvmlite reads the signature from
    the pointer's pointee type, and prints it as ``ptr``)."""
    p = b.inttoptr(addr if cast else b.ptrtoint(addr, I64), ty.as_pointer())
    return p


def _loop(b: ir.IRBuilder, fn: ir.Function, start, stop, name: str, body) -> None:
    pre = b.block
    cond = fn.append_basic_block(f"{name}.cond")
    loop = fn.append_basic_block(f"{name}.body")
    done = fn.append_basic_block(f"{name}.end")
    b.branch(cond)
    b.position_at_end(cond)
    i = b.phi(I64, name=f"{name}.i")
    i.add_incoming(start, pre)
    b.cbranch(b.icmp_signed("<", i, stop), loop, done)
    b.position_at_end(loop)
    body(i)
    i.add_incoming(b.add(i, ir.Constant(I64, 1)), b.block)
    b.branch(cond)
    b.position_at_end(done)


def _copy_rows(b, fn, data, n, nf, s0, s1, is64, cmp32, xbuf, bad, bound) -> None:
    """xbuf[r, f] = X[r, f] in the compare dtype, any strides; bad |= not finite, or |X[r, f]|
    above ``bound`` (+inf: none; a guarded model's input bound, runtime/guards.py)."""
    fabs = b.module.declare_intrinsic("llvm.fabs", [F64])

    def row(r):
        rbase = b.mul(r, s0)

        def col(f):
            src = gep(b, data, [b.add(rbase, b.mul(f, s1))], source_etype=ir.IntType(8))
            v32 = b.fpext(b.load(src, typ=F32, align=1), F64)
            v = b.select(is64, b.load(src, typ=F64, align=1), v32)
            # the value the kernel compares: a float64 beyond float32's range is infinity there
            # (scikit-learn's trees reject it as "too large for float32")
            t = b.fptrunc(v, F32)
            seen = b.select(cmp32, b.fpext(t, F64), v)
            over = b.fcmp_ordered(">", b.call(fabs, [v]), bound)
            b.store(b.or_(b.load(bad, typ=I1), b.or_(
                b.fcmp_unordered("uno", b.fsub(seen, seen), seen), over)), bad)
            at = b.add(b.mul(r, nf), f)
            with b.if_else(cmp32) as (narrow, wide):
                with narrow:
                    b.store(t, gep(b, xbuf, [at], source_etype=F32))
                with wide:
                    b.store(v, gep(b, xbuf, [at], source_etype=F64))

        _loop(b, fn, ir.Constant(I64, 0), nf, "col", col)

    _loop(b, fn, ir.Constant(I64, 0), n, "row", row)


def _store_out(b, fn, dst, obuf, n, width, out_stride, code) -> None:
    """dst[r, c] = obuf[r, c] as the result dtype (astype's rounding)."""
    def row(r):
        def col(k):
            v = b.load(gep(b, obuf, [b.add(b.mul(r, out_stride), k)], source_etype=F64),
                       typ=F64)
            at = b.add(b.mul(r, width), k)
            sw = b.switch(code, fn.append_basic_block("o.f64"))
            default = sw.default
            done = fn.append_basic_block("o.done")
            for value, ty in ((1, F32), (2, I64)):
                blk = fn.append_basic_block(f"o.{value}")
                sw.add_case(ir.Constant(I64, value), blk)
                b.position_at_end(blk)
                x = b.fptrunc(v, F32) if ty is F32 else b.fptosi(v, I64)
                b.store(x, gep(b, dst, [at], source_etype=ty))
                b.branch(done)
            b.position_at_end(default)
            b.store(v, gep(b, dst, [at], source_etype=F64))
            b.branch(done)
            b.position_at_end(done)

        _loop(b, fn, ir.Constant(I64, 0), width, "ocol", col)

    _loop(b, fn, ir.Constant(I64, 0), n, "orow", row)


# ----------------------------------------------------------------------------- Python side --
class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p),
                ("ml_flags", ctypes.c_int), ("ml_doc", ctypes.c_char_p)]


_api = ctypes.pythonapi
_lock = threading.Lock()


def _addr(fn: Any) -> int:
    return ctypes.cast(fn, ctypes.c_void_p).value or 0


def _array_api() -> Any:
    get = _api.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    from numpy._core import _multiarray_umath

    table = get(_multiarray_umath._ARRAY_API, None)
    return (ctypes.c_void_p * 100).from_address(table)


def _layout_ok() -> bool:
    """The offsets the entry reads, checked on live objects: tuple items, ndarray fields, and
    NumPy's C API table (PyArray_Type at 2, PyArray_New at 93, called once here)."""
    try:
        if sys.implementation.name != "cpython":
            return False
        a = np.zeros((3, 5), np.float32)[:, 1:]
        word = lambda obj, off, t=ctypes.c_int64: t.from_address(id(obj) + off).value  # noqa: E731
        t = (a, 1)
        if word(t, TUPLE_ITEM0) != id(a) or word(a, OB_TYPE) != id(np.ndarray):
            return False
        if word(a, ARR_DATA) != a.ctypes.data or word(a, ARR_ND, ctypes.c_int32) != 2:
            return False
        if word(a, ARR_DESCR) != id(a.dtype) or sys.byteorder != "little":
            return False
        for dt in (np.dtype(np.float32), np.dtype(np.float64), np.dtype(">f8"),
                   pickle.loads(pickle.dumps(np.dtype(np.float32)))):
            if (word(dt, DESCR_TYPE_NUM, ctypes.c_int32) != dt.num
                    or chr(word(dt, DESCR_BYTEORDER, ctypes.c_uint8)) != dt.byteorder):
                return False
        dims = (ctypes.c_int64 * 2).from_address(word(a, ARR_DIMS))
        strides = (ctypes.c_int64 * 2).from_address(word(a, ARR_STRIDES))
        if tuple(dims) != a.shape or tuple(strides) != a.strides:
            return False
        table = _array_api()
        if table[2] != id(np.ndarray):
            return False
        new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                               ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                               ctypes.c_int, ctypes.c_void_p)(table[93])
        shape = (ctypes.c_int64 * 2)(2, 3)
        made = new(id(np.ndarray), 2, ctypes.addressof(shape), np.dtype(np.float32).num,
                   None, None, 0, 0, None)
        return (type(made) is np.ndarray and made.shape == (2, 3) and made.dtype == np.float32
                and made.flags.c_contiguous and made.flags.owndata)
    except Exception:  # noqa: BLE001  (any surprise: no entry, the Python path stays)
        return False


_state: dict[str, Any] = {}


def _entry_address() -> int | None:
    with _lock:
        if "addr" not in _state:
            ok = _layout_ok()
            _state["addr"] = jit.kernel_address(_EntrySource())[0] if ok else None
        return _state["addr"]


def build_with_kernels() -> None:
    """Inside ``jit.together``: compile the entry's object (model-independent, cached on disk
    like a kernel) along with the block's kernels, in their processes, rather than alone
    after them when the first method is planned (0.15-0.25 s of a cold compile)."""
    if "addr" not in _state:
        jit.defer([_EntrySource()], lambda: None)


def make_entry(name: str, doc: str, fallback: Any, *, n_features: int, max_rows: int,
               width: int, out_stride: int, out_dtype: np.dtype, finite_only: bool,
               kernels: dict[np.dtype, tuple[int, bool, np.ndarray]], slots: dict[str, int],
               keep: Any = None, bound: float = math.inf) -> Any:
    """A builtin ``name(X)`` that runs the kernels for inputs it can check, else
    ``fallback(X)``. ``kernels``: input dtype (float32, float64) -> (kernel address, whether
    it compares in float32, its argument block template as an int64 array); ``slots``: which
    argument words take the input pointer, its row stride, the row count and the output
    pointer (``x``, ``stride``, ``re``, ``out``). ``keep``: objects the addresses point into.
    ``bound``: with ``finite_only``, inputs holding a magnitude above it also go to
    ``fallback`` (a guarded model's bound, runtime/guards.py).
    None when this interpreter's layout is not the one checked for, or out of range."""
    out_dtype = np.dtype(out_dtype)
    if (out_dtype not in OUT_CODES or set(kernels) != {np.dtype(np.float32),
                                                       np.dtype(np.float64)}
            or max_rows < 1 or n_features < 1 or width < 1 or out_stride < width
            or out_stride > OUT_CAP):
        return None
    addr = _entry_address()
    if addr is None:
        return None
    f32, f64 = kernels[np.dtype(np.float32)], kernels[np.dtype(np.float64)]
    values = {
        "n_features": n_features, "max_rows": max_rows, "width": width,
        "out_stride": out_stride, "out_code": OUT_CODES[out_dtype],
        "out_typenum": out_dtype.num, "finite_only": int(finite_only),
        "fallback": id(fallback), "array_type": id(np.ndarray), "array_new": _array_api()[93],
        "save_thread": _addr(_api.PyEval_SaveThread),
        "restore_thread": _addr(_api.PyEval_RestoreThread),
        "call_one": _addr(_api.PyObject_CallOneArg),
        "vectorcall": _addr(_api.PyObject_Vectorcall),
        "cmp32_f32": int(f32[1]), "cmp32_f64": int(f64[1]), "fn_f32": f32[0], "fn_f64": f64[0],
        "args_f32": f32[2].ctypes.data, "args_f64": f64[2].ctypes.data,
        "n_args": len(f32[2]), "arg_x": slots["x"], "arg_stride": slots["stride"],
        "arg_re": slots["re"], "arg_out": slots["out"],
        "bound": int(np.float64(bound).view(np.int64)),
    }
    if len(f32[2]) != len(f64[2]) or len(f32[2]) > 16:
        return None
    ctx = np.array([values[k] for k in CTX], np.int64)
    text_sig = f"{name}(X)\n--\n\n{inspect.cleandoc(doc or '')}"
    mdef = _MethodDef(name.encode(), addr, METH_FASTCALL_KEYWORDS, text_sig.encode())
    # self: the context first (the entry reads item 0), then whatever must outlive the calls
    self = (ctx, fallback, mdef, f32[2], f64[2], keep)
    new = _api.PyCFunction_NewEx
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.py_object,
                                                   ctypes.c_void_p]
    return new(ctypes.addressof(mdef), self, None)


__all__ = ["make_entry"]
