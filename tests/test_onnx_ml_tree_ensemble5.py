"""ai.onnx.ml opset 5 ``TreeEnsemble`` as input, against ONNX Runtime on the same graph.

No exporter at hand (skl2onnx 1.20, onnxmltools 1.16) writes the opset-5 op, so the graphs are
written here with onnx.helper from scikit-learn's fitted trees: every node mode (random per
node), missing-value tracking, float and double splits, SUM/AVERAGE, the post-transforms, two
targets, rows with NaN, +-inf and values on and beside the thresholds."""

from __future__ import annotations

import numpy as np
import pytest

import peregrine
from peregrine.errors import UnsupportedModelError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from sklearn.ensemble import RandomForestRegressor  # noqa: E402

BACKENDS = ["reference", "torch", "torchscript", "native"]
MODES = {"LEQ": 0, "LT": 1, "GTE": 2, "GT": 3, "EQ": 4, "NEQ": 5}


def _forest(seed=0):
    r = np.random.default_rng(seed)
    X = r.normal(size=(300, 4))
    y = np.column_stack([X[:, 0] + X[:, 1] ** 2, X[:, 2] - X[:, 3]])
    return RandomForestRegressor(n_estimators=4, max_depth=4, random_state=seed).fit(X, y), X


def v5_model(rf, dtype=np.float32, aggregate=1, post=0, modes=tuple(MODES), seed=0,
             one_target=False):
    """One v5 tree per (sklearn tree, target); node modes drawn from ``modes``, children
    swapped so that GT/GTE keep the tree's meaning roughly (ONNX Runtime decides either way)."""
    r = np.random.default_rng(seed)
    feats, splits, nmodes, tids, fids, tleaf, fleaf, tracks = ([] for _ in range(8))
    leaf_t, leaf_w, roots = [], [], []
    n_targets = 1 if one_target else 2
    for est in rf.estimators_:
        tr = est.tree_
        for target in range(n_targets):
            base = len(feats)
            inner = {i: base + k for k, i in enumerate(np.flatnonzero(tr.children_left >= 0))}
            leaves = {}
            for i in np.flatnonzero(tr.children_left < 0):
                leaves[i] = len(leaf_t)
                leaf_t.append(target)
                leaf_w.append(tr.value[i, target, 0])
            for i in sorted(inner, key=inner.get):
                mode = modes[r.integers(len(modes))]
                lo, hi = tr.children_left[i], tr.children_right[i]
                true_child, false_child = (hi, lo) if mode in ("GT", "GTE") else (lo, hi)
                feats.append(tr.feature[i])
                splits.append(tr.threshold[i])
                nmodes.append(MODES[mode])
                for child, ids, leafs in ((true_child, tids, tleaf), (false_child, fids, fleaf)):
                    is_leaf = child in leaves
                    ids.append(leaves[child] if is_leaf else inner[child])
                    leafs.append(int(is_leaf))
                tracks.append(int(r.integers(2)))
            roots.append(inner[0])
    ttype = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    node = helper.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", n_targets=n_targets,
        aggregate_function=aggregate, post_transform=post, tree_roots=roots,
        nodes_featureids=feats, nodes_modes=numpy_helper.from_array(np.uint8(nmodes)),
        nodes_splits=numpy_helper.from_array(np.asarray(splits, dtype)),
        nodes_truenodeids=tids, nodes_trueleafs=tleaf, nodes_falsenodeids=fids,
        nodes_falseleafs=fleaf, nodes_missing_value_tracks_true=tracks,
        leaf_targetids=leaf_t, leaf_weights=numpy_helper.from_array(np.asarray(leaf_w, dtype)))
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", ttype, [None, 4])],
        [helper.make_tensor_value_info("Y", ttype, [None, n_targets])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                   helper.make_opsetid("ai.onnx.ml", 5)])


def _rows(rf, X, dtype):
    thr = np.concatenate([e.tree_.threshold[e.tree_.children_left >= 0] for e in rf.estimators_])
    t = thr.astype(dtype)
    on = np.column_stack([np.resize(t, 200)] * 4)
    rows = np.concatenate([X[:100], on, np.nextafter(on, dtype(np.inf)),
                           np.nextafter(on, dtype(-np.inf))]).astype(dtype)
    rows[::7, 1] = np.nan
    rows[::11, 0] = np.inf
    rows[::13, 3] = -np.inf
    return rows


def _ort(model, X):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"X": X})[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("aggregate,post", [(1, 0), (0, 0), (1, 2), (1, 1)])
def test_tree_ensemble_v5_matches_onnxruntime(dtype, aggregate, post):
    rf, X = _forest()
    model = v5_model(rf, dtype, aggregate, post, seed=aggregate * 3 + post)
    rows = _rows(rf, X, dtype)
    want = _ort(model, rows)
    for backend in BACKENDS:
        got = peregrine.compile(model, backend=backend).predict(rows)
        assert got.dtype == want.dtype and got.shape == want.shape, backend
        # float32 sums in tree order vs ONNX Runtime's (docs/frontends/onnx_ml.md)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=backend)


def test_post_transform_as_onnxruntime_reads_it():
    """ONNX Runtime reads post_transform 1 as LOGISTIC and 2 as SOFTMAX (the ONNX spec's text
    says the reverse); the compiled model answers as ONNX Runtime."""
    rf, X = _forest()
    rows = X[:20].astype(np.float32)
    raw = _ort(v5_model(rf, post=0), rows).astype(np.float64)
    np.testing.assert_allclose(_ort(v5_model(rf, post=1), rows), 1 / (1 + np.exp(-raw)),
                               rtol=1e-6)
    soft = np.exp(raw - raw.max(axis=1, keepdims=True))
    np.testing.assert_allclose(_ort(v5_model(rf, post=2), rows),
                               soft / soft.sum(axis=1, keepdims=True), rtol=1e-6)


def test_tree_ensemble_v5_each_mode_exact():
    """One mode for every node, float32: the decisions are the same as ONNX Runtime's, so the
    sums are bit for bit on one target summed in one order."""
    rf, X = _forest(1)
    rows = _rows(rf, X, np.float32)
    for mode in MODES:
        model = v5_model(rf, np.float32, modes=(mode,), seed=2, one_target=True)
        want = _ort(model, rows)
        got = peregrine.compile(model, backend="reference").predict(rows)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=mode)


def test_tree_ensemble_v5_member_and_min_refused():
    rf, _ = _forest()
    model = v5_model(rf, aggregate=2)
    with pytest.raises(UnsupportedModelError, match="aggregate_function 'MIN'"):
        peregrine.compile(model, backend="reference")
    model = v5_model(rf)
    attr = next(a for a in model.graph.node[0].attribute if a.name == "nodes_modes")
    modes = numpy_helper.to_array(attr.t).copy()
    modes[0] = 6
    attr.t.CopyFrom(numpy_helper.from_array(modes))
    with pytest.raises(UnsupportedModelError, match="BRANCH_MEMBER"):
        peregrine.compile(model, backend="reference")
