"""The fused kernels' own vector exp and log (kernels/vmath.py) against libm's, ulp by ulp."""

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
from peregrine.kernels.vmath import LOG1P_HIGH, LOG1P_LOW  # noqa: E402


@dataclass(frozen=True)
class _ExpSpec:
    """exp (or ``fn``) over n doubles, ``lanes`` at a time (n a multiple of lanes)."""

    lanes: int
    fn: str = "exp"

    @property
    def key(self) -> str:
        return f"test_v{self.fn}_{self.lanes}"

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
        b.store(getattr(vmath, self.fn)(m, b, v), gep(b, y, [i], source_etype=F64), align=8)
        nxt = b.add(i, ir.Constant(I64, self.lanes))
        i.add_incoming(nxt, body)
        b.cbranch(b.icmp_signed("<", nxt, n), body, end)
        b.position_at_end(end)
        b.ret_void()
        return m


def _vexp(values: np.ndarray, lanes: int, fn: str = "exp") -> np.ndarray:
    address, _ = jit.kernel_address(_ExpSpec(lanes, fn), use_disk=False)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(address)
    pad = -len(values) % lanes
    x = np.ascontiguousarray(np.concatenate([values, np.ones(pad)]), dtype=np.float64)
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


def _libm_log(t: float) -> float:
    if math.isnan(t) or t < 0:
        return math.nan
    return -math.inf if t == 0 else math.log(t)


@pytest.mark.parametrize("lanes", [1, 4, 8])
@pytest.mark.parametrize("lo, hi", [(1e-300, 1e300), (0.5, 2.0), (1 - 1e-6, 1 + 1e-6),
                                    (0.7, 1.42), (1e-320, 1e-305), (1.0, 1e6)])
def test_log_within_one_ulp_of_libm(lanes, lo, hi):
    rng = np.random.default_rng(lanes + int(-math.log10(lo)))
    # uniform in the exponent where the range is wide, in the value where it is narrow
    x = (np.exp(rng.uniform(math.log(lo), math.log(hi), 20_000)) if hi / lo > 10
         else rng.uniform(lo, hi, 20_000))
    want = np.array([_libm_log(t) for t in x])
    got = _vexp(x, lanes, "log")
    assert _ulps(got, want).max() <= 1.0
    # the value the row kernels replaced (np.log's): within 1 ulp of it as well
    assert _ulps(got, np.log(x)).max() <= 1.0


def test_log_special_values_and_powers_of_two():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, -1e-300, 1.0, 2.0, 0.5,
                  5e-324, 2.2250738585072014e-308, 2.225073858507201e-308, 1.7976931348623157e308,
                  math.sqrt(2), math.sqrt(2) / 2, 1 + 2**-52, 1 - 2**-53])
    got = _vexp(x, 4, "log")
    want = np.array([_libm_log(t) for t in x])
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok], want[ok]) or _ulps(got[ok & np.isfinite(want)],
                                                      want[ok & np.isfinite(want)]).max() <= 1.0
    assert np.array_equal(np.isinf(got[ok]), np.isinf(want[ok]))
    assert got[7] == 0.0 and not np.signbit(got[7])  # log(1) is +0
    p = 2.0 ** np.arange(-1074, 1024)
    assert _ulps(_vexp(p, 8, "log"), np.array([_libm_log(t) for t in p])).max() <= 1.0


def _libm_log1p(t: float) -> float:
    if math.isnan(t) or t < -1:
        return math.nan
    return -math.inf if t == -1 else math.log1p(t)


@pytest.mark.parametrize("lanes", [1, 8])
@pytest.mark.parametrize("lo, hi", [(-0.9999999, -0.29), (-0.3, 0.42), (0.4, 3.0),
                                    (-1e-6, 1e-6), (1.0, 1e300), (1e-320, 1e-10)])
def test_log1p_within_one_ulp_of_libm(lanes, lo, hi):
    rng = np.random.default_rng(lanes + 7)
    x = (np.exp(rng.uniform(math.log(lo), math.log(hi), 20_000)) if lo > 0 and hi / lo > 10
         else rng.uniform(lo, hi, 20_000))
    want = np.array([_libm_log1p(t) for t in x])
    got = _vexp(x, lanes, "log1p")
    assert _ulps(got, want).max() <= 1.0
    assert _ulps(got, np.log1p(x)).max() <= 1.0


def test_log1p_special_values():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, -1.5, -1 + 2**-53, 2**53, 2**53 - 1,
                  1e308, 5e-324, -5e-324, LOG1P_HIGH, np.nextafter(LOG1P_HIGH, 1), LOG1P_LOW,
                  np.nextafter(LOG1P_LOW, -1), 1.0, -0.5])
    got = _vexp(x, 4, "log1p")
    want = np.array([_libm_log1p(t) for t in x])
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(np.isinf(got[ok]), np.isinf(want[ok]))
    fin = ok & np.isfinite(want)
    assert _ulps(got[fin], want[fin]).max() <= 1.0
    assert np.array_equal(np.signbit(got[:2]), [False, True])  # log1p(±0) = ±0
