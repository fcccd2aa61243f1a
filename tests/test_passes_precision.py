"""The passes gated behind Precision.FAST (passes/fold_linear.py, passes/decisions.py) and their
measured error (passes/measure.py): off by default; on, every backend agrees with the exact
program within the conformance tolerance and labels stay the library's on realistic data; the
folded chains stay inside the rounding bound written in docs/exactness.md on random and
adversarial inputs; nothing reaching a tree is folded; the documented tie case; the error report
in explain() and in saved artifacts; the level round-trips and an unknown one is refused."""

from __future__ import annotations

import numpy as np
import pytest
import xgboost
from sklearn.datasets import make_classification, make_regression
from sklearn.decomposition import PCA
from sklearn.ensemble import GradientBoostingClassifier
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler, StandardScaler
from sklearn.svm import SVC

import peregrine
from peregrine import CompileOptions, Precision
from peregrine.backends import available_backends
from peregrine.ir import Graph, Link, Node, Op
from peregrine.ir.semantics import evaluate
from peregrine.passes import GATED, PIPELINE, run_passes
from peregrine.passes.decisions import drop_monotone_decisions
from peregrine.passes.fold_linear import MAX_SHIFT_RATIO, fold_linear

BACKENDS = ["reference", "torch", "torchscript", "native"]
FAST = CompileOptions(precision="fast")
U, U32 = 2.0 ** -53, 2.0 ** -24


def gamma(c: int) -> float:
    return c * U / (1 - c * U)


def _data(n=4000, d=40, classes=3, seed=0, shift=0.0):
    X, y = make_classification(n, d, n_informative=min(12, d // 2), n_classes=classes,
                               random_state=seed)
    return X * 3.0 + shift, y


def _pca_logreg(classes=3):
    X, y = _data(classes=classes, shift=50.0)
    model = make_pipeline(StandardScaler(), PCA(10, random_state=0),
                          LogisticRegression(max_iter=1000)).fit(X, y)
    return model, X


def _ops(compiled):
    """The ops the methods compute (a guard output keeps a node the runtime alone evaluates:
    runtime/guards.py)."""
    g = compiled.spec.graph
    need = g.needed(g.outputs[m.output] for m in compiled.spec.methods.values())
    return [n.op for n in g.nodes if n.name in need]


def _report(compiled):
    return {p["pass"]: p for p in compiled.explain_dict()["passes"]}


# ----------------------------------------------------------------------------- the level --

def test_gated_passes_are_off_by_default_and_say_so():
    model, X = _pca_logreg()
    exact = peregrine.compile(model, "reference")
    report = _report(exact)
    for name in GATED:
        assert report[name]["changed"].startswith("off")
    assert "measured_error" not in report
    assert Op.CENTER_SCALE in _ops(exact) and sum(op is Op.LINEAR for op in _ops(exact)) == 2
    assert {p.name for p in PIPELINE if p.gated} == {"fold_linear", "drop_monotone_decisions"}


def test_unknown_level_is_refused_and_every_level_round_trips():
    with pytest.raises(ValueError, match="auto, float32, float64, fast"):
        CompileOptions(precision="fastest")
    with pytest.raises(ValueError, match="must be a Precision"):
        CompileOptions(precision=3)
    for level in Precision:
        opts = CompileOptions(precision=level.value)
        assert CompileOptions.from_json(opts.to_json()) == opts
    data = CompileOptions().to_json()
    data["precision"] = "float8"  # an artifact from a future version
    with pytest.raises(ValueError, match="precision"):
        CompileOptions.from_json(data)


def test_fast_artifact_round_trips_with_its_error_report(tmp_path):
    model, X = _pca_logreg()
    fast = peregrine.compile(model, "native", options=FAST, sample_input=X[:200])
    path = tmp_path / "fast.peregrine"
    fast.save(path)
    loaded = peregrine.load(path)
    assert loaded.options.precision is Precision.FAST
    assert loaded.explain_dict()["passes"] == fast.explain_dict()["passes"]
    assert "measured_error" in loaded.explain()
    np.testing.assert_array_equal(loaded.predict_proba(X), fast.predict_proba(X))
    assert Op.CENTER_SCALE not in _ops(loaded)  # the folded graph is what was saved
    # and an exact artifact still loads as the exact level
    exact = peregrine.compile(model, "reference")
    exact.save(tmp_path / "exact.peregrine")
    assert peregrine.load(tmp_path / "exact.peregrine").options.precision is Precision.AUTO


# --------------------------------------------------------- agreement on every backend --

@pytest.mark.parametrize("backend", BACKENDS)
def test_folded_pipeline_agrees_on_every_backend(backend):
    model, X = _pca_logreg()
    rows = np.vstack([X, _data(n=20000, seed=1, shift=50.0)[0]])
    exact = peregrine.compile(model, backend)
    fast = peregrine.compile(model, backend, options=FAST)
    assert Op.CENTER_SCALE not in _ops(fast) and sum(op is Op.LINEAR for op in _ops(fast)) == 1
    for method in ("decision_function", "predict_proba", "predict_log_proba"):
        a, b = getattr(fast, method)(rows), getattr(exact, method)(rows)
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(a, getattr(model, method)(rows), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(fast.predict(rows), model.predict(rows))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("backend", BACKENDS)
def test_dropped_softmax_and_sigmoid_keep_mlp_labels_on_every_backend(backend):
    for classes in (2, 3):
        X, y = _data(n=3000, d=12, classes=classes, seed=classes)
        model = make_pipeline(StandardScaler(), MLPClassifier((16,), max_iter=300,
                                                              random_state=0)).fit(X, y)
        rows = _data(n=30000, d=12, classes=classes, seed=10 + classes)[0]
        fast = peregrine.compile(model, backend, options=FAST)
        report = _report(fast)
        assert "raw scores" in report["drop_monotone_decisions"]["changed"]
        assert "folded" in report["fold_linear"]["changed"]  # the scaler into the first layer
        np.testing.assert_array_equal(fast.predict(rows), model.predict(rows))
        np.testing.assert_allclose(fast.predict_proba(rows), model.predict_proba(rows),
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["reference", "native"])
def test_labels_of_boosters_and_affine_folds_match_the_library(backend):
    import lightgbm

    X, y = _data(n=3000, d=10, classes=2, seed=4)
    rows = _data(n=40000, d=10, classes=2, seed=5)[0]
    cases = [
        xgboost.XGBClassifier(n_estimators=30, max_depth=3).fit(X, y),  # THRESHOLD(sigmoid32)
        lightgbm.LGBMClassifier(n_estimators=30, verbose=-1).fit(X, y),  # ARGMAX(BINARY_PROBA)
        make_pipeline(MinMaxScaler(), LogisticRegression()).fit(X, y),  # AFFINE -> LINEAR
    ]
    X3, y3 = _data(n=3000, d=10, classes=3, seed=6)
    cases.append(xgboost.XGBClassifier(n_estimators=20, max_depth=3).fit(X3, y3))  # softmax32
    for model in cases:
        fast = peregrine.compile(model, backend, options=FAST)
        changed = {n: p["changed"] for n, p in _report(fast).items()}
        assert changed["drop_monotone_decisions"] != "nothing" or "folded" in changed[
            "fold_linear"], (type(model).__name__, changed)
        np.testing.assert_array_equal(fast.predict(rows), model.predict(rows))
        np.testing.assert_allclose(fast.predict_proba(rows), model.predict_proba(rows),
                                   rtol=1e-5, atol=1e-6)


def test_nothing_reaching_a_tree_or_a_binarizer_is_folded():
    X, y = _data(n=2000, d=20, classes=2, seed=7, shift=10.0)
    for head in (GradientBoostingClassifier(n_estimators=10, max_depth=3, random_state=0),
                 xgboost.XGBClassifier(n_estimators=10, max_depth=3)):
        model = make_pipeline(StandardScaler(), PCA(8, random_state=0), head).fit(X, y)
        exact = peregrine.compile(model, "reference")
        fast = peregrine.compile(model, "reference", options=FAST)
        assert _report(fast)["fold_linear"]["changed"] == "nothing"
        np.testing.assert_array_equal(fast.predict_proba(X), exact.predict_proba(X))
        np.testing.assert_array_equal(fast.predict(X), model.predict(X))
    # SVC's one-vs-one votes binarize the pairwise decisions: the scaler stays in front
    X3, y3 = _data(n=600, d=8, classes=3, seed=8, shift=10.0)
    model = make_pipeline(StandardScaler(), SVC(kernel="linear")).fit(X3, y3)
    fast = peregrine.compile(model, "reference", options=FAST)
    assert _report(fast)["fold_linear"]["changed"] == "nothing"
    assert Op.CENTER_SCALE in _ops(fast)
    np.testing.assert_array_equal(fast.predict(X3), model.predict(X3))


# ------------------------------------------------------------------- the rounding bound --

def _chain_graph(kind: str, n: int, m: int, k: int, rng, big_shift: float = 1.0):
    """INPUT -> [CENTER_SCALE | AFFINE] -> LINEAR (n -> m) [-> LINEAR (m -> k)] -> output."""
    nodes = [Node("X", Op.INPUT, (), {}, "float64", n)]
    src = "X"
    pre = {}
    if kind in ("cs", "cs2"):
        scale = rng.uniform(0.05, 4.0, n)
        pre = {"center": rng.normal(size=n) * big_shift * scale, "scale": scale}
        nodes.append(Node("pre", Op.CENTER_SCALE, (src,), dict(pre, float32="cast"),
                          "float64", n))
        src = "pre"
    elif kind == "affine":
        a = rng.uniform(0.01, 3.0, n) * rng.choice([-1, 1], n)
        pre = {"scale": a, "shift": rng.normal(size=n) * big_shift}
        nodes.append(Node("pre", Op.AFFINE, (src,), dict(pre, float32="cast"), "float64", n))
        src = "pre"
    # weights over 16 orders of magnitude, both signs: sums that cancel
    w1 = rng.normal(size=(n, m)) * 10.0 ** rng.uniform(-8, 8, (n, m))
    b1 = rng.normal(size=m) * 1e3
    nodes.append(Node("lin1", Op.LINEAR, (src,), {"weight": w1, "bias": b1}, "float64", m))
    layers = [(w1, b1)]
    out = "lin1"
    if kind in ("linlin", "cs2"):
        w2 = rng.normal(size=(m, k))
        b2 = rng.normal(size=k)
        nodes.append(Node("lin2", Op.LINEAR, ("lin1",), {"weight": w2, "bias": b2},
                          "float64", k))
        layers.append((w2, b2))
        out = "lin2"
    return Graph(tuple(nodes), {"scores": out}), pre, layers


def _bound(kind, x, pre, layers, f32: bool):
    """Per row and output: gamma_c * S (docs/exactness.md, 'Folded linear chains')."""
    ax = np.abs(x.astype(np.float64))
    (w1, b1) = layers[0]
    n, m = w1.shape
    if kind in ("cs", "cs2"):
        terms = (ax + np.abs(pre["center"])) / pre["scale"]  # (|x| + |c|) / s per input
    elif kind == "affine":
        terms = ax * np.abs(pre["scale"]) + np.abs(pre["shift"])
    else:
        terms = ax
    if kind in ("cs", "affine"):
        S = terms @ np.abs(w1) + np.abs(b1)
        c = 3 * n + 7
    elif kind == "linlin":
        w2, b2 = layers[1]
        S = terms @ (np.abs(w1) @ np.abs(w2)) + np.abs(b1) @ np.abs(w2) + np.abs(b2)
        c = 2 * n + 2 * m + 4
    else:  # cs2: the scaler folded into lin1, then lin1 into lin2
        w2, b2 = layers[1]
        S = terms @ (np.abs(w1) @ np.abs(w2)) + np.abs(b1) @ np.abs(w2) + np.abs(b2)
        c = 3 * n + 3 * m + 10
    return (gamma(c) + (4.01 * U32 if f32 else 0.0)) * S


def _inputs(kind, pre, n, rng):
    """Random rows, plus adversarial ones: at the scaler's center (the chain subtracts exactly,
    the folded sum cancels), huge, tiny, and +-0."""
    rows = [rng.normal(size=(200, n)) * 10.0 ** rng.uniform(-3, 3, (200, n))]
    if kind in ("cs", "cs2"):
        c, s = pre["center"], pre["scale"]
        rows.append(c + s * rng.normal(size=(200, n)) * 1e-6)
        rows.append(c + s * rng.normal(size=(200, n)))
    if kind == "affine":
        rows.append(-pre["shift"] / pre["scale"] * (1 + rng.normal(size=(200, n)) * 1e-9))
    rows.append(rng.normal(size=(50, n)) * 1e12)
    rows.append(rng.normal(size=(50, n)) * 1e-12)
    rows.append(np.zeros((2, n)) * np.array([[1.0], [-1.0]]))
    return np.vstack(rows)


@pytest.mark.parametrize("kind", ["cs", "affine", "linlin", "cs2"])
@pytest.mark.parametrize("big_shift", [1.0, 1e5])
def test_folded_chains_stay_within_the_written_bound(kind, big_shift):
    rng = np.random.default_rng(["cs", "affine", "linlin", "cs2"].index(kind) + int(big_shift))
    worst = 0.0
    for _trial in range(4):
        n, m = (int(v) for v in rng.integers(2, 60, 2))
        k = int(rng.integers(1, m + 1))  # no bottleneck: the fold does not grow the product
        graph, pre, layers = _chain_graph(kind, n, m, k, rng, big_shift)
        folded, changed = fold_linear(graph)
        assert "folded" in changed, changed
        assert [nd.op for nd in folded.nodes] == [Op.INPUT, Op.LINEAR]
        x = _inputs(kind, pre, n, rng)
        for f32 in (False, True):
            xi = x.astype(np.float32) if f32 else x
            want = evaluate(graph, xi, ("scores",))["scores"]
            got = evaluate(folded, xi, ("scores",))["scores"]
            bound = _bound(kind, xi, pre, layers, f32 and kind in ("cs", "cs2", "affine"))
            err = np.abs(got - want)
            assert np.all(err <= bound), (kind, f32, float(np.max(err / bound)))
            worst = max(worst, float(np.max(err / np.where(bound > 0, bound, 1))))
    assert worst < 1.0


def test_a_shift_far_beyond_the_scale_is_not_folded():
    rng = np.random.default_rng(0)
    graph, pre, _ = _chain_graph("cs", 5, 3, 1, rng)
    center = np.asarray(pre["center"]).copy()
    center[2] = pre["scale"][2] * MAX_SHIFT_RATIO * 4
    nodes = tuple(nd.with_attrs(center=center) if nd.op is Op.CENTER_SCALE else nd
                  for nd in graph.nodes)
    assert fold_linear(Graph(nodes, dict(graph.outputs)))[1] == ""


def test_a_bottleneck_is_not_folded():
    # 100 -> 2 -> 100: the folded 100 x 100 product would cost 25x the chain
    rng = np.random.default_rng(1)
    nodes = (Node("X", Op.INPUT, (), {}, "float64", 100),
             Node("a", Op.LINEAR, ("X",), {"weight": rng.normal(size=(100, 2)),
                                           "bias": np.zeros(2)}, "float64", 2),
             Node("b", Op.LINEAR, ("a",), {"weight": rng.normal(size=(2, 100)),
                                           "bias": np.zeros(100)}, "float64", 100))
    assert fold_linear(Graph(nodes, {"transform": "b"}))[1] == ""


# -------------------------------------------------------------------- the tie case --

def _decision_graph(link: Link, decision: Op, width: int, **link_attrs):
    d_attrs = {"value": 0.5} if decision is Op.THRESHOLD else {}
    return Graph((Node("X", Op.INPUT, (), {}, "float64", width),
                  Node("p", Op.LINK, ("X",), dict(kind=link, **link_attrs), "float64", width),
                  Node("d", decision, ("p",), d_attrs, "int64", 1)),
                 {"predict": "d", "predict_proba": "p"})


def test_labels_differ_only_on_ties_after_rounding():
    # the documented case: the rounded map merges scores that differ in their last bits
    g = _decision_graph(Link.SIGMOID, Op.THRESHOLD, 1)
    fast, changed = drop_monotone_decisions(g)
    assert "skips sigmoid" in changed
    margins = np.array([[1e-300], [2.0 ** -60], [2.0 ** -40], [1e-3], [0.0], [-0.0], [-1e-300]])
    exact = evaluate(g, margins, ("predict",))["predict"].ravel()
    quick = evaluate(fast, margins, ("predict",))["predict"].ravel()
    # sigmoid(x) rounds to 0.5 for 0 < x <= ~2**-53: "not above 0.5" there, x > 0 says 1
    np.testing.assert_array_equal(exact, [0, 0, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(quick, [1, 1, 1, 1, 0, 0, 0])
    # XGBoost's float32 sigmoid rounds to 0.5 up to 2**-24
    g = _decision_graph(Link.SIGMOID, Op.THRESHOLD, 1, float32=True)
    fast, _ = drop_monotone_decisions(g)
    margins = np.array([[2.0 ** -24], [2.0 ** -23], [0.0]], np.float32)
    np.testing.assert_array_equal(evaluate(g, margins, ("predict",))["predict"].ravel(), [0, 1, 0])
    np.testing.assert_array_equal(evaluate(fast, margins, ("predict",))["predict"].ravel(),
                                  [1, 1, 0])

    g = _decision_graph(Link.SOFTMAX, Op.ARGMAX, 3)
    fast, _ = drop_monotone_decisions(g)
    scores = np.array([[0.0, 1e-17, -1.0], [0.0, 1e-3, -1.0], [5.0, 1.0, 5.0 + 2 ** -48]])
    exact = evaluate(g, scores, ("predict",))["predict"].ravel()
    quick = evaluate(fast, scores, ("predict",))["predict"].ravel()
    np.testing.assert_array_equal(exact, [0, 1, 2])  # exp(-1e-17) rounds to 1: a tie, first
    np.testing.assert_array_equal(quick, [1, 1, 2])
    # away from ties (random scores) the labels agree
    rng = np.random.default_rng(2)
    scores = rng.normal(size=(20000, 3)) * 10
    np.testing.assert_array_equal(evaluate(fast, scores, ("predict",))["predict"],
                                  evaluate(g, scores, ("predict",))["predict"])


def test_argmax_of_binary_proba_is_a_threshold_bit_for_bit():
    g = Graph((Node("X", Op.INPUT, (), {}, "float64", 1),
               Node("bp", Op.BINARY_PROBA, ("X",), {}, "float64", 2),
               Node("d", Op.ARGMAX, ("bp",), {}, "int64", 1)), {"predict": "d"})
    fast, _ = drop_monotone_decisions(g)
    assert [n.op for n in fast.nodes] == [Op.INPUT, Op.THRESHOLD]
    p = np.array([0.0, 0.25, 0.5 - 2 ** -54, 0.5, 0.5 + 2 ** -53, 0.75, 1.0, 2.0, 3.0, -1.0,
                  np.nan, np.inf, -np.inf, 1e300, -0.0])[:, None]
    with np.errstate(over="ignore"):  # 1e300 -> inf in float32
        p32 = p.astype(np.float32)
    for x in (p, p32):
        np.testing.assert_array_equal(evaluate(fast, x, ("predict",))["predict"],
                                      evaluate(g, x, ("predict",))["predict"])


# ----------------------------------------------------------------- the error report --

def test_the_error_report_measures_the_two_graphs():
    model, X = _pca_logreg()
    sample = X[:300]
    fast = peregrine.compile(model, "reference", options=FAST, sample_input=sample)
    entry = _report(fast)["measured_error"]
    assert entry["rows_from"] == "sample_input" and entry["rows"] == 300
    assert "measured_error: against the exact graph on 300 sample_input rows" in fast.explain()
    exact = peregrine.compile(model, "reference")
    for method in ("decision_function", "predict_proba"):
        diff = np.abs(getattr(fast, method)(sample) - getattr(exact, method)(sample))
        assert entry["errors"][method]["max_abs"] == pytest.approx(float(diff.max()), abs=1e-300)
        assert 0 < entry["errors"][method]["max_abs"] < 1e-9
    assert entry["errors"]["predict"] == {"labels_changed": 0}
    # no sample: synthetic rows around the scaler's statistics
    synthetic = _report(peregrine.compile(model, "reference", options=FAST))["measured_error"]
    assert synthetic["rows_from"] == "synthetic" and synthetic["rows"] == 256
    assert synthetic["errors"]["predict_proba"]["max_rel"] < 1e-9


def test_no_report_where_no_gated_pass_changed_anything():
    X, y = make_regression(300, 6, random_state=0)
    model = LinearRegression().fit(X, y)  # one LINEAR reading the input: nothing to fold
    fast = peregrine.compile(model, "reference", options=FAST)
    assert "measured_error" not in _report(fast)
    assert _report(fast)["fold_linear"]["changed"] == "nothing"


def test_run_passes_without_the_level_keeps_every_bit():
    model, X = _pca_logreg()
    from peregrine.frontends import convert

    graph = convert(model).graph
    out = run_passes(graph, CompileOptions(precision="auto"))
    outs = tuple(graph.outputs)
    for a, b in zip(evaluate(out, X, outs).values(), evaluate(graph, X, outs).values()):
        np.testing.assert_array_equal(a, b)


def test_every_monotone_map_before_an_argmax_is_skipped():
    rng = np.random.default_rng(3)
    scores = rng.normal(size=(5000, 4)) * 5
    for link, attrs in ((Link.SOFTMAX, {}), (Link.LOG_SOFTMAX, {}), (Link.EXP, {}),
                        (Link.SIGMOID, {"scale": 2.0})):
        g = _decision_graph(link, Op.ARGMAX, 4, **attrs)
        fast, changed = drop_monotone_decisions(g)
        assert "skips" in changed and [n.op for n in fast.steps(["d"])] == [Op.ARGMAX]
        np.testing.assert_array_equal(evaluate(fast, scores, ("predict",))["predict"],
                                      evaluate(g, scores, ("predict",))["predict"])
    # a sigmoid with a negative scale reverses the order: kept
    assert drop_monotone_decisions(_decision_graph(Link.SIGMOID, Op.ARGMAX, 4,
                                                   scale=-1.0))[1] == ""
    for norm in ("l1", "l2", "max"):
        g = Graph((Node("X", Op.INPUT, (), {}, "float64", 4),
                   Node("p", Op.NORMALIZE, ("X",), {"norm": norm}, "float64", 4),
                   Node("d", Op.ARGMAX, ("p",), {}, "int64", 1)), {"predict": "d"})
        fast, changed = drop_monotone_decisions(g)
        assert "skips normalize" in changed
        rows = np.vstack([scores, np.zeros((1, 4))])  # a zero row: label 0 either way
        np.testing.assert_array_equal(evaluate(fast, rows, ("predict",))["predict"],
                                      evaluate(g, rows, ("predict",))["predict"])


def test_a_threshold_other_than_one_half_moves_to_the_margin():
    g = _decision_graph(Link.SIGMOID, Op.THRESHOLD, 1, scale=1.5)
    g = Graph(tuple(n.with_attrs(value=0.3) if n.op is Op.THRESHOLD else n for n in g.nodes),
              dict(g.outputs))
    fast, _ = drop_monotone_decisions(g)
    t = fast.node("d").attrs.value
    assert t == pytest.approx(np.log(0.3 / 0.7) / 1.5)
    margins = np.linspace(-3, 3, 20001)[:, None]
    margins = margins[np.abs(margins[:, 0] - t) > 1e-12]  # rows off the tie
    np.testing.assert_array_equal(evaluate(fast, margins, ("predict",))["predict"],
                                  evaluate(g, margins, ("predict",))["predict"])
    # a decision that feeds further computation is not touched
    h = Graph(g.nodes + (Node("e", Op.AFFINE, ("d",), {"scale": 2.0}, "float64", 1),),
              {"predict": "d", "other": "e"})
    assert drop_monotone_decisions(h)[1] == ""


# ------------------------------------------------- the conformance cases the level changes --

def _conformance_cases():
    from tests.conformance.test_conformance import CASES

    return [pytest.param(c, id=c.id, marks=(*c.marks, pytest.mark.slow)) for c in CASES]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("case", _conformance_cases())
def test_conformance_cases_hold_at_the_fast_level(case):
    """Every conformance case the gated passes change still matches its library (scores within
    rtol 1e-5 / atol 1e-6, labels identical) on the suite's rows with NaN, +-inf and threshold
    edges, float64 and float32, on every in-process backend (47 of 323 cases change on 2026-11-29)."""
    from peregrine.frontends import convert
    from tests.conformance.rows import edge_rows
    from tests.conformance.test_conformance import assert_same

    model, X = case.built
    spec = convert(model)
    report: list = []
    run_passes(spec.graph, FAST, report)
    if all(p["changed"] == "nothing" for p in report if p["pass"] in GATED):
        pytest.skip("the gated passes change nothing here")
    rows = edge_rows(spec, X, case.categorical, category_values=case.category_values)
    for backend in available_backends():
        compiled = peregrine.compile(model, backend, options=FAST)
        for dtype in ("float64", "float32"):
            Xd = rows.astype(dtype)
            for method in compiled.methods:
                assert_same(method, getattr(compiled, method)(Xd), case.expected(method, Xd),
                            f"{case.id} fast {backend} {dtype} {method}")
