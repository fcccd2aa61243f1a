"""The native backend's lowering (backends/native/lower.py): each method's outputs become a plan
of steps through named passes (fuse_rows, fuse_epilogues, fuse_prologues), and one executor
runs every plan. Checks which steps each kind of model lowers to, that explain() reports the
passes, and that every plan kind answers as the same model with fusion off and as the source."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llvmlite")

from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.ensemble import RandomForestClassifier  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.neighbors import KNeighborsClassifier  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import OneHotEncoder, StandardScaler  # noqa: E402
from sklearn.svm import SVC  # noqa: E402

import peregrine  # noqa: E402
from peregrine import CompileOptions  # noqa: E402
from peregrine.backends.native.fusion import FusedForest, RowRegion  # noqa: E402
from peregrine.backends.native.lower import PASSES  # noqa: E402
from peregrine.ir import Node  # noqa: E402

RNG = np.random.default_rng(7)
X = RNG.normal(size=(600, 6))
X[:, 5] = RNG.integers(0, 4, size=600)
y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(int) + (X[:, 3] > 1)


def _models() -> dict:
    ct = ColumnTransformer([("s", StandardScaler(), [0, 1, 2, 3, 4]),
                            ("o", OneHotEncoder(handle_unknown="ignore"), [5])])
    return {
        # an output of row-wise ops only: one row kernel, nothing else
        "rows": (make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)),
                 [RowRegion]),
        # a forest on the input, its probabilities fused in its kernel
        "forest": (RandomForestClassifier(n_estimators=8, max_depth=5, random_state=0),
                   [FusedForest]),
        # row-wise ops in front of a forest: a region, then the forest
        "prologue": (make_pipeline(ct, RandomForestClassifier(n_estimators=8, max_depth=5,
                                                              random_state=0)),
                     [RowRegion, FusedForest]),
        # ops without native code: their rules, run in row blocks
        "rules": (SVC(probability=True, random_state=0), [Node]),
        # a kernel SVM's decision: the rbf kernel and its dual coefficients in one row kernel
        "svm": (SVC(random_state=0), [RowRegion], "binary"),
    }


MODELS = _models()


def _kinds(plan) -> list[type]:
    kinds = []
    for step in plan.steps[1:]:  # after the input
        kind = type(step)
        if not kinds or kinds[-1] is not kind:
            kinds.append(kind)
    return kinds


@pytest.mark.parametrize("name", sorted(MODELS))
def test_plan_steps_and_answers(name):
    model, want_kinds, *binary = MODELS[name]
    model.fit(X, (y > 0).astype(int) if binary else y)
    compiled = peregrine.compile(model, "native")
    method0 = "predict_proba" if hasattr(model, "predict_proba") else "decision_function"
    output = compiled.spec.methods[method0].output
    plan = compiled._exec.plan((output,))
    assert plan.steps[0].op.value == "input"
    assert _kinds(plan) == want_kinds
    assert plan.kernel_only == (len(want_kinds) == 1 and want_kinds[0] is not Node)
    unfused = peregrine.compile(model, "native", options=CompileOptions(fused_kernels=False))
    assert not any(isinstance(s, RowRegion) for s in
                   unfused._exec.plan((output,)).steps)
    rows = RNG.normal(size=(9000, 6))  # several row blocks for the blocked plans
    rows[:, 5] = RNG.integers(0, 5, size=9000)  # 4: a category the encoder never saw
    for method in ("predict", method0):
        for n in (1, 3, 9000):
            got = getattr(compiled, method)(rows[:n])
            # fused kernels sum in their own order (the rbf's x.v by features where the rules
            # call BLAS): a few ulps of the largest terms apart
            np.testing.assert_allclose(got, getattr(unfused, method)(rows[:n]),
                                       rtol=1e-12, atol=1e-12)
            want = getattr(model, method)(rows[:n])
            if method == "predict":
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_explain_lists_the_lowering_passes():
    model = make_pipeline(
        ColumnTransformer([("s", StandardScaler(), [0, 1, 2, 3, 4]),
                           ("o", OneHotEncoder(handle_unknown="ignore"), [5])]),
        RandomForestClassifier(n_estimators=4, max_depth=4, random_state=0)).fit(X, y)
    info = peregrine.compile(model, "native").explain_dict()["backend_choices"]["lowering"]
    lines = [line for plan in info.values() for line in plan]
    names = {line.split(":")[0] for line in lines}
    assert {"fuse_epilogues", "fuse_prologues"} <= names
    assert names <= {name for name, _ in PASSES}
    rules = peregrine.compile(KNeighborsClassifier().fit(X, y), "native")
    assert all(v == ["rules only"] for v in
               rules.explain_dict()["backend_choices"]["lowering"].values())
