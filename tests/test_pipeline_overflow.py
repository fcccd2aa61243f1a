"""Values an earlier pipeline step computes and a later step re-validates (runtime/guards.py):
scikit-learn's trees cast their input to float32 and reject what becomes infinity there, linear
models reject NaN and infinity. Where scikit-learn raises, the compiled model raises InputError;
where it answers, the compiled model answers the same, on every backend, passes on and off."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.calibration import CalibratedClassifierCV
from sklearn.compose import ColumnTransformer, TransformedTargetRegressor
from sklearn.ensemble import (
    GradientBoostingClassifier,
    HistGradientBoostingClassifier,
    RandomForestClassifier,
)
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import (
    FunctionTransformer,
    PolynomialFeatures,
    PowerTransformer,
    StandardScaler,
)
from sklearn.svm import LinearSVC
from sklearn.tree import DecisionTreeClassifier

import peregrine
from peregrine import CompileOptions
from peregrine.errors import InputError
from tests.compile_helpers import sklearn_predict_or_none

BACKENDS = ["reference", "torch", "native"]
rng = np.random.default_rng(0)
X = rng.normal(size=(300, 6)) * np.array([1e-3, 1.0, 1e-2, 5.0, 1e-4, 1.0])
y = (X[:, 0] + X[:, 2] * 10 > 0).astype(int)


def _pipelines():
    ct = ColumnTransformer([("s", StandardScaler(), [0, 1, 2, 4]), ("p", "passthrough", [3])])
    return {
        "scaler_forest": make_pipeline(StandardScaler(), RandomForestClassifier(
            8, max_depth=4, random_state=0)),
        "poly_tree": make_pipeline(PolynomialFeatures(2), DecisionTreeClassifier(
            max_depth=3, random_state=0)),
        "ufunc_gb": make_pipeline(FunctionTransformer(np.square),
                                  GradientBoostingClassifier(n_estimators=5, random_state=0)),
        # a shallow tree splits on few columns: the injection pass narrows the
        # ColumnTransformer, scikit-learn still validates every column it outputs
        "ct_tree": make_pipeline(ct, DecisionTreeClassifier(max_depth=1, random_state=0)),
        "scaler_logistic": make_pipeline(StandardScaler(), LogisticRegression()),
        "poly_logistic": make_pipeline(PolynomialFeatures(3), StandardScaler(),
                                       LogisticRegression(max_iter=500)),
        # PowerTransformer's own StandardScaler re-validates the powers (NaN allowed):
        # one that overflowed to infinity raises there; HistGradientBoosting takes anything
        "power_hgb": make_pipeline(StandardScaler(), PowerTransformer(),
                                   HistGradientBoostingClassifier(max_iter=5)),
        # an isotonic calibrator re-validates its member's scores (finite only): a decision
        # value that overflowed raises there, where the sigmoid calibrator answers
        "calibrated_isotonic": CalibratedClassifierCV(LinearSVC(), method="isotonic", cv=3),
    }


PIPES = {k: p.fit(X, y) for k, p in _pipelines().items()}


def _cases():
    big = [1e10, 1e18, 1.8e19, 2e19, 1e30, 1e34, 1e35, 3e36, 1e37, 1e100, 1e200, 1e300, 1.7e308]
    for v in big:
        for col in (0, 2, 3, 4):
            for sign in (1, -1):
                Xt = X[:4].copy()
                Xt[2, col] = sign * v
                yield Xt


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(PIPES))
@pytest.mark.parametrize("passes", [True, False])
def test_raises_where_sklearn_raises(name, backend, passes):
    p = PIPES[name]
    opts = CompileOptions() if passes else CompileOptions(disable_passes=("inject", "pushdown"))
    c = peregrine.compile(p, backend=backend, options=opts)
    np.testing.assert_array_equal(c.predict(X), p.predict(X))
    raised = answered = 0
    for Xt in _cases():
        want = sklearn_predict_or_none(p, Xt)
        for rows in (Xt, Xt[2:3]):  # the batch path and the one-row path
            want_rows = want if rows is Xt or want is None else want[2:3]
            if want is None:
                with pytest.raises(InputError, match="row"):
                    c.predict(rows)
                raised += 1
            else:
                np.testing.assert_array_equal(c.predict(rows), want_rows)
                answered += 1
    assert raised and answered


# inverse_transform re-validates the regressor's predictions: a scaler refuses infinity,
# TransformedTargetRegressor's own FunctionTransformer (func/inverse_func) NaN too
REGRESSORS = {
    "target_scaler": TransformedTargetRegressor(LinearRegression(),
                                                transformer=StandardScaler()).fit(X, y),
    "target_func": TransformedTargetRegressor(LinearRegression(), func=np.log1p,
                                              inverse_func=np.expm1).fit(X, y),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(REGRESSORS))
def test_regressor_raises_where_sklearn_raises(name, backend):
    p = REGRESSORS[name]
    c = peregrine.compile(p, backend=backend)
    np.testing.assert_allclose(c.predict(X), p.predict(X), rtol=1e-5, atol=1e-6)
    raised = answered = 0
    for Xt in _cases():
        want = sklearn_predict_or_none(p, Xt)
        for rows in (Xt, Xt[2:3]):
            if want is None:
                with pytest.raises(InputError, match="row"):
                    c.predict(rows)
                raised += 1
            else:
                want_rows = want if rows is Xt else want[2:3]
                np.testing.assert_allclose(c.predict(rows), want_rows, rtol=1e-5, atol=1e-6)
                answered += 1
    assert raised and answered


def test_message_names_step_row_and_column():
    p = PIPES["scaler_forest"]
    c = peregrine.compile(p, backend="reference")
    Xt = X[:5].copy()
    Xt[3, 4] = 1e36  # scale ~1e-4: beyond float32 after scaling
    with pytest.raises(InputError, match=r"row 3.*RandomForestClassifier.*column 4.*float32"):
        c.predict(Xt)


def test_no_guard_without_a_validating_step():
    import xgboost

    p = make_pipeline(StandardScaler(), xgboost.XGBClassifier(n_estimators=3)).fit(X, y)
    c = peregrine.compile(p, backend="reference")
    assert not [o for o in c.spec.graph.outputs if o.startswith("guard:")]


def test_injection_still_narrows_with_a_guard():
    c = peregrine.compile(PIPES["ct_tree"], backend="reference")
    inject = next(q for q in c.passes if q["pass"] == "inject")
    assert "no longer computed" in inject["changed"] and " 0 column(s)" not in inject["changed"]


@pytest.mark.parametrize("name", ["scaler_logistic", "scaler_forest"])
def test_one_row_builtin_checks_the_bound(name):
    """Guarded models keep the machine-code one-row method (kernels/pyentry.py): it sends a row
    holding a magnitude beyond the model's bound to the generic path, which raises where
    scikit-learn raises, and answers every other row as the Python path does."""
    p = PIPES[name]
    c = peregrine.compile(p, "native")
    method = c.predict_proba
    row = X[:1].copy()
    np.testing.assert_allclose(method(row), p.predict_proba(row), rtol=1e-5, atol=1e-6)
    for v in (1e306, -1e306, np.inf):  # 1e306 / 1e-3 (column 0's scale) overflows
        bad = row.copy()
        bad[0, 0] = v
        with pytest.raises((InputError, ValueError)):
            _ = p.predict_proba(bad)
        with pytest.raises(InputError):
            method(bad)
    if name == "scaler_logistic":  # a fused row kernel: the method is the builtin
        assert type(method).__name__ == "builtin_function_or_method"
