"""The tvm backend's column featurizers (backends/tvm/ops_columns.py): one-hot (float
categories, infrequent and unknown slots, drop, a NaN category), category codes (OrdinalEncoder,
HistGradientBoosting's own categories), polynomial terms, bins, range checks and ufuncs, each
compared with scikit-learn and, for the exact ops, bit for bit with the reference backend, on
rows with NaN, +-inf, unseen values and exact category values, float64 and float32; and each
checked to run in the compiled program, not as a NumPy fallback."""

from __future__ import annotations

import numpy as np
import pytest

import peregrine
from tests import interp_cases

pytest.importorskip("tvm")

from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import (  # noqa: E402
    FunctionTransformer,
    KBinsDiscretizer,
    OneHotEncoder,
    OrdinalEncoder,
    PolynomialFeatures,
    PowerTransformer,
)

from tests.tvm_cache import fresh_library_cache  # noqa: E402,F401 (autouse)


def _fallbacks(compiled) -> set:
    return set(compiled.explain_dict()["backend_choices"].get("fallback_ops", []))


def _check(model, X, methods, *, exact=True, dtypes=(np.float64, np.float32), lowered=()):
    """TVM against scikit-learn (rtol 1e-5 / atol 1e-6, labels equal) and, where ``exact``,
    bit for bit against the reference backend; ``lowered`` ops must not fall back."""
    tvm_model = peregrine.compile(model, "tvm")
    ref = peregrine.compile(model, "reference")
    assert set(lowered) <= {n.op.name for n in tvm_model.spec.graph.nodes}  # exercised
    assert not _fallbacks(tvm_model) & set(lowered), _fallbacks(tvm_model)
    for dt in dtypes:
        Xd = X.astype(dt)
        for method in methods:
            got = getattr(tvm_model, method)(Xd)
            want = getattr(model, method)(Xd)
            if method == "predict":
                np.testing.assert_array_equal(got, want, err_msg=f"{method} {dt}")
            else:
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6,
                                           err_msg=f"{method} {dt}")
            if exact:
                np.testing.assert_array_equal(got, getattr(ref, method)(Xd),
                                              err_msg=f"{method} {dt} vs reference")
        one = tvm_model.transform(Xd[:1]) if "transform" in methods else None
        if one is not None:
            np.testing.assert_array_equal(one, tvm_model.transform(Xd)[:1])


def _codes_rows(rng, n, values):
    """Rows of fitted values, unseen values, NaN, -0.0, fractions and huge values (the
    encoders reject infinity, as the compiled model does)."""
    X = rng.choice(values, size=(n, 3))
    extra = np.array([[np.nan, 7.5, -0.0], [3e38, -3e38, 1e6], [0.25, np.nan, 3.0],
                      [-0.0, 1.25, np.nan], [2.0000000000000004, 0.5, 1e30]])
    return np.vstack([X, extra])


@pytest.mark.parametrize("kind", ["ignore", "infrequent", "drop-first", "nan-category"])
def test_one_hot_float_categories(kind):
    """Categories that are not small integers (no weight-row table: the comparisons), into a
    forest (so no linear model absorbs them) and alone (``transform``)."""
    rng = np.random.default_rng(0)
    values = np.array([0.25, 1.25, 2.0, 1e6, -3.5, 0.0])
    X = rng.choice(values, size=(400, 3))
    if kind == "nan-category":
        X[rng.random(400) < 0.1, 1] = np.nan
    y = (np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) > 1.5).astype(int)
    enc = {
        "ignore": OneHotEncoder(handle_unknown="ignore", sparse_output=False),
        "infrequent": OneHotEncoder(handle_unknown="infrequent_if_exist", min_frequency=60,
                                    sparse_output=False),
        "drop-first": OneHotEncoder(drop="first", handle_unknown="ignore",
                                    sparse_output=False),
        "nan-category": OneHotEncoder(handle_unknown="ignore", sparse_output=False),
    }[kind]
    rows = _codes_rows(rng, 200, values)
    if kind == "infrequent":  # which columns have infrequent slots
        enc.fit(X)
        assert enc.infrequent_categories_ is not None
    _check(enc.fit(X), rows, ["transform"], lowered={"ONE_HOT"})
    forest = make_pipeline(enc, RandomForestClassifier(n_estimators=8, max_depth=5,
                                                       random_state=0)).fit(X, y)
    _check(forest, rows, ["predict_proba", "predict"], lowered={"ONE_HOT"})


def test_ordinal_encoder_codes():
    """OrdinalEncoder with unknown and missing values coded as numbers (CATEGORY_MAP), into a
    forest; and HistGradientBoosting's own categorical codes (ORDINAL_ENCODE)."""
    rng = np.random.default_rng(1)
    values = np.array([0.25, 1.25, 2.0, 1e6, -3.5, 0.0])
    X = rng.choice(values, size=(400, 3))
    X[rng.random(400) < 0.1, 0] = np.nan
    y = (np.nan_to_num(X[:, 0]) > 0.5).astype(int)
    enc = OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1,
                         encoded_missing_value=-2)
    rows = _codes_rows(rng, 200, values)
    _check(enc.fit(X), rows, ["transform"], lowered={"CATEGORY_MAP"})
    model = make_pipeline(enc, RandomForestClassifier(n_estimators=8, random_state=0)).fit(X, y)
    _check(model, rows, ["predict_proba", "predict"], lowered={"CATEGORY_MAP"})

    Xc = rng.choice(np.array([0.0, 1.0, 2.0, 3.0, 5.0]), size=(500, 2))
    Xc = np.column_stack([Xc, rng.normal(size=500)])
    yc = (Xc[:, 0] + Xc[:, 2] > 1.5).astype(int)
    hgb = HistGradientBoostingClassifier(categorical_features=[0, 1], max_iter=10,
                                         random_state=0).fit(Xc, yc)
    rows_c = np.vstack([Xc[:50], [[4.0, np.nan, 0.1], [1e30, -1.0, np.nan],
                                  [2.5, 1.0, -1e30], [-0.0, 3.0, 0.0]]])
    _check(hgb, rows_c, ["predict_proba", "predict"], lowered={"ORDINAL_ENCODE"})


@pytest.mark.parametrize("params", [dict(degree=3), dict(degree=2, interaction_only=True),
                                    dict(degree=(2, 3), include_bias=False)])
def test_polynomial_terms(params):
    """The rule's products in its order: bit-equal to the reference (and float32 products on
    float32 rows, as scikit-learn's), overflow to +-inf included (PolynomialFeatures rejects
    NaN and infinite inputs)."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(300, 4)) * 3
    X[5, 2], X[6, 3] = 1e30, -1e20
    poly = PolynomialFeatures(**params).fit(X)
    _check(poly, X, ["transform"], lowered={"POLYNOMIAL"})


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_bins(strategy):
    """KBinsDiscretizer (DIGITIZE, then ONE_HOT for the one-hot codes): bin edges themselves,
    their neighbours, values far outside (it rejects NaN and infinity)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 3))
    y = (X[:, 0] > 0).astype(int)
    kb = KBinsDiscretizer(n_bins=5, encode="ordinal", strategy=strategy,
                          quantile_method="averaged_inverted_cdf").fit(X)
    edges = np.concatenate([e for e in kb.bin_edges_])
    rows = np.vstack([X[:100], np.column_stack([edges, np.nextafter(edges, np.inf),
                                                np.nextafter(edges, -np.inf)])[:, :3],
                      [[3e38, -3e38, 0.0]]])
    _check(kb, rows, ["transform"], lowered={"DIGITIZE"})
    hot = make_pipeline(KBinsDiscretizer(n_bins=4, encode="onehot-dense", strategy=strategy,
                                         quantile_method="averaged_inverted_cdf"),
                        RandomForestClassifier(n_estimators=5, random_state=0)).fit(X, y)
    _check(hot, rows, ["predict_proba", "predict"], lowered={"DIGITIZE", "ONE_HOT"})


def test_range_check_rejects_like_the_source():
    """Box-Cox's input check (RANGE_CHECK) runs in the program: a non-positive value raises as
    scikit-learn does; positive rows are answered."""
    rng = np.random.default_rng(4)
    X = np.exp(rng.normal(size=(200, 2)))
    pt = PowerTransformer(method="box-cox").fit(X)
    compiled = peregrine.compile(pt, "tvm")
    assert "RANGE_CHECK" not in _fallbacks(compiled)
    np.testing.assert_allclose(compiled.transform(X), pt.transform(X), rtol=1e-5, atol=1e-6)
    bad = X.copy()
    bad[3, 1] = -1.0
    with pytest.raises(ValueError):
        pt.transform(bad)
    with pytest.raises(ValueError):
        compiled.transform(bad)


LOWERED = ["sqrt", "absolute", "square", "negative", "reciprocal", "sign", "floor", "ceil",
           "rint", "trunc", "log"]


@pytest.mark.parametrize("name", LOWERED)
def test_ufuncs(name):
    """The lowered ufuncs: exact or correctly rounded, so the reference's bits (float32 rows:
    one rounding of the float64 result); log within scikit-learn's tolerance (the C
    library's, an ulp from NumPy's on a few values)."""
    rng = np.random.default_rng(5)
    X = np.column_stack([rng.normal(size=300) * 4, rng.uniform(0, 50, 300)])
    X = np.vstack([X, [[np.nan, 0.0], [np.inf, -0.0], [-np.inf, 2.5], [0.5, -1.5],
                       [-2.5, 1e-300]]])
    ft = FunctionTransformer(getattr(np, name)).fit(X)
    with np.errstate(all="ignore"):
        _check(ft, X, ["transform"], exact=name != "log", lowered={"UFUNC"})


@pytest.mark.parametrize("name", ["exp", "log1p", "tanh"])
def test_rule_ufuncs_run_their_rule(name):
    """The transcendental ufuncs (RULE_UFUNCS) run NumPy's rule: named in explain() and the
    reference's bits."""
    rng = np.random.default_rng(6)
    X = np.vstack([rng.uniform(0, 5, (100, 2)), [[1e-300, 0.0], [np.nan, np.inf]]])
    ft = FunctionTransformer(getattr(np, name)).fit(X)
    compiled = peregrine.compile(ft, "tvm")
    assert "UFUNC" in _fallbacks(compiled)
    _check(ft, X, ["transform"])


def test_one_hot_and_ufunc_in_one_column_transformer():
    """A ColumnTransformer mixing one-hot codes with float categories, a lowered ufunc and a
    scaled block, into a forest: no fallback left (predict_log_proba's log is lowered)."""
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(7)
    X = np.column_stack([rng.choice([0.5, 1.5, 9.25], 300), rng.uniform(0.1, 5, (300, 2))])
    y = (X[:, 0] + X[:, 1] > 3).astype(int)
    ct = ColumnTransformer([("cat", OneHotEncoder(handle_unknown="ignore"), [0]),
                            ("num", make_pipeline(FunctionTransformer(np.sqrt),
                                                  StandardScaler()), [1, 2])])
    model = make_pipeline(ct, RandomForestClassifier(n_estimators=6, random_state=0)).fit(X, y)
    compiled = peregrine.compile(model, "tvm")
    assert not _fallbacks(compiled)
    assert "sqrt" in [n.attrs.name for n in compiled.spec.graph.nodes if n.op.name == "UFUNC"]
    rows = np.vstack([X[:50], [[0.7, 1.0, 2.0], [np.nan, 1.0, 1.0], [9.25, 4.0, 0.2]]])
    _check(model, rows, ["predict_proba", "predict"])


INTERP_TABLES = interp_cases.TABLES + [
    (list(np.linspace(-4, 4, 1000)), list(np.tanh(np.linspace(-4, 4, 1000)))),  # long
]


def _lowered_program(lower, node, widths):
    """One op's lowering alone, built into a Relax VM: float64 inputs of ``widths`` columns
    -> the op's value."""
    import tvm
    from tvm import relax

    from peregrine.backends.tvm import build
    from peregrine.backends.tvm.ops import Context

    bb = relax.BlockBuilder()
    rows = tvm.tirx.Var("n", "int64")
    xs = [relax.Var(f"x{i}", relax.TensorType((rows, w), "float64"))
          for i, w in enumerate(widths)]
    with bb.function("main", xs):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(lower(
                Context(bb, peregrine.CompileOptions(), rows), node, xs)))
        bb.emit_func_output(out)
    target = build.host_target()
    ex = tvm.compile(bb.get(), target, relax_pipeline=build.build_pipeline(target))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return lambda *X: vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(x))
                                   for x in X]).numpy()


def _interp_program(tables, left, right):
    from types import SimpleNamespace

    from peregrine.backends.tvm.ops_columns import lower_interp

    node = SimpleNamespace(attrs=SimpleNamespace(
        xp=[np.asarray(t[0]) for t in tables], fp=[np.asarray(t[1]) for t in tables],
        left=np.asarray(left), right=np.asarray(right)), width=len(tables), name="interp")
    return _lowered_program(lower_interp, node, [len(tables)])


def test_interp_bit_equal_to_numpy():
    """np.interp's C loop, bit for bit: repeated and one-point tables, flat segments, x at
    every entry, its neighbours, outside, +-inf, -0.0 and NaN, NaN left/right values."""
    rng = np.random.default_rng(8)
    left = [-7.0, np.nan, -1.0, 0.5, 11.0, -2.0]
    right = [9.0, 8.0, np.inf, -0.5, 12.0, 2.0]
    X = interp_cases.rows(INTERP_TABLES, rng, 3000, [0.0, 0.0, 0.25, 1e-300, 0.0, 0.0])
    got = _interp_program(INTERP_TABLES, left, right)(X)
    interp_cases.assert_numpys(got, X, INTERP_TABLES, left, right)


@pytest.mark.parametrize("k", [2, 3])
def test_isotonic_calibration(k):
    """CalibratedClassifierCV(method="isotonic") runs INTERP in the program: scikit-learn's
    probabilities and labels (not the reference's bits: the logistic regressions' products
    sum in another order than NumPy's BLAS, kernels.dense_kernel)."""
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(9)
    X = rng.normal(size=(600, 4))
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int) + (k == 3) * (X[:, 2] > 0.8)
    model = CalibratedClassifierCV(LogisticRegression(), method="isotonic", cv=3).fit(X, y)
    _check(model, np.vstack([X, rng.normal(size=(200, 4)) * 5]), ["predict_proba", "predict"],
           exact=False, lowered={"INTERP"})


@pytest.mark.parametrize("k", [3, 5])
def test_ovr_decision_votes(k):
    """OVR_DECISION alone: votes plus the confidences' sums in the rule's order, the rule's
    bits (ties, zero and signed confidences); and SVC's one-vs-rest decision through it
    against scikit-learn."""
    from types import SimpleNamespace

    from sklearn.svm import SVC

    from peregrine.backends.tvm.ops_votes import lower_ovr_decision
    from peregrine.ir.semantics.kernels import OvrDecision

    rng = np.random.default_rng(10)
    pairs = k * (k - 1) // 2
    pred = rng.integers(0, 2, (500, pairs)).astype(np.float64)
    conf = rng.normal(size=(500, pairs)) * rng.choice([1e-3, 1.0, 1e3], (500, pairs))
    conf[::7] = 0.0
    conf[::11] = -0.0
    attrs = OvrDecision(n_classes=k)
    node = SimpleNamespace(attrs=attrs, width=k, name="ovr")
    got = _lowered_program(lower_ovr_decision, node, [pairs, pairs])(pred, conf)
    want = attrs.rule(node, [pred, conf], peregrine.CompileOptions())
    np.testing.assert_array_equal(got, want)

    X = rng.normal(size=(400, 4))
    y = np.digitize(X[:, 0] + 0.3 * X[:, 1], np.quantile(X[:, 0], np.linspace(0, 1, k + 1)[1:-1]))
    model = SVC(kernel="rbf", gamma=0.5).fit(X, y)
    _check(model, np.vstack([X[:200], rng.normal(size=(100, 4)) * 3]),
           ["decision_function", "predict"], exact=False, lowered={"OVR_DECISION"})


@pytest.mark.parametrize("output", ["uniform", "normal"])
def test_quantile_transformer(output):
    """QuantileTransformer: the uniform output in the program, bit-equal to scikit-learn
    (both lookups through the interpolation kernel, the bounds as the rule sets them) on
    the quantiles themselves, their neighbours, values outside and NaN; the normal output
    runs its rule (scipy's ndtri)."""
    from sklearn.preprocessing import QuantileTransformer

    rng = np.random.default_rng(11)
    X = np.column_stack([rng.normal(size=500), rng.exponential(size=500),
                         rng.integers(0, 5, 500).astype(float)])  # repeated quantiles
    qt = QuantileTransformer(n_quantiles=50, output_distribution=output).fit(X)
    q = qt.quantiles_
    rows = np.vstack([X[:100], q, np.nextafter(q, np.inf), np.nextafter(q, -np.inf),
                      [[np.nan, 1e30, -1e30], [-0.0, 0.0, np.nan]]])
    compiled = peregrine.compile(qt, "tvm")
    assert ("QUANTILE" in _fallbacks(compiled)) == (output == "normal")
    with np.errstate(invalid="ignore"):
        for dt in (np.float64, np.float32):
            Xd = rows.astype(dt)
            got, want = compiled.transform(Xd), qt.transform(Xd)
            if output == "uniform":
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
