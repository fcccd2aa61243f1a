"""XGBoost's float32 output transforms (``common::Sigmoid``, ``common::Softmax``), computed as
its CPU predictor computes them: float32 arithmetic around the C library's ``expf``.

Why libm: glibc's ``expf`` is not the float64 ``exp`` rounded (321 of 500,000 float32
arguments differ by an ulp, measured on AMD EPYC (Zen 4)), nor NumPy's float32 ``exp`` (its own
SIMD code, up to 2 ulp away). XGBoost calls ``expf`` one value at a time, so calling the same
function of the same C library gives its bits: an XGBClassifier's ``predict_proba`` on 20,000
rows matched to the bit, where the float64 sigmoid rounded once was an ulp off on 45% of them.
The native backend's epilogue calls the same symbol (``llvm.exp.f32`` lowers to ``expf``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

import numpy as np

F32 = np.float32
EXP_CLAMP = F32(88.7)  # std::min(-x, 88.7f): no overflow in expf
EPS = F32(1e-16)  # kEps: "avoid 0 div", a float32 addend


@functools.cache
def _expf():
    name = ctypes.util.find_library("m") or "libm.so.6"
    fn = ctypes.CDLL(name).expf
    fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    return np.frompyfunc(lambda v: fn(v), 1, 1)


def expf(x: np.ndarray) -> np.ndarray:
    """The C library's expf of every float32 value of ``x`` (one call each, as XGBoost)."""
    x = np.asarray(x, dtype=F32)
    return _expf()(x).astype(F32).reshape(x.shape)


def sigmoid32(x: np.ndarray) -> np.ndarray:
    """common::Sigmoid(float): 1 / (expf(min(-x, 88.7)) + 1 + 1e-16), every step in float32
    (NaN stays NaN: std::min keeps a NaN first argument)."""
    x = np.asarray(x, dtype=F32)
    t = np.where(EXP_CLAMP < -x, EXP_CLAMP, -x).astype(F32)
    den = (expf(t) + F32(1.0)) + EPS
    return (F32(1.0) / den).astype(F32)


def softmax32(x: np.ndarray) -> np.ndarray:
    """common::Softmax over each row: fmaxf maximum, expf(x - max) in float32, the sum in
    float64 in column order, each value divided by the sum rounded to float32."""
    x = np.asarray(x, dtype=F32)
    top = x[:, :1].copy()
    for j in range(1, x.shape[1]):  # fmaxf: a NaN argument loses to a number
        top = np.where(np.isnan(top) | (x[:, j:j + 1] > top), x[:, j:j + 1], top)
    e = expf((x - top).astype(F32))
    total = np.zeros((x.shape[0], 1))
    for j in range(x.shape[1]):
        total = total + e[:, j:j + 1].astype(np.float64)
    return (e / total.astype(F32)).astype(F32)
