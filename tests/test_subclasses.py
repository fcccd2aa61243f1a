"""User subclasses of supported estimators (issue #11, item 3). The registries find a class
through its parents, so a subclass that redefines a method Peregrine reproduces (or a helper the
library's version calls) would compile as its parent and silently return the parent's answer:
it is refused, naming the method. A subclass that only adds attributes or overrides
``__init__``/``fit``/unrelated methods compiles, and answers as the source does."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.compose import ColumnTransformer, TransformedTargetRegressor
from sklearn.datasets import make_classification
from sklearn.decomposition import PCA
from sklearn.dummy import DummyRegressor
from sklearn.ensemble import GradientBoostingRegressor, RandomForestClassifier, VotingClassifier
from sklearn.linear_model import LogisticRegression, Ridge, SGDClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import peregrine
from peregrine.errors import UnsupportedModelError
from peregrine.frontends import FRONTENDS, load_all
from peregrine.frontends.steps import HEADS, STEPS

X, Y = make_classification(80, 4, n_informative=3, n_redundant=0, n_classes=3, random_state=0)


# ---------------------------------------------------------------- subclasses that lie --


class Tweaked(LogisticRegression):
    def predict_proba(self, X):
        return super().predict_proba(X)[:, ::-1]


class TweakedDecision(LogisticRegression):  # predict and predict_proba both read it
    def decision_function(self, X):
        return -super().decision_function(X)


class TweakedHelper(SGDClassifier):  # SGDClassifier.predict_proba calls _predict_proba_lr
    def _predict_proba_lr(self, X):
        return super()._predict_proba_lr(X) ** 2


class Mixin:
    def predict(self, X):
        return np.zeros(len(X))


class MixedIn(Mixin, Ridge):  # defined by a mixin placed before the registered class
    pass


class ScaledTransform(StandardScaler):
    def transform(self, X, copy=None):
        return 2 * super().transform(X, copy=copy)


class ScaledInverse(StandardScaler):
    def inverse_transform(self, X, copy=None):
        return 2 * super().inverse_transform(X, copy=copy)


class ScaledScores(PCA):
    def score_samples(self, X):
        return 2 * super().score_samples(X)


class XDummy(DummyRegressor):
    def predict(self, X, return_std=False):
        return np.asarray(X)[:, 0]


@pytest.mark.parametrize("make,method", [
    (lambda: Tweaked().fit(X, Y), "predict_proba"),
    (lambda: TweakedDecision().fit(X, Y), "decision_function"),
    (lambda: TweakedHelper(loss="log_loss", random_state=0).fit(X, Y), "_predict_proba_lr"),
    (lambda: MixedIn().fit(X, X[:, 0]), "predict"),
    (lambda: ScaledTransform().fit(X), "transform"),
    (lambda: ScaledScores(2).fit(X), "score_samples"),
], ids=["predict_proba", "decision_function", "helper", "mixin", "transform", "score_samples"])
def test_subclass_overriding_a_reproduced_method_is_refused(make, method):
    model = make()
    with pytest.raises(UnsupportedModelError, match=rf"overrides {method}\(\)"):
        peregrine.compile(model, "reference")


@pytest.mark.parametrize("make,method", [
    (lambda: make_pipeline(StandardScaler(), Tweaked()).fit(X, Y), "predict_proba"),
    (lambda: make_pipeline(ScaledTransform(), LogisticRegression()).fit(X, Y), "transform"),
    (lambda: make_pipeline(ColumnTransformer([("s", ScaledTransform(), [0, 1])]),
                           LogisticRegression()).fit(X, Y), "transform"),
    (lambda: VotingClassifier([("a", LogisticRegression()), ("b", Tweaked())],
                              voting="soft").fit(X, Y), "predict_proba"),
    (lambda: TransformedTargetRegressor(Ridge(), transformer=ScaledInverse(),
                                                 check_inverse=False).fit(X, X[:, 0]),
     "inverse_transform"),
    (lambda: GradientBoostingRegressor(n_estimators=3, init=XDummy()).fit(X, X[:, 0]),
     "predict"),
], ids=["pipeline-head", "pipeline-step", "column-transformer", "voting", "target-transformer",
        "gb-init"])
def test_overriding_member_of_a_meta_estimator_is_refused(make, method):
    with pytest.raises(UnsupportedModelError, match=rf"overrides {method}\(\)"):
        peregrine.compile(make(), "reference")


def test_refusal_names_the_subclass_the_parent_and_the_method():
    with pytest.raises(UnsupportedModelError) as err:
        peregrine.compile(Tweaked().fit(X, Y), "reference")
    msg = str(err.value)
    assert "Tweaked" in msg and "sklearn.LogisticRegression" in msg and "predict_proba" in msg


# ------------------------------------------------------------ harmless subclasses compile --


class WithInit(LogisticRegression):
    def __init__(self, C=1.0, note="mine"):
        super().__init__(C=C)
        self.note = note

    def fit(self, X, y, sample_weight=None):
        self.fitted_by_me_ = True
        return super().fit(X, y, sample_weight)

    def explain(self):  # an unrelated method of the user's own
        return self.note

    def _my_helper(self):  # private names the library never calls
        return 1

    def _predict(self, X):  # LogisticRegression defines no _predict, so nothing calls it
        return None


class MyForest(RandomForestClassifier):
    def summary(self):
        return len(self.estimators_)


class MyScaler(StandardScaler):
    def get_feature_names_out(self, input_features=None):
        return super().get_feature_names_out(input_features)


@pytest.mark.parametrize("make", [
    lambda: WithInit(C=0.5).fit(X, Y),
    lambda: MyForest(5, max_depth=3, random_state=0).fit(X, Y),
    lambda: make_pipeline(MyScaler(), WithInit()).fit(X, Y),
    lambda: VotingClassifier([("a", WithInit()), ("b", MyForest(3, random_state=0))],
                             voting="soft").fit(X, Y),
], ids=["init-fit-extra", "forest-extra", "pipeline", "voting"])
def test_subclass_that_changes_no_reproduced_method_compiles(make):
    model = make()
    fast = peregrine.compile(model, "reference")
    np.testing.assert_array_equal(fast.predict(X), model.predict(X))
    np.testing.assert_allclose(fast.predict_proba(X), model.predict_proba(X), rtol=1e-5,
                               atol=1e-6)


def test_no_registered_library_class_is_refused_by_a_registry():
    """Library classes that subclass a registered class (ExtraTreeClassifier of
    DecisionTreeClassifier, LGBMClassifier of LGBMModel, XGBRFClassifier of XGBClassifier,
    MultiTaskLasso of ElasticNet...) resolve in every registry as before."""
    load_all()
    classes = {e.key for reg in (FRONTENDS, STEPS, HEADS) for e in reg}
    try:
        import xgboost

        classes |= {xgboost.XGBRFClassifier, xgboost.XGBRFRegressor}
    except ImportError:
        pass
    from sklearn.linear_model import MultiTaskElasticNet, MultiTaskLasso

    classes |= {MultiTaskElasticNet, MultiTaskLasso}
    for reg in (FRONTENDS, STEPS, HEADS):
        for cls in classes:
            reg.lookup(cls)  # raises UnsupportedModelError if the guard refused it


def test_boosting_library_subclasses_overriding_predict_are_refused():
    xgboost = pytest.importorskip("xgboost")
    lightgbm = pytest.importorskip("lightgbm")

    class XTweaked(xgboost.XGBClassifier):
        def predict_proba(self, X, **kw):
            return super().predict_proba(X, **kw)[:, ::-1]

    class LTweaked(lightgbm.LGBMRegressor):
        def predict(self, X, **kw):
            return super().predict(X, **kw) + 1

    class LQuiet(lightgbm.LGBMRegressor):
        def fit(self, X, y, **kw):
            return super().fit(X, y, **kw)

    y = (X[:, 0] > 0).astype(int)
    with pytest.raises(UnsupportedModelError, match=r"overrides predict_proba\(\)"):
        peregrine.compile(XTweaked(n_estimators=2, max_depth=2).fit(X, y), "reference")
    with pytest.raises(UnsupportedModelError, match=r"overrides predict\(\)"):
        peregrine.compile(LTweaked(n_estimators=2, verbose=-1).fit(X, X[:, 0]), "reference")
    quiet = LQuiet(n_estimators=2, verbose=-1).fit(X, X[:, 0])
    np.testing.assert_allclose(peregrine.compile(quiet, "reference").predict(X),
                               quiet.predict(X), rtol=1e-5, atol=1e-6)
