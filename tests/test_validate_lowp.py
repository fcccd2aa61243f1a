"""CompileOptions(validate=True) at the low-precision levels (Precision.BFLOAT16 / FLOAT16): the
program trades the exactness contract for speed by request, so validation measures it against
the source and reports the deviations and changed labels instead of raising; at the exact
levels the contract is still enforced."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.neural_network import MLPClassifier

import peregrine
from peregrine import CompileOptions, Precision, ValidationError
from peregrine.runtime.validate import compare

X, y = make_classification(400, 12, n_informative=6, random_state=0)
MODEL = MLPClassifier((32,), max_iter=300, random_state=0).fit(X, y)


@pytest.mark.parametrize("level", [Precision.BFLOAT16, Precision.FLOAT16])
def test_low_precision_validation_reports(level):
    compiled = peregrine.compile(MODEL, "torch", sample_input=X,
                                 options=CompileOptions(precision=level, validate=True))
    report = compiled.validation
    assert report["rtol"] == "reported only"
    proba = report["methods"]["predict_proba"]
    assert 0 < proba["max_abs"] < 0.1  # measured, and of the dtype's order
    assert report["methods"]["predict"]["labels_changed"] >= 0
    assert "sample rows" in compiled.explain()


def test_exact_level_still_raises_on_a_difference():
    want = np.array([0.5, 0.25])
    with pytest.raises(ValidationError):
        compare(want + 1e-3, want, "m.predict_proba", "predict_proba")
    entry = compare(want + 1e-3, want, "m.predict_proba", "predict_proba", report_only=True)
    assert entry["max_abs"] == pytest.approx(1e-3)
    labels = compare(np.array([1, 0]), np.array([1, 1]), "m.predict", "predict",
                     report_only=True)
    assert labels["labels_changed"] == 1
