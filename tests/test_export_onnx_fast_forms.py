"""The ONNX export's faster forms (docs/export.md, "Speed"): the sigmoid without Where, CLIP as
Max/Min, LINEAR as one Gemm, constants reshaped to their operand's rank and output Casts
folded into their producer (``export/onnx_tune.py``). Each is checked against the source
library on the rows where the forms differ from the former ones (the sigmoid's tails, NaN
through a clip, several outputs from one tensor) and for the graph it writes."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("sklearn")

from onnx import numpy_helper  # noqa: E402
from sklearn.datasets import make_classification  # noqa: E402
from sklearn.linear_model import LogisticRegression, SGDClassifier  # noqa: E402
from sklearn.neural_network import MLPClassifier, MLPRegressor  # noqa: E402
from sklearn.preprocessing import MinMaxScaler  # noqa: E402

import peregrine  # noqa: E402
from peregrine.export import export_onnx  # noqa: E402
from peregrine.export.onnx import session  # noqa: E402
from peregrine.export.onnx_tune import BROADCASTING  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6


def _export(model, tmp_path, rows, methods):
    compiled = peregrine.compile(model, backend="reference")
    path = tmp_path / "m.onnx"
    report = export_onnx(compiled, path, methods=methods, sample=rows)
    sess = session(str(path))
    got = dict(zip([o.name for o in sess.get_outputs()],
                   sess.run(None, {"X": np.ascontiguousarray(rows, np.float64)})))
    return onnx.load(str(path)), {m: got[name] for m, name in report.methods.items()}


def _ops(model):
    return [n.op_type for n in model.graph.node]


def test_sigmoid_tails_match_the_library(tmp_path):
    """Logits from -700 to 700 (the rule's e / (1 + e) down to 1e-304; ONNX Runtime's own
    Sigmoid returns 0.0 from -40): probabilities and their logs as scikit-learn's."""
    X, y = make_classification(400, 4, n_informative=3, n_redundant=0, random_state=0)
    m = LogisticRegression().fit(X, y)
    logits = np.concatenate([np.linspace(-700, 700, 301), [-40.0, -30.0, -0.0, 0.0, 1e-300]])
    # rows along the coefficient vector with exactly these decision values (up to rounding)
    w, b = m.coef_[0], m.intercept_[0]
    rows = np.outer(logits - b, w / np.dot(w, w))
    model, got = _export(m, tmp_path, rows,
                         ["predict", "predict_proba", "predict_log_proba"])
    # a log reads the probabilities: the rule's branches, not 1 / (1 + exp(-x))
    assert "Where" not in _ops(model) and "Reciprocal" not in _ops(model)
    np.testing.assert_array_equal(got["predict"], m.predict(rows))
    np.testing.assert_allclose(got["predict_proba"], m.predict_proba(rows), rtol=RTOL,
                               atol=ATOL)
    # the tail itself, relative (atol would hide 1e-300 against 0.0)
    np.testing.assert_allclose(got["predict_proba"], m.predict_proba(rows), rtol=RTOL, atol=0)
    want = m.predict_log_proba(rows)
    np.testing.assert_allclose(got["predict_log_proba"], want, rtol=RTOL, atol=ATOL)


def test_short_sigmoid_where_only_probabilities_are_read(tmp_path):
    """predict and predict_proba alone: 1 / (1 + exp(-x)), relative to scikit-learn's within
    rtol down to logit -700; below -709.78 it is 0.0 against scikit-learn's < 5.6e-309
    (atol), labels equal."""
    X, y = make_classification(400, 4, n_informative=3, n_redundant=0, random_state=0)
    m = LogisticRegression().fit(X, y)
    w, b = m.coef_[0], m.intercept_[0]
    logits = np.concatenate([np.linspace(-700, 700, 301), [-40.0, -0.0, 0.0, 5e-324]])
    tail = np.asarray([-709.0, -710.0, -745.0, -800.0, 800.0])
    rows = np.outer(np.concatenate([logits, tail]) - b, w / np.dot(w, w))
    model, got = _export(m, tmp_path, rows, ["predict", "predict_proba"])
    assert "Reciprocal" in _ops(model) and "Where" not in _ops(model)
    want = m.predict_proba(rows)
    np.testing.assert_array_equal(got["predict"], m.predict(rows))
    k = len(logits)
    np.testing.assert_allclose(got["predict_proba"][:k], want[:k], rtol=RTOL, atol=0)
    np.testing.assert_allclose(got["predict_proba"][k:], want[k:], rtol=RTOL, atol=1e-300)
    # probabilities alone: the Gemm returns -v (negated weights), no Neg node
    model, got = _export(m, tmp_path, rows, ["predict_proba"])
    assert "Neg" not in _ops(model)
    np.testing.assert_allclose(got["predict_proba"][:k], want[:k], rtol=RTOL, atol=0)
    np.testing.assert_allclose(got["predict_proba"][k:], want[k:], rtol=RTOL, atol=1e-300)
    # the decision values are a result too: v itself, then Neg
    model, got = _export(m, tmp_path, rows, ["decision_function", "predict_proba"])
    assert "Neg" in _ops(model)
    np.testing.assert_allclose(got["decision_function"], m.decision_function(rows),
                               rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got["predict_proba"][:k], want[:k], rtol=RTOL, atol=0)


def test_clip_keeps_nan(tmp_path):
    """MinMaxScaler(clip=True): NaN stays NaN through Max/Min, values past the fitted range
    are clipped; many rows so ONNX Runtime's vectorised loops and their tails both run."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 5))
    m = MinMaxScaler(clip=True).fit(X)
    rows = rng.normal(0, 3, size=(1003, 5))
    rows[rng.random(rows.shape) < 0.15] = np.nan
    rows[0] = [1e300, -1e300, -0.0, np.nan, 0.0]  # inf is rejected by MinMaxScaler
    model, got = _export(m, tmp_path, rows, ["transform"])
    assert "Max" in _ops(model) and "Min" in _ops(model) and "Where" not in _ops(model)
    want = m.transform(rows)
    np.testing.assert_array_equal(np.isnan(got["transform"]), np.isnan(want))
    np.testing.assert_allclose(got["transform"], want, rtol=RTOL, atol=ATOL)


def test_mlp_relu_and_gemm(tmp_path):
    """ReLU layers as Max, every dense layer one Gemm (bias as C), classifier and regressor."""
    X, y = make_classification(600, 8, n_informative=5, random_state=1)
    rows = np.random.default_rng(2).normal(0, 2, size=(500, 8))
    clf = MLPClassifier(hidden_layer_sizes=(32, 16), max_iter=200, random_state=0).fit(X, y)
    model, got = _export(clf, tmp_path, rows, ["predict", "predict_proba"])
    assert _ops(model).count("Gemm") == 3 and "MatMul" not in _ops(model)
    assert "Where" not in _ops(model)
    np.testing.assert_array_equal(got["predict"], clf.predict(rows))
    np.testing.assert_allclose(got["predict_proba"], clf.predict_proba(rows), rtol=RTOL,
                               atol=ATOL)
    reg = MLPRegressor(hidden_layer_sizes=(16,), max_iter=200, random_state=0).fit(X, X[:, 0] * 3)
    _, got = _export(reg, tmp_path, rows, ["predict"])
    np.testing.assert_allclose(got["predict"], reg.predict(rows), rtol=RTOL, atol=ATOL)


def test_constants_have_their_operands_rank(tmp_path):
    """Every constant a broadcasting op reads has the rank of the op's output (ONNX Runtime's
    slow broadcast loop otherwise), and nothing unused is left behind."""
    X, y = make_classification(400, 6, random_state=0)
    m = LogisticRegression().fit(X, y)
    rows = np.random.default_rng(0).normal(size=(50, 6))
    model, got = _export(m, tmp_path, rows, ["predict", "predict_proba"])
    inferred = onnx.shape_inference.infer_shapes(model).graph
    ranks = {v.name: len(v.type.tensor_type.shape.dim)
             for v in (*inferred.value_info, *inferred.output)}
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    checked = 0
    for n in model.graph.node:
        if n.op_type in BROADCASTING:
            for name in n.input:
                if name in consts:
                    assert consts[name].ndim == ranks[n.output[0]], (n.op_type, name)
                    checked += 1
    assert checked >= 3
    used = {i for n in model.graph.node for i in n.input}
    assert set(consts) <= used
    np.testing.assert_allclose(got["predict_proba"], m.predict_proba(rows), rtol=RTOL,
                               atol=ATOL)


def test_output_written_by_its_producer(tmp_path):
    """No output Cast to the type its input has: the producer writes the output; two outputs
    of one tensor (decision_function and a second method) still both come out."""
    X, y = make_classification(400, 6, random_state=0)
    m = SGDClassifier(random_state=0).fit(X, y)
    rows = np.random.default_rng(0).normal(size=(64, 6))
    model, got = _export(m, tmp_path, rows, ["decision_function"])
    assert "Cast" not in _ops(model)
    np.testing.assert_allclose(got["decision_function"], m.decision_function(rows),
                               rtol=RTOL, atol=ATOL)


def test_output_copies_pass_keeps_every_output():
    """drop_output_copies on a hand-made graph: one tensor read by two output Casts (the
    first is folded, the second reads the renamed output), a Cast of the graph input (kept)
    and a real conversion (kept)."""
    from onnx import TensorProto as T
    from onnx import helper

    from peregrine.export.onnx_tune import drop_output_copies

    def out(name, t):
        return helper.make_tensor_value_info(name, t, ["N", 2])

    nodes = [helper.make_node("Add", ["X", "X"], ["s"]),
             helper.make_node("Cast", ["s"], ["a"], to=T.DOUBLE),
             helper.make_node("Cast", ["s"], ["b"], to=T.DOUBLE),
             helper.make_node("Cast", ["X"], ["c"], to=T.DOUBLE),
             helper.make_node("Cast", ["s"], ["d"], to=T.FLOAT)]
    g = helper.make_graph(nodes, "g", [out("X", T.DOUBLE)],
                          [out("a", T.DOUBLE), out("b", T.DOUBLE), out("c", T.DOUBLE),
                           out("d", T.FLOAT)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    drop_output_copies(model)
    onnx.checker.check_model(model, full_check=True)
    assert [n.op_type for n in model.graph.node].count("Cast") == 3
    x = np.arange(6, dtype=np.float64).reshape(3, 2)
    a, b, c, d = session(model).run(None, {"X": x})
    for v in (a, b, d):
        np.testing.assert_array_equal(v, 2 * x)
    np.testing.assert_array_equal(c, x)


def test_l2_normalizer_edges(tmp_path):
    """Normalizer('l2') through ReduceL2: zero rows (divided by 1), rows whose squares
    underflow to a zero norm (likewise), huge rows whose squares overflow (norm inf: zeros),
    as scikit-learn."""
    from sklearn.preprocessing import Normalizer

    rng = np.random.default_rng(0)
    rows = rng.normal(size=(600, 7))
    rows[0] = 0.0
    rows[1] = 1e-200
    rows[2, :3] = [1e200, -1e200, 3.0]
    rows[3] = [5e-324, 0, 0, 0, 0, 0, -5e-324]
    m = Normalizer().fit(rows)
    model, got = _export(m, tmp_path, rows, ["transform"])
    assert "ReduceL2" in _ops(model)
    np.testing.assert_allclose(got["transform"], m.transform(rows), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got["transform"][:4], m.transform(rows)[:4], rtol=RTOL, atol=0)


def _rbf_rows(m, X, rng):
    """Rows equal to support vectors (distance 0), beside them, scaled away from them and
    far from them (every kernel value underflows), and huge ones (|x|^2 overflows)."""
    sv = m.support_vectors_
    huge = X[:5] * 1e150
    return np.concatenate([sv[:50], sv[:50] + 1e-9, sv[:50] * (1 + 1e-15),
                           X * 5.0, X + rng.normal(size=X.shape) * 40.0, huge])


def test_rbf_kernel_folded_into_the_dual_coefficients(tmp_path):
    """The rbf kernel read only by the dual coefficients' Gemm: exp(2 gamma x.v - gamma
    |x|^2) as ReduceSumSquare, Concat, MatMul and Exp, exp(-gamma |v|^2) folded into the
    coefficients (onnx_kernels._rbf_folded): SVC (binary and 3 classes), NuSVC, SVR and
    OneClassSVM against scikit-learn on support vectors, beside them, far from them and on
    huge rows, labels identical."""
    from sklearn.svm import SVC, SVR, NuSVC, OneClassSVM

    X, y = make_classification(300, 6, n_informative=4, n_redundant=0, n_classes=3,
                               random_state=0)
    rng = np.random.default_rng(0)
    models = [(SVC(gamma=0.5).fit(X, y), ["predict", "decision_function"]),
              (NuSVC(nu=0.3).fit(X, y), ["predict", "decision_function"]),
              (SVC().fit(X, y % 2), ["predict", "decision_function"]),
              (SVR(gamma=0.2).fit(X, X[:, 0] * 3.0 + y), ["predict"]),
              (OneClassSVM(gamma=0.1).fit(X), ["predict", "decision_function"])]
    for m, methods in models:
        rows = _rbf_rows(m, X, rng)
        model, got = _export(m, tmp_path, rows, methods)
        ops = _ops(model)
        # the kernel (0 where |x|^2 overflowed: IsInf, Where), then the coefficients' Gemm
        # (OneVsOne votes after it use Mul and Max)
        assert ops[:7] == ["ReduceSumSquare", "Concat", "MatMul", "Exp", "IsInf", "Where",
                           "Gemm"], (m, ops)
        want = m.predict(rows)
        if want.dtype.kind == "i":  # labels (SVR's predict is a value)
            np.testing.assert_array_equal(got["predict"], want)
        for method in methods:
            np.testing.assert_allclose(got[method], getattr(m, method)(rows), rtol=RTOL,
                                       atol=ATOL, err_msg=f"{m} {method}")


def test_rbf_kernel_distance_form_where_the_fold_could_overflow(tmp_path):
    """gamma |v|^2 above 700 (features far from 0 against a small gamma): exp(t) could
    overflow, so the kernel keeps the distance form (Gemm with |v|^2 as C, ReduceSumSquare,
    Add, the clamp as Max, Mul, Exp), as scikit-learn on rows at, beside and far from the
    support vectors."""
    from sklearn.svm import SVC

    X, y = make_classification(300, 6, n_informative=4, n_redundant=0, n_classes=3,
                               random_state=0)
    X = X + 1000.0
    m = SVC(gamma=0.5).fit(X, y)
    gamma_vv = 0.5 * np.einsum("ij,ij->i", m.support_vectors_, m.support_vectors_)
    assert gamma_vv.max() > 700
    rows = _rbf_rows(m, X, np.random.default_rng(0))[:-5]
    model, got = _export(m, tmp_path, rows, ["predict", "decision_function"])
    ops = _ops(model)
    assert "Max" in ops and "ReduceSumSquare" in ops and "Concat" not in ops
    np.testing.assert_array_equal(got["predict"], m.predict(rows))
    np.testing.assert_allclose(got["decision_function"], m.decision_function(rows),
                               rtol=RTOL, atol=ATOL)


def test_l1_normalizer_edge_rows(tmp_path):
    """Normalizer('l1'): zero rows (zero), huge rows, rows of small values and rows whose norm
    is below 10 eps but not 0 (scikit-learn returns them as they are: _handle_zeros_in_scale),
    as scikit-learn (rtol without atol on the edge rows). The one-node LpNormalization form
    divides those rows, so the file computes the norm and tests it (Normalize.tiny)."""
    from sklearn.preprocessing import Normalizer

    rng = np.random.default_rng(0)
    rows = rng.normal(size=(600, 7))
    rows[0] = 0.0
    rows[1] = -0.0
    rows[2] = 1e-10
    rows[3, :3] = [1e300, -1e300, 3.0]
    rows[4, :2] = [1e308, 1e308]  # the norm overflows: zeros, as scikit-learn's
    rows[5] = 1e-16
    rows[6, :2] = [1e-300, -2e-300]
    m = Normalizer(norm="l1").fit(rows)
    model, got = _export(m, tmp_path, rows, ["transform"])
    assert "LpNormalization" not in _ops(model)
    np.testing.assert_allclose(got["transform"], m.transform(rows), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got["transform"][:7], m.transform(rows)[:7], rtol=RTOL, atol=0)
