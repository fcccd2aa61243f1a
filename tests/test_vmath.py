"""The fused kernels' own vector exp (kernels/vmath.py) against libm's, ulp by ulp."""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass

import numpy as np
import pytest

pytest.importorskip("llvmlite")

from llvmlite import ir  # noqa: E402

from peregrine.kernels import jit, vmath  # noqa: E402
from peregrine.kernels.irutil import F64, I64, PTR, gep  # noqa: E402


@dataclass(frozen=True)
class _ExpSpec:
    """exp over n doubles, ``lanes`` at a time (n a multiple of lanes)."""

    lanes: int

    @property
    def key(self) -> str:
        return f"test_vexp_{self.lanes}"

    @property
    def symbol(self) -> str:
        return self.key

    def build_ir(self, triple: str = "") -> ir.Module:
        m = ir.Module(name=self.symbol)
        m.triple = triple
        fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64]), name=self.symbol)
        x, y, n = fn.args
        entry, body, end = (fn.append_basic_block(s) for s in ("entry", "body", "end"))
        b = ir.IRBuilder(entry)
        b.cbranch(b.icmp_signed(">", n, ir.Constant(I64, 0)), body, end)
        b.position_at_end(body)
        i = b.phi(I64)
        i.add_incoming(ir.Constant(I64, 0), entry)
        vt = ir.VectorType(F64, self.lanes)
        v = b.load(gep(b, x, [i], source_etype=F64), typ=vt, align=8)
        b.store(vmath.exp(m, b, v), gep(b, y, [i], source_etype=F64), align=8)
        nxt = b.add(i, ir.Constant(I64, self.lanes))
        i.add_incoming(nxt, body)
        b.cbranch(b.icmp_signed("<", nxt, n), body, end)
        b.position_at_end(end)
        b.ret_void()
        return m


def _vexp(values: np.ndarray, lanes: int) -> np.ndarray:
    address, _ = jit.kernel_address(_ExpSpec(lanes), use_disk=False)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(address)
    pad = -len(values) % lanes
    x = np.ascontiguousarray(np.concatenate([values, np.zeros(pad)]), dtype=np.float64)
    y = np.empty_like(x)
    fn(x.ctypes.data, y.ctypes.data, x.size)
    return y[: len(values)]


def _libm_exp(t: float) -> float:
    try:
        return math.exp(t)
    except OverflowError:
        return math.inf


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return np.abs(got - want) / np.spacing(np.abs(want)).clip(np.finfo(np.float64).smallest_subnormal)


@pytest.mark.parametrize("lanes", [1, 4, 8])
@pytest.mark.parametrize("lo, hi", [(-745.2, 709.78), (-40.0, 0.0), (-1.0, 1.0), (-1e-9, 1e-9),
                                    (-745.2, -700.0), (700.0, 709.78)])
def test_exp_within_one_ulp_of_libm(lanes, lo, hi):
    x = np.random.default_rng(int(abs(lo)) + lanes).uniform(lo, hi, 20_000)
    want = np.array([_libm_exp(t) for t in x])
    assert _ulps(_vexp(x, lanes), want).max() <= 1.0


def test_exp_special_values():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 709.78, 709.79, 710.0, 1e300, -745.13,
                  -745.14, -746.0, -1e300, 1e-300, -1e-300, 1.0, -708.4, 0.5 * math.log(2),
                  -0.5 * math.log(2), 88.0, -88.0])
    got = _vexp(x, 4)
    with np.errstate(over="ignore"):
        want = np.array([t if math.isnan(t) else _libm_exp(t) for t in x])
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(np.isinf(got[ok]), np.isinf(want[ok]))
    assert np.array_equal(got[ok] == 0, want[ok] == 0)
    assert _ulps(got[ok & np.isfinite(want)], want[ok & np.isfinite(want)]).max() <= 1.0
    assert got[0] == 1.0 and got[1] == 1.0  # exp(±0) is exactly 1


def test_exp_near_every_power_of_two():
    # arguments near k ln2 for every k: each scale factor 2**k, subnormal results included
    x = np.arange(-1074, 1024) * math.log(2)
    want = np.array([_libm_exp(t) for t in x])
    assert _ulps(_vexp(x, 8), want).max() <= 1.0
