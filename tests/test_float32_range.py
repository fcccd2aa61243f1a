"""scikit-learn's tree models cast the input to float32 before checking it: a float64 value
beyond float32's range becomes infinity there and is rejected ("a value too large for
dtype('float32')"). The compiled models reject the same values on every path (one row
through the machine-code method, a few rows, a batch) and accept the same edge values."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("sklearn")

from sklearn.ensemble import GradientBoostingClassifier, RandomForestRegressor  # noqa: E402
from sklearn.tree import DecisionTreeClassifier  # noqa: E402

import peregrine  # noqa: E402
from peregrine.errors import InputError  # noqa: E402
from peregrine.runtime.inputs import FLOAT32_OVERFLOW  # noqa: E402

RNG = np.random.default_rng(3)
X = RNG.normal(size=(300, 4))
Y = (X[:, 0] > 0).astype(int)
MODELS = {
    "decision-tree": lambda: DecisionTreeClassifier(max_depth=4, random_state=0).fit(X, Y),
    "random-forest": lambda: RandomForestRegressor(n_estimators=5, max_depth=4,
                                                   random_state=0).fit(X, X[:, 1]),
    "gradient-boosting": lambda: GradientBoostingClassifier(n_estimators=5,
                                                            random_state=0).fit(X, Y),
}
EDGES = [np.finfo(np.float32).max, np.nextafter(FLOAT32_OVERFLOW, 0.0), FLOAT32_OVERFLOW, 1e300,
         -FLOAT32_OVERFLOW, -np.finfo(np.float32).max]


def _sklearn_rejects(model, rows) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model.predict(rows)
        except ValueError:
            return True
    return False


@pytest.mark.parametrize("backend", ["native", "reference"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_values_too_large_for_float32(name, backend):
    model = MODELS[name]()
    compiled = peregrine.compile(model, backend)
    for value in EDGES:
        for n in (1, 3, 200):
            rows = X[:n].copy()
            rows[n // 2, 2] = value
            if _sklearn_rejects(model, rows):
                with pytest.raises(InputError, match="too large for float32"):
                    compiled.predict(rows)
            else:
                np.testing.assert_allclose(compiled.predict(rows), model.predict(rows),
                                           rtol=1e-5, atol=1e-6)
    # a NaN beside the big value: still found (NaN is skipped by the range check)
    rows = X[:3].copy()
    rows[0, 1], rows[2, 3] = np.nan, 1e300
    if _sklearn_rejects(model, rows):
        with pytest.raises(InputError):
            compiled.predict(rows)


def test_saved_artifacts_keep_the_rule(tmp_path):
    compiled = peregrine.compile(MODELS["decision-tree"](), "native")
    path = tmp_path / "tree.peregrine"
    compiled.save(path)
    loaded = peregrine.load(path)
    assert loaded.spec.finite_dtype == "float32"
    rows = X[:1].copy()
    rows[0, 0] = 1e300
    with pytest.raises(InputError, match="too large for float32"):
        loaded.predict(rows)
