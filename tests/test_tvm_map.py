"""The tvm backend's column transforms as scheduled row kernels (backends/tvm/ops.py
``column_map``, kernels.map_kernel): AFFINE, CENTER_SCALE, CLIP, BINARIZE and IMPUTE, bit for
bit and dtype for dtype against the reference backend's rules (float64 and float32 inputs,
every float32 mode, scalar and per-column parameters), on values with NaN, +-inf, -0.0,
subnormals and magnitudes from 1e-300 to 1e300, at row counts around the kernel's tasks of 64
rows; AFFINE's product rounds before its sum (no fused multiply-add) on every CPU level; and
the scikit-learn scalers, imputer and binarizer against scikit-learn itself."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

pytest.importorskip("tvm")

from sklearn.impute import SimpleImputer  # noqa: E402
from sklearn.preprocessing import (  # noqa: E402
    Binarizer,
    MaxAbsScaler,
    MinMaxScaler,
    RobustScaler,
    StandardScaler,
)

import peregrine  # noqa: E402
from peregrine.ir import Op  # noqa: E402
from tests.one_op import one_op_model  # noqa: E402
from tests.tvm_cache import fresh_library_cache  # noqa: E402,F401 (autouse)

WIDTH = 7
ROW_COUNTS = (1, 63, 64, 65, 300)  # one row, a task of 64 rows and its neighbours, several tasks


def _model(op: Op, backend: str, **attrs):
    return one_op_model(op, WIDTH, WIDTH, backend, **attrs)


def _values(rng, n: int) -> np.ndarray:
    """Magnitudes from 1e-300 to 1e300 of both signs, zeros of both signs, subnormals, +-inf
    and NaN."""
    X = rng.normal(size=(n, WIDTH)) * 10.0 ** rng.integers(-300, 300, size=(n, WIDTH))
    X[rng.random((n, WIDTH)) < 0.2] = rng.normal(size=1)[0] * 3.0  # ordinary values
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -1e-310, 1e-40, 1.0])
    X.flat[rng.choice(X.size, size=min(X.size, 40), replace=False)] = rng.choice(specials, 40)
    return X


def _bits_equal(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, rule {want.dtype}"
    itype = {4: np.int32, 8: np.int64}[want.dtype.itemsize]
    both_nan = np.isnan(got) & np.isnan(want)
    differ = (got.view(itype) != want.view(itype)) & ~both_nan
    assert not differ.any(), (f"{what}: {differ.sum()} of {differ.size} values differ, "
                              f"first at {np.argwhere(differ)[0]}: {got[differ][:3]} vs "
                              f"{want[differ][:3]}")


def _check(op: Op, attrs: dict, seed: int) -> None:
    tvm_model = _model(op, "tvm", **attrs)
    ref = _model(op, "reference", **attrs)
    choices = tvm_model.explain_dict()["backend_choices"]
    assert op.name not in choices.get("fallback_ops", []), choices
    rng = np.random.default_rng(seed)
    for n in ROW_COUNTS:
        X = _values(rng, n)
        for dt in (np.float64, np.float32):
            with np.errstate(all="ignore"):
                Xd = X.astype(dt)
                want = ref.transform(Xd)
            _bits_equal(tvm_model.transform(Xd), want, f"{op.name} {attrs} {n} rows {dt}")


def _per_column(rng, scale: float) -> np.ndarray:
    v = rng.normal(size=WIDTH) * scale
    v[0] = 1.0
    v[1] = 3.0 ** -7  # not a float32 number
    return v


@pytest.mark.parametrize("float32", ["never", "round", "cast"])
@pytest.mark.parametrize("per_column", [True, False])
def test_affine_bit_equal(float32, per_column):
    rng = np.random.default_rng(1)
    scale = _per_column(rng, 3.1) if per_column else 0.1
    shift = _per_column(rng, 1e3) if per_column else -0.3
    _check(Op.AFFINE, dict(scale=scale, shift=shift, float32=float32), 11)


def test_affine_rounds_the_product_before_the_sum():
    """x * s + c with two roundings: values where one fused rounding differs (about 14% of
    ordinary doubles) come out as NumPy's, on every CPU level (the fence is why)."""
    rng = np.random.default_rng(2)
    s, c = rng.normal(size=WIDTH) * 3.1, rng.normal(size=WIDTH) * 1.7
    X = rng.normal(size=(4000, WIDTH))
    # the fused answer, rounded once from the exact value: the rows tell the two apart
    fused = np.array([[float(Fraction(x) * Fraction(si) + Fraction(ci))
                       for x, si, ci in zip(row, s, c)] for row in X[:100]])
    assert (fused != X[:100] * s + c).mean() > 0.05
    got = _model(Op.AFFINE, "tvm", scale=s, shift=c).transform(X)
    _bits_equal(got, X * s + c, "AFFINE x * s + c")


@pytest.mark.parametrize("float32", ["never", "round", "cast"])
def test_center_scale_bit_equal(float32):
    rng = np.random.default_rng(3)
    center, scale = _per_column(rng, 50.0), _per_column(rng, 7.0)
    scale[2] = 1e-300  # quotients overflow
    _check(Op.CENTER_SCALE, dict(center=center, scale=scale, float32=float32), 13)


@pytest.mark.parametrize("low,high", [(0.0, 1.0), (-0.0, 0.5), (-1.5, -0.0), (2.0, 1.0),
                                      (-np.inf, 1e300)])
@pytest.mark.parametrize("float32", [False, True])
def test_clip_bit_equal(low, high, float32):
    """np.clip's choices at signed zeros (a -0.0 below a 0.0 bound stays -0.0), with low above
    high (high wins), with NaN (stays)."""
    _check(Op.CLIP, dict(low=low, high=high, float32=float32), 17)


@pytest.mark.parametrize("threshold", [0.0, 0.1, -2.5])
@pytest.mark.parametrize("float32", [False, True])
def test_binarize_bit_equal(threshold, float32):
    _check(Op.BINARIZE, dict(threshold=threshold, float32=float32), 19)


@pytest.mark.parametrize("missing", [np.nan, 0.0, 0.1, -np.inf])
@pytest.mark.parametrize("float32", [False, True])
def test_impute_bit_equal(missing, float32):
    rng = np.random.default_rng(5)
    values = _per_column(rng, 10.0)
    _check(Op.IMPUTE, dict(values=values, missing=missing, float32=float32), 23)


@pytest.mark.parametrize("make", [
    lambda: StandardScaler(), lambda: MinMaxScaler(clip=True), lambda: RobustScaler(),
    lambda: MaxAbsScaler(), lambda: SimpleImputer(strategy="median"),
    lambda: Binarizer(threshold=0.2)], ids=["standard", "minmax-clip", "robust", "maxabs",
                                            "imputer", "binarizer"])
def test_sklearn_transformers(make):
    """The transformers against scikit-learn on float64 and float32 rows (NaN where the
    transformer passes it through), bit for bit against the reference backend, one row the
    batch's first row, and none of their ops falling back."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(500, WIDTH)) * rng.uniform(0.1, 100, size=WIDTH)
    model = make().fit(np.where(rng.random(X.shape) < 0.05, np.nan, X)
                       if isinstance(make(), SimpleImputer) else X)
    rows = rng.normal(size=(200, WIDTH)) * 60.0
    if not isinstance(model, Binarizer):
        rows[rng.random(rows.shape) < 0.05] = np.nan
    fast = peregrine.compile(model, "tvm")
    ref = peregrine.compile(model, "reference")
    assert not fast.explain_dict()["backend_choices"].get("fallback_ops"), fast.explain()
    for dt in (np.float64, np.float32):
        Xd = rows.astype(dt)
        got = fast.transform(Xd)
        np.testing.assert_allclose(got, model.transform(Xd), rtol=1e-5, atol=1e-6)
        _bits_equal(got, ref.transform(Xd), f"{type(model).__name__} {dt}")
        _bits_equal(fast.transform(Xd[:1]), got[:1], "one row")
