"""NaN and infinity on the online paths of methods whose output the runtime reshapes or casts
after the kernel (a squeezed regressor's predict, a binary decision_function, a boolean
MissingIndicator, a scaler keeping the input's dtype): raised exactly where scikit-learn
raises, answered identically elsewhere, one row, a few rows (the native builtin) and a batch.

Before, the machine-code builtin made for such a method (kernels/pyentry.py) was built without
the finite check, so up to 64 rows with a NaN or an infinity were answered on the torch and
native backends (LinearRegression.predict returned inf, a MissingIndicator ignored the
infinity scikit-learn's check_array refuses)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.ensemble import GradientBoostingClassifier, RandomForestRegressor
from sklearn.impute import MissingIndicator, SimpleImputer
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler, OneHotEncoder, StandardScaler
from sklearn.tree import DecisionTreeClassifier

import peregrine
from peregrine.errors import InputError

BACKENDS = ["reference", "torch", "native"]
RNG = np.random.default_rng(0)
X = RNG.normal(size=(80, 4))
Y = X @ np.array([1.0, -2.0, 0.5, 3.0])
LABELS = (Y > 0).astype(int)


def _models():
    holes = np.where(X > 1.0, np.nan, X)
    return {
        "linear-regression": LinearRegression().fit(X, Y),
        "ridge-2-outputs": Ridge().fit(X, np.c_[Y, -Y]),
        "logistic": LogisticRegression().fit(X, LABELS),
        "scaler-linear": make_pipeline(StandardScaler(), LinearRegression()).fit(X, Y),
        "imputer-logistic": make_pipeline(SimpleImputer(), LogisticRegression()).fit(holes,
                                                                                     LABELS),
        "scaler": StandardScaler().fit(X),
        "minmax": MinMaxScaler().fit(X),
        "missing-indicator": MissingIndicator(features="all").fit(holes),
        "one-hot": OneHotEncoder(handle_unknown="ignore").fit(np.round(X)),
        # trees cast to float32 first: NaN accepted (a learned direction) or refused, and a
        # float64 value float32 makes infinite refused like infinity itself
        "tree-nan": DecisionTreeClassifier(max_depth=4, random_state=0).fit(holes, LABELS),
        "forest-nan": RandomForestRegressor(5, max_depth=4, random_state=0).fit(holes, Y),
        "boosting": GradientBoostingClassifier(n_estimators=5, max_depth=2).fit(X, LABELS),
    }


MODELS = _models()


def _source(model, method, rows):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = getattr(model, method)(rows)
    except ValueError:
        return None
    return out.toarray() if hasattr(out, "toarray") else np.asarray(out)


def _inputs():
    # 1e39: finite in float64, infinite in float32
    for value in (np.nan, np.inf, -np.inf, 1e39, -1e39):
        for n in (1, 3, 100):  # one row, the builtin's few rows, a batch past them
            for col in (0, 3):
                rows = np.resize(X, (n, 4)).copy()
                rows[n - 1, col] = value
                yield value, n, col, rows


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_nonfinite_refused_where_the_source_refuses(name, backend):
    model = MODELS[name]
    c = peregrine.compile(model, backend=backend)
    refused = 0
    for method in c.methods:
        for value, n, col, rows in _inputs():
            for dtype in (np.float64, np.float32):
                with np.errstate(over="ignore"):
                    x = rows.astype(dtype)
                want = _source(model, method, x)
                where = f"{name} {backend} {method} {value} rows={n} col={col} {x.dtype}"
                if want is None:
                    refused += 1
                    with pytest.raises(InputError):
                        getattr(c, method)(x)
                    continue
                got = getattr(c, method)(x)
                got = got.toarray() if hasattr(got, "toarray") else np.asarray(got)
                assert got.dtype == want.dtype, where
                if want.dtype.kind == "f":
                    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=where)
                else:
                    np.testing.assert_array_equal(got, want, err_msg=where)
    assert refused  # every model refuses infinity at least


@pytest.mark.parametrize("backend", BACKENDS)
def test_finite_rows_after_refused_ones(backend):
    """A refused call leaves the builtin usable: the next finite row is answered."""
    model = MODELS["linear-regression"]
    c = peregrine.compile(model, backend=backend)
    row = X[:1].copy()
    row[0, 2] = np.inf
    with pytest.raises(InputError):
        c.predict(row)
    np.testing.assert_allclose(c.predict(X[:1]), model.predict(X[:1]), rtol=1e-5, atol=1e-6)
