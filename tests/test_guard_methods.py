"""Guards hold per method (runtime/guards.py ``holds_for``): a stacking model's final
estimator re-validates its members' predictions (check_array: an overflowed prediction raises
in ``predict``), but ``transform`` returns the stack without running it, infinity and all, as
scikit-learn does. Batch and one row, three backends, a pipeline around it, an artifact."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.ensemble import StackingClassifier, StackingRegressor
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer

import peregrine
from peregrine.errors import InputError

rng = np.random.default_rng(0)
X = rng.normal(size=(120, 3))
y = 10 * X[:, 0] + X[:, 1]


def _models():
    reg = StackingRegressor([("lr", LinearRegression()), ("r", Ridge(alpha=3.0))],
                            final_estimator=Ridge())
    # members' decision values overflow on a huge row; the final LogisticRegression refuses
    clf = StackingClassifier([("a", LogisticRegression()), ("b", LogisticRegression(C=10.0))],
                             final_estimator=LogisticRegression(),
                             stack_method="decision_function")
    return {"regressor": reg.fit(X, y), "classifier": clf.fit(X, y > 0),
            "pipeline": make_pipeline(FunctionTransformer(), StackingRegressor(
                [("lr", LinearRegression()), ("r", Ridge())],
                final_estimator=Ridge())).fit(X, y)}


MODELS = _models()


def _huge() -> np.ndarray:
    rows = X[:3].copy()
    rows[1, 0] = 1.7e308  # every member's prediction overflows to infinity
    return rows


@pytest.mark.parametrize("backend", ["reference", "native", "torch"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_transform_answers_where_predict_raises(name, backend, tmp_path):
    model = MODELS[name]
    rows = _huge()
    with np.errstate(all="ignore"):
        want = model.transform(rows)
    assert np.isinf(want[1]).all() and np.isfinite(want[[0, 2]]).all()
    with pytest.raises(ValueError, match="infinity"):
        model.predict(rows)  # scikit-learn's own answer: the final estimator refuses it
    fast = peregrine.compile(model, backend=backend)
    for c in (fast, _reloaded(fast, tmp_path)):
        for part in (rows, rows[1:2]):  # a batch and one row
            np.testing.assert_allclose(c.transform(part), want[1:2] if len(part) == 1
                                       else want, rtol=1e-5, atol=1e-6)
            with pytest.raises(InputError, match="row 0|row 1"):
                c.predict(part)
        np.testing.assert_allclose(c.predict(X), model.predict(X), rtol=1e-5, atol=1e-6)


def _reloaded(fast, tmp_path):
    path = tmp_path / "m.peregrine"
    fast.save(path)
    return peregrine.load(path)


def test_guard_names_list_their_methods():
    """The final estimator's guard names the methods that run it; guards every method runs
    (here: none other) keep the plain name that artifacts saved before this had."""
    spec = peregrine.compile(MODELS["classifier"], backend="reference").spec
    names = [o for o in spec.graph.outputs if o.startswith("guard:inf")]
    assert names and all("#" in o for o in names)
    held = set(names[0].split("#")[1].split("@")[0].split(","))
    assert held == set(spec.methods) - {"transform"}
