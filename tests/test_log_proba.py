"""predict_log_proba: present exactly where the source class has it, computed as the source does
(log of the probabilities, naive Bayes' log-softmax that stays finite where probabilities
underflow, LDA's floor at smallest_normal), on every backend; kept by save/load."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.ensemble import (
    BaggingClassifier,
    HistGradientBoostingClassifier,
    RandomForestClassifier,
    StackingClassifier,
    VotingClassifier,
)
from sklearn.linear_model import LogisticRegression
from sklearn.naive_bayes import GaussianNB
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC, LinearSVC
from sklearn.tree import DecisionTreeClassifier

import peregrine
from peregrine.backends import available_backends
from tests.conformance.test_conformance import assert_same

BACKENDS = [b for b in ("reference", "torch", "torchscript", "native")
            if b in available_backends()]


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(200, 5, n_informative=4, n_redundant=0, n_classes=3,
                               random_state=3)
    return X, y


def _far_rows(X: np.ndarray, far: float = 60.0) -> np.ndarray:
    """Rows ``far`` standard deviations away: probabilities underflow to exactly 0 there."""
    scale = X.std(axis=0)
    return np.vstack([X[:10], X[:3] + far * scale, X[:3] - far * scale])


@pytest.mark.parametrize("backend", BACKENDS)
def test_naive_bayes_log_proba_finite_where_proba_underflows(data, backend):
    X, y = data
    model = GaussianNB().fit(X, y)
    rows = _far_rows(X)
    proba, want = model.predict_proba(rows), model.predict_log_proba(rows)
    assert (proba == 0).any() and np.isfinite(want).all()  # the case this test is about
    compiled = peregrine.compile(model, backend)
    got = compiled.predict_log_proba(rows)
    assert np.isfinite(got).all()
    assert_same("predict_log_proba", got, want, f"GaussianNB {backend}")
    assert_same("predict_log_proba", compiled.predict_log_proba(rows.astype(np.float32)),
                model.predict_log_proba(rows.astype(np.float32)), f"GaussianNB {backend} f32")


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_probabilities_give_minus_inf_quietly(data, backend):
    X, y = data
    model = RandomForestClassifier(5, max_depth=4, random_state=0).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sklearn's own np.log(0) warns
        want = model.predict_log_proba(X)
    assert np.isneginf(want).any()
    compiled = peregrine.compile(model, backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the compiled model does not warn about log(0)
        got = compiled.predict_log_proba(X)
        rows = np.concatenate([compiled.predict_log_proba(X[i:i + 1]) for i in range(20)])
    assert_same("predict_log_proba", got, want, f"RandomForest {backend}")
    assert np.array_equal(np.isneginf(got), np.isneginf(want))
    assert_same("predict_log_proba", rows, want[:20], f"RandomForest {backend} one row")


@pytest.mark.parametrize("backend", BACKENDS)
def test_lda_floors_zero_probabilities(data, backend):
    X, y = data
    model = LinearDiscriminantAnalysis().fit(X, y)
    rows = _far_rows(X, 2000.0)  # LDA's scores are linear: further out to underflow
    assert (model.predict_proba(rows) == 0).any()
    want = model.predict_log_proba(rows)
    floor = np.log(np.finfo(np.float64).smallest_normal)
    assert (want == floor).any() and np.isfinite(want).all()
    got = peregrine.compile(model, backend).predict_log_proba(rows)
    assert_same("predict_log_proba", got, want, f"LDA {backend}")


@pytest.mark.parametrize("make", [
    HistGradientBoostingClassifier, KNeighborsClassifier, LinearSVC,
    lambda: SVC(probability=False),
    lambda: VotingClassifier([("a", LogisticRegression()), ("b", GaussianNB())],
                             voting="soft"),
    lambda: StackingClassifier([("a", LogisticRegression()), ("b", GaussianNB())]),
    lambda: make_pipeline(StandardScaler(), LinearSVC()),
], ids=["hgb", "knn", "linearsvc", "svc-no-proba", "voting", "stacking", "pipe-linearsvc"])
def test_absent_where_source_lacks_it(data, make):
    X, y = data
    model = make().fit(X, y)
    assert not hasattr(model, "predict_log_proba")
    compiled = peregrine.compile(model, "reference")
    assert not hasattr(compiled, "predict_log_proba")
    assert "predict_log_proba" not in compiled.methods
    with pytest.raises(AttributeError, match="has no predict_log_proba"):
        compiled.predict_log_proba(X)


def test_pipeline_delegates_to_its_last_step(data):
    X, y = data
    model = make_pipeline(StandardScaler(), SVC(probability=True, random_state=0)).fit(X, y)
    compiled = peregrine.compile(model, "reference")
    assert compiled.methods == ("predict", "predict_proba", "predict_log_proba",
                                "decision_function")
    assert_same("predict_log_proba", compiled.predict_log_proba(X),
                model.predict_log_proba(X), "pipeline SVC")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n_jobs", [1, 2])
def test_bagging_of_trees_matches(data, backend, n_jobs):
    X, y = data
    model = BaggingClassifier(DecisionTreeClassifier(max_depth=3), n_estimators=5,
                              max_features=0.6, max_samples=0.3, random_state=0,
                              n_jobs=n_jobs).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = model.predict_log_proba(X)
    assert np.isneginf(want).any()
    got = peregrine.compile(model, backend).predict_log_proba(X)
    assert_same("predict_log_proba", got, want, f"Bagging of trees {backend} {n_jobs} jobs")


@pytest.mark.parametrize("backend", BACKENDS)
def test_bagging_of_naive_bayes_adds_log_probabilities(backend):
    """Bagging combines members' log-probabilities with logaddexp: with naive Bayes members
    (one of which saw only two of the three classes) they stay finite where every
    probability underflows, so log(predict_proba) would be -inf there."""
    X, y = make_classification(80, 4, n_informative=3, n_redundant=0, n_classes=3,
                               weights=[0.45, 0.45, 0.1], random_state=5)
    # a pipeline takes no sample_weight, so members fit on row subsets: some miss class 2
    model = BaggingClassifier(make_pipeline(StandardScaler(), GaussianNB()), n_estimators=4,
                              max_samples=16, random_state=2, n_jobs=2).fit(X, y)
    assert any(len(e.classes_) < 3 for e in model.estimators_)  # the scatter is exercised
    rows = _far_rows(X)
    want = model.predict_log_proba(rows)
    assert (model.predict_proba(rows) == 0).any() and np.isfinite(want).all()
    got = peregrine.compile(model, backend).predict_log_proba(rows)
    assert_same("predict_log_proba", got, want, f"Bagging of GaussianNB {backend}")


@pytest.mark.parametrize("make", [
    GaussianNB,
    lambda: BaggingClassifier(GaussianNB(), n_estimators=3, random_state=0, n_jobs=2),
], ids=["nb", "bagging-nb"])
def test_saved_artifact_keeps_predict_log_proba(data, tmp_path, make):
    X, y = data
    model = make().fit(X, y)
    path = tmp_path / "model.peregrine"
    peregrine.compile(model, "reference").save(path)
    loaded = peregrine.load(path)
    assert "predict_log_proba" in loaded.methods
    rows = _far_rows(X)
    assert_same("predict_log_proba", loaded.predict_log_proba(rows),
                model.predict_log_proba(rows), "loaded model")


def test_cli_predict_log_proba_names_columns_by_class(data, tmp_path, capsys):
    import pandas as pd

    from peregrine.cli import main

    X, y = data
    labels = np.array(["a", "b", "c"])[y]
    model = GaussianNB().fit(X, labels)
    peregrine.compile(model, "reference").save(tmp_path / "nb.pgn")
    pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])]).to_csv(
        tmp_path / "rows.csv", index=False)
    code = main([
        "predict", str(tmp_path / "nb.pgn"), str(tmp_path / "rows.csv"), "-o",
        str(tmp_path / "out.csv"), "--method", "predict_log_proba", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    got = pd.read_csv(tmp_path / "out.csv")
    assert list(got.columns) == ["log_proba_a", "log_proba_b", "log_proba_c"]
    np.testing.assert_allclose(got.to_numpy(), model.predict_log_proba(X), rtol=1e-5, atol=1e-6)
