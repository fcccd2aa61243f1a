"""ONNX Runtime on Peregrine's ONNX export against ONNX Runtime on skl2onnx / onnxmltools's
conversion of the same model, at 100K rows and at one row (a loop of single-row calls):

- ``trees``: the three tree models of ``bench_trees.py`` (XGBoost 500x8, LightGBM 500 trees of
  256 leaves, RandomForest 100x8), the peer being ``peregrine.bench.builtin_peers.
  OnnxRuntimePeer`` (onnxmltools for XGBoost/LightGBM, skl2onnx for scikit-learn);
- ``pipelines``: the operator table of ``bench_pipelines.py`` (linear models, naive Bayes, an
  MLP, featurizers, kernel SVMs; its ColumnTransformer rows read string columns, which the
  export takes as string inputs there: ``string_inputs=True``), the peer being its skl2onnx
  conversion.

Both sessions: CPU execution provider, ``--threads`` intra-op threads, one inter-op thread.
Each side gets the input its file declares, made from the same float32 rows (Peregrine's
export: float64 by default, float32 with ``--input-dtype float32`` where the model allows it;
the converters: float32). Timings: the best of ``--repeat`` runs for the batch, the best of
``--repeat`` loops of ``--one-row-calls`` calls for one row, the two systems interleaved so
that load on a shared machine hits both; the ratio is the peer's time over the export's (> 1:
the export is faster). Also reports each side's largest difference from the library.

    .venv/bin/python benchmarks/bench_export.py [--sections trees,pipelines] [--threads N]
        [--precision float32] [--operators LogisticRegression,MLPClassifier]
    .venv/bin/python benchmarks/bench_export.py --sections lr-forms --threads 1 --clock thread

``one-hot``: bench_pipelines.py's ``--one-hot`` pipeline (a linear model over 1,000 one-hot
columns of 20 string columns), string inputs on both sides (docs/export.md, "One-hot columns
into a linear model").
``linear``: a 3-class LogisticRegression, RidgeClassifier, LinearRegression and Ridge (with
``--precision float32``: the float32 level's linear forms, docs/export.md).
``rf-forms``: bench_trees' two-class RandomForest(100, depth 8) exported in the forms the
export chooses between (one class + ``1 - p`` for predict_proba alone, the two-target vector
form where predict is exported too), each also with ONNX Runtime's missing-value tracks
instead of the negated columns, against skl2onnx's file (docs/export.md, "RandomForest at
100K rows").
``lr-forms``: the candidate double forms of a binary LogisticRegression's probabilities
(docs/export.md, "LogisticRegression at one row") against skl2onnx's file; with
``--precision float32`` the float32 level's candidates (its former exp form, Gemm + Sigmoid,
a LinearClassifier node like skl2onnx's).

This is a script, not a test; figures go to docs/export.md with the CPU from lscpu.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_trees import make_data, train  # noqa: E402


def cpu() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        name = next(line.split(":", 1)[1].strip() for line in out.splitlines()
                    if line.startswith("Model name"))
    except (OSError, StopIteration):
        name = platform.processor()
    return f"{name}, {os.cpu_count()} CPUs"


# the clock timings read: wall time, or (``--clock thread``, with ``--threads 1``: ONNX Runtime
# then runs every op on the calling thread) this thread's CPU time, which a loaded machine's
# other processes do not inflate
CLOCK = time.perf_counter


def batch_time(fn, X) -> float:
    t = CLOCK()
    fn(X)
    return CLOCK() - t


def one_row_time(fn, X, calls: int) -> float:
    t = CLOCK()
    for i in range(calls):
        fn(X[i:i + 1])
    return (CLOCK() - t) / calls


def compare(systems: dict, inputs: dict, repeat: int, calls: int) -> dict:
    """{system: (best batch s, best one-row s)}, the systems interleaved run by run."""
    for name, fn in systems.items():  # warm-up
        fn(inputs[name])
        fn(inputs[name][:1])
    best = {name: [np.inf, np.inf] for name in systems}
    for _ in range(repeat):
        for name, fn in systems.items():
            best[name][0] = min(best[name][0], batch_time(fn, inputs[name]))
            best[name][1] = min(best[name][1], one_row_time(fn, inputs[name], calls))
    return {k: tuple(v) for k, v in best.items()}


def export_session(model, method: str, input_dtype, threads: int, sample,
                   precision: str = "auto", ml_ops: str = "auto"):
    """Peregrine's export of ``model`` (compiled with the reference backend; the export lowers
    the IR whichever backend compiled it) as an ONNX Runtime callable for ``method``, and
    the seconds the export took (lowering, checker, validation)."""
    import onnxruntime as ort

    import peregrine
    from peregrine.export import export_onnx

    compiled = peregrine.compile(model, backend="reference")
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    methods = [method] if isinstance(method, str) else list(method)  # the last one is timed
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.onnx")
        t = time.perf_counter()
        report = export_onnx(compiled, path, methods=methods, sample=sample,
                             input_dtype=input_dtype, precision=precision, ml_ops=ml_ops)
        took = time.perf_counter() - t
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    out = report.methods[methods[-1]]
    dtype = np.dtype(report.inputs["X"][0])
    return (lambda A: sess.run([out], {"X": A})[0]), dtype, took


def max_diff(got, want) -> float:
    got = np.asarray(got, np.float64)
    if got.ndim == 2 and np.ndim(want) == 1 and got.shape[1] == 2:
        got = got[:, 1]  # skl2onnx's binary decision_function: [-score, score]
    got = got.reshape(np.shape(want))
    return float(np.max(np.abs(got - np.asarray(want, np.float64))))


def row(name, res, ours, peer, diff_ours, diff_peer, took) -> str:
    (b0, o0), (b1, o1) = res[ours], res[peer]
    return (f"| {name} | {b0:.4f} | {b1:.4f} | **{b1 / b0:.2f}x** | {o0 * 1e6:.1f} | "
            f"{o1 * 1e6:.1f} | **{o1 / o0:.2f}x** | {diff_ours:.1g} | {diff_peer:.1g} | "
            f"{took:.1f} |")


HEADER = ("| model | export 100K rows (s) | peer 100K (s) | ratio | export 1 row (us) | "
          "peer 1 row (us) | ratio | export max diff | peer max diff | export + validate (s) |"
          "\n|---|---|---|---|---|---|---|---|---|---|")


def bench_trees(args) -> None:
    from peregrine.bench.builtin_peers import OnnxRuntimePeer

    X, y = make_data(args.train_rows)
    Xb, _ = make_data(args.rows, seed=1)
    print(f"\n### Trees (trained on {args.train_rows} rows, `predict_proba`)\n\n{HEADER}")
    for name in args.models.split(","):
        model = train(name, X, y, args.threads)
        want = model.predict_proba(Xb)
        peer = OnnxRuntimePeer().prepare(model, Xb.shape[1], threads=args.threads)
        ours, dtype, took = export_session(model, "predict_proba", args.input_dtype,
                                           args.threads, Xb[:2000], args.precision,
                                           args.ml_ops)
        inputs = {"export": Xb.astype(dtype), "peer": Xb}
        res = compare({"export": ours, "peer": peer}, inputs, args.repeat, args.one_row_calls)
        print(row(name, res, "export", "peer", max_diff(ours(inputs["export"]), want),
                  max_diff(peer(Xb), want), took), flush=True)


def bench_pipelines(args) -> None:
    import bench_pipelines as bp

    bp.THREADS = str(args.threads)  # the peer's intra-op threads, as the export's
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        models, X = bp._models(args.train_rows)
    rng = np.random.default_rng(1)
    Xb = X[rng.integers(0, len(X), args.rows)]
    print(f"\n### Pipeline operators (bench_pipelines.py's table)\n\n{HEADER}")
    wanted = set(args.operators.split(",")) if args.operators else None
    for name, model, method, kind in models:
        if wanted is not None and name not in wanted:
            continue
        if kind == "frame":
            # both files take the strings: the export with string_inputs=True
            bench_frame(args, name, model, method)
            continue
        want = getattr(model, method)(Xb)
        peer = bp._onnx(model, method, kind, Xb)
        try:
            ours, dtype, took = export_session(model, method, args.input_dtype, args.threads,
                                               Xb[:2000], args.precision)
        except Exception as exc:  # noqa: BLE001 - the table says why a row has no export
            print(f"| {name} | not exported: {type(exc).__name__}: {str(exc)[:80]} "
                  "| | | | | | | | |", flush=True)
            continue
        inputs = {"export": Xb.astype(dtype), "peer": Xb}
        res = compare({"export": ours, "peer": peer}, inputs, args.repeat, args.one_row_calls)
        print(row(f"{name} `{method}`", res, "export", "peer",
                  max_diff(ours(inputs["export"]), want), max_diff(peer(Xb), want), took),
              flush=True)


class Feed(dict):
    """Input name -> array; slicing slices every array (the one-row loop's ``X[i:i + 1]``)."""

    def __getitem__(self, key):
        if isinstance(key, slice):
            return Feed({k: v[key] for k, v in self.items()})
        return dict.__getitem__(self, key)


def bench_frame(args, name, model, method, df=None, num=None, cat=None) -> None:
    """A ColumnTransformer row of the table: string and number columns (``df``, ``num``,
    ``cat``: bench_pipelines' frame by default). skl2onnx's file takes one input per column
    (float32 numbers, strings); the export, with string_inputs=True, ``X`` (the numbers,
    double) and one string input per string column. The feeds are made before timing, so
    only ``run`` is timed on both sides."""
    import bench_pipelines as bp
    import onnxruntime as ort
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType

    import peregrine
    from peregrine.export import export_onnx

    if df is None:
        df, num, cat = bp._frame(args.rows, 1), bp.NUM, bp.CAT
    want = getattr(model, method)(df)
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    types = [(c, FloatTensorType([None, 1])) for c in num]
    types += [(c, StringTensorType([None, 1])) for c in cat]
    onx = to_onnx(model, initial_types=types, options={"zipmap": False})
    peer_sess = ort.InferenceSession(onx.SerializeToString(), so,
                                     providers=["CPUExecutionProvider"])
    peer_out = peer_sess.get_outputs()[-1].name
    strings = {c: np.asarray([v if isinstance(v, str) else "" for v in df[c]],
                             dtype=object).reshape(-1, 1) for c in cat}
    peer_feed = Feed({c: df[c].to_numpy(np.float32).reshape(-1, 1) for c in num} | strings)
    compiled = peregrine.compile(model, backend="reference")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.onnx")
        t = time.perf_counter()
        report = export_onnx(compiled, path, methods=[method], sample=df.iloc[:2000],
                             string_inputs=True, precision=args.precision)
        took = time.perf_counter() - t
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    out = report.methods[method]
    our_feed = Feed({"X": df[num].to_numpy(np.dtype(report.inputs["X"][0]))} | strings)
    systems = {"export": lambda F: sess.run([out], F)[0],
               "peer": lambda F: peer_sess.run([peer_out], F)[0]}
    res = compare(systems, {"export": our_feed, "peer": peer_feed}, args.repeat,
                  args.one_row_calls)
    print(row(f"{name} `{method}` (string inputs)", res, "export", "peer",
              max_diff(systems["export"](our_feed), want),
              max_diff(systems["peer"](peer_feed), want), took), flush=True)


def bench_one_hot(args) -> None:
    """bench_pipelines.py's ``--one-hot`` case (20 string columns x 50 categories + 20
    numbers -> LogisticRegression) at ``--rows`` rows, string inputs on both sides."""
    import bench_pipelines as bp

    model, df, cat, num = bp.one_hot_model(args.rows)
    print(f"\n### One-hot columns into a linear model\n\n{HEADER}")
    bench_frame(args, "CT(OneHotEncoder 20 x 50 + StandardScaler 20) -> LogisticRegression",
                model, "predict_proba", df, num, cat)


def _lr_form(w: np.ndarray, b: float, form: str, float32: bool = False):
    """A binary logistic regression's ``predict_proba`` ([1 - p, p], double, or float32 with
    ``float32``: the float32 level's candidates) as one of the candidate ONNX forms measured
    for docs/export.md (``--sections lr-forms``)."""
    from onnx import TensorProto, helper, numpy_helper

    d = len(w)
    one = numpy_helper.from_array(np.ones((1, 1)), "one")
    col = np.stack

    def gemm(wm, c):
        return ([helper.make_node("Gemm", ["X", "W", "C"], ["z"])],
                [numpy_helper.from_array(wm, "W"), numpy_helper.from_array(c, "C")])

    if form == "gemm-only (floor)":
        nodes, inits = gemm(col([-w, w], 1), np.asarray([[-b, b]]))
        nodes[0].output[0] = "P"
    elif form == "export (6 nodes)":  # Gemm(-w), Exp, Add, Reciprocal, Sub, Concat
        nodes, inits = gemm(-w.reshape(-1, 1), np.asarray([[-b]]))
        nodes += [helper.make_node("Exp", ["z"], ["e"]), helper.make_node("Add", ["one", "e"], ["s"]),
                  helper.make_node("Reciprocal", ["s"], ["p"]),
                  helper.make_node("Sub", ["one", "p"], ["q"]),
                  helper.make_node("Concat", ["q", "p"], ["P"], axis=1)]
        inits.append(one)
    elif form == "[v, -v] Gemm, Exp, Add, Reciprocal":
        nodes, inits = gemm(col([w, -w], 1), np.asarray([[b, -b]]))
        nodes += [helper.make_node("Exp", ["z"], ["e"]), helper.make_node("Add", ["one", "e"], ["s"]),
                  helper.make_node("Reciprocal", ["s"], ["P"])]
        inits.append(one)
    elif form == "[0, v] Gemm, Softmax":
        nodes, inits = gemm(col([np.zeros(d), w], 1), np.asarray([[0.0, b]]))
        nodes.append(helper.make_node("Softmax", ["z"], ["P"], axis=1))
    elif form == "[-v, v] Gemm, Sigmoid":
        nodes, inits = gemm(col([-w, w], 1), np.asarray([[-b, b]]))
        nodes.append(helper.make_node("Sigmoid", ["z"], ["P"]))
    elif form == "LinearClassifier LOGISTIC (skl2onnx's node)":
        nodes = [helper.make_node(
            "LinearClassifier", ["X"], ["label", "P"], domain="ai.onnx.ml",
            coefficients=w.astype(np.float32).tolist(), intercepts=[float(np.float32(b))],
            classlabels_ints=[0, 1], post_transform="LOGISTIC")]
        inits = []
    elif form == "If on batch size: Softmax at 1 row, the export's form above":
        # Size(X) < 2 * d: one row takes [0, v] Gemm + Softmax, larger batches the export's
        small, _ = gemm(col([np.zeros(d), w], 1), np.asarray([[0.0, b]]))
        small[0].input[1:] = ["W0", "C0"]
        small.append(helper.make_node("Softmax", ["z"], ["P1"], axis=1))
        big = [helper.make_node("Gemm", ["X", "W1", "C1"], ["u"]),
               helper.make_node("Exp", ["u"], ["e"]), helper.make_node("Add", ["one", "e"], ["s"]),
               helper.make_node("Reciprocal", ["s"], ["p"]),
               helper.make_node("Sub", ["one", "p"], ["q"]),
               helper.make_node("Concat", ["q", "p"], ["P2"], axis=1)]
        inits = [numpy_helper.from_array(col([np.zeros(d), w], 1), "W0"),
                 numpy_helper.from_array(np.asarray([[0.0, b]]), "C0"),
                 numpy_helper.from_array(-w.reshape(-1, 1), "W1"),
                 numpy_helper.from_array(np.asarray([[-b]]), "C1"), one,
                 numpy_helper.from_array(np.asarray(2 * d, np.int64), "lim")]

        def branch(ns, out):
            return helper.make_graph(ns, out, [], [helper.make_tensor_value_info(
                out, TensorProto.DOUBLE, None)])

        nodes = [helper.make_node("Size", ["X"], ["n"]),
                 helper.make_node("Less", ["n", "lim"], ["few"]),
                 helper.make_node("If", ["few"], ["P"], then_branch=branch(small, "P1"),
                                  else_branch=branch(big, "P2"))]
    else:
        raise ValueError(form)
    elem = TensorProto.FLOAT if float32 else TensorProto.DOUBLE
    if float32:  # the same constants rounded to float32 (the float32 level's narrowing)
        inits = [numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name)
                 for t in inits]
    g = helper.make_graph(nodes, "lr", [helper.make_tensor_value_info(
        "X", elem, ["N", d])], [helper.make_tensor_value_info("P", elem, ["N", 2])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21),
                                            helper.make_opsetid("ai.onnx.ml", 3)])
    m.ir_version = 10
    return m


LR_FORMS = ("export (6 nodes)", "[v, -v] Gemm, Exp, Add, Reciprocal", "[0, v] Gemm, Softmax",
            "[-v, v] Gemm, Sigmoid", "If on batch size: Softmax at 1 row, the export's form above",
            "gemm-only (floor)")
# --precision float32: the float32 level's former form, its form and skl2onnx's node
LR_FORMS32 = ("export (6 nodes)", "[-v, v] Gemm, Sigmoid",
              "LinearClassifier LOGISTIC (skl2onnx's node)", "gemm-only (floor)")


def bench_lr_forms(args) -> None:
    """The candidate forms of a binary LogisticRegression's probabilities in double, each in
    ONNX Runtime against skl2onnx's file (LinearClassifier, float32), interleaved."""
    import bench_pipelines as bp
    import onnxruntime as ort

    bp.THREADS = str(args.threads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        models, X = bp._models(args.train_rows)
    _, model, method, kind = next(m for m in models if m[0] == "LogisticRegression")
    Xb = X[np.random.default_rng(1).integers(0, len(X), args.rows)]
    w = np.asarray(model.coef_, np.float64).ravel()
    b = float(np.asarray(model.intercept_, np.float64)[0])
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    systems = {"skl2onnx": bp._onnx(model, method, kind, Xb)}
    inputs = {"skl2onnx": Xb}
    f32 = args.precision == "float32"
    forms = LR_FORMS32 if f32 else LR_FORMS
    for form in forms:
        sess = ort.InferenceSession(_lr_form(w, b, form, f32).SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        systems[form] = lambda A, s=sess: s.run(["P"], {"X": A})[0]
        inputs[form] = Xb.astype(np.float32 if f32 else np.float64)
    want = model.predict_proba(Xb)
    res = compare(systems, inputs, args.repeat, args.one_row_calls)
    print(f"\n### LogisticRegression `predict_proba` forms ({'float32' if f32 else 'double'}) "
          "against skl2onnx\n\n"
          "| form | 100K rows (ms) | ratio | 1 row (us) | ratio | max diff |\n"
          "|---|---|---|---|---|---|")
    (pb, po) = res["skl2onnx"]
    for name in systems:
        bt, ot = res[name]
        diff = max_diff(systems[name](inputs[name]), want) if name != forms[-1] else np.nan
        print(f"| {name} | {bt * 1e3:.3f} | **{pb / bt:.2f}x** | {ot * 1e6:.2f} | "
              f"**{po / ot:.2f}x** | {diff:.1g} |", flush=True)


def bench_rf_forms(args) -> None:
    """bench_trees' RandomForest in the export's forms, interleaved with skl2onnx's file."""
    from unittest import mock

    from peregrine.bench.builtin_peers import OnnxRuntimePeer
    from peregrine.export import onnx_trees

    X, y = make_data(args.train_rows)
    Xb, _ = make_data(args.rows, seed=1)
    model = train("rf", X, y, args.threads)
    systems = {"skl2onnx": OnnxRuntimePeer().prepare(model, Xb.shape[1], threads=args.threads)}
    inputs = {"skl2onnx": Xb}
    keep_tracks = mock.patch.object(onnx_trees, "_without_missing_tracks",
                                    lambda e, forest, t, x: (forest, t, x))
    for name, methods, tracks in [
            ("one class + [1 - p, p] (predict_proba alone)", ["predict_proba"], False),
            ("the same, missing-value tracks", ["predict_proba"], True),
            ("two-target vector form (predict too)", ["predict", "predict_proba"], False),
            ("the same, missing-value tracks", ["predict", "predict_proba"], True)]:
        with keep_tracks if tracks else contextlib.nullcontext():
            fn, dtype, _ = export_session(model, methods, None, args.threads, Xb[:2000])
        key = f"{name} [{','.join(methods)}]"
        systems[key], inputs[key] = fn, Xb.astype(dtype)
    res = compare(systems, inputs, args.repeat, args.one_row_calls)
    want = model.predict_proba(Xb)
    print("\n### RandomForest(100, depth 8) `predict_proba` forms against skl2onnx\n\n"
          "| form | 100K rows (ms) | ratio | 1 row (us) | ratio | max diff |\n"
          "|---|---|---|---|---|---|")
    pb, po = res["skl2onnx"]
    for name, fn in systems.items():
        bt, ot = res[name]
        print(f"| {name} | {bt * 1e3:.1f} | **{pb / bt:.2f}x** | {ot * 1e6:.2f} | "
              f"**{po / ot:.2f}x** | {max_diff(fn(inputs[name]), want):.1g} |", flush=True)


def bench_linear(args) -> None:
    """The linear models the operator table lacks (a 3-class LogisticRegression,
    RidgeClassifier, LinearRegression, Ridge), against their skl2onnx files, on the
    table's kind of data (20 features, float32 rows)."""
    import bench_pipelines as bp
    from sklearn import linear_model as lm
    from sklearn.datasets import make_classification

    bp.THREADS = str(args.threads)
    X, y = make_classification(args.train_rows, 20, n_informative=10, n_classes=3,
                               random_state=0)
    X = X.astype(np.float32)
    Xb = X[np.random.default_rng(1).integers(0, len(X), args.rows)]
    target = X[:, 0] * 2.0 + y
    print(f"\n### Linear models (20 features)\n\n{HEADER}")
    for name, model, method, yy in [
            ("LogisticRegression (3 classes)", lm.LogisticRegression(max_iter=300),
             "predict_proba", y),
            ("RidgeClassifier (3 classes)", lm.RidgeClassifier(), "decision_function", y),
            ("LinearRegression", lm.LinearRegression(), "predict", target),
            ("Ridge", lm.Ridge(), "predict", target)]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(X, yy)
        want = getattr(model, method)(Xb)
        peer = bp._onnx(model, method, "array", Xb)
        ours, dtype, took = export_session(model, method, args.input_dtype, args.threads,
                                           Xb[:2000], args.precision)
        inputs = {"export": Xb.astype(dtype), "peer": Xb}
        res = compare({"export": ours, "peer": peer}, inputs, args.repeat, args.one_row_calls)
        print(row(f"{name} `{method}`", res, "export", "peer",
                  max_diff(ours(inputs["export"]), want), max_diff(peer(Xb), want), took),
              flush=True)


def main(argv=None) -> None:
    import onnxruntime as ort

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sections", default="trees,pipelines")
    p.add_argument("--train-rows", type=int, default=20_000)
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--models", default="xgboost,lightgbm,rf")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--one-row-calls", type=int, default=300)
    p.add_argument("--input-dtype", default=None, choices=["float64", "float32", "auto"],
                   help="the export's input dtype (default: float64, float32 under "
                   "--precision float32)")
    p.add_argument("--precision", default="auto", choices=["auto", "float64", "float32"],
                   help="the export's level: auto (exact) or float32 (docs/export.md)")
    p.add_argument("--ml-ops", default="auto", choices=["auto", "always", "never"],
                   help="trees: the export's ml_ops (never: standard ops only, the "
                   "traversal; docs/export.md)")
    p.add_argument("--operators", default="",
                   help="pipelines: only these rows of the table (comma-separated names, "
                   "e.g. LogisticRegression,MLPClassifier)")
    p.add_argument("--clock", default="wall", choices=["wall", "thread"],
                   help="wall time, or this thread's CPU time (use with --threads 1)")
    args = p.parse_args(argv)
    if args.clock == "thread":
        if args.threads != 1:
            p.error("--clock thread times the calling thread: use --threads 1")
        global CLOCK
        CLOCK = time.thread_time
    load = os.getloadavg()[0]
    print(f"CPU: {cpu()}; onnxruntime {ort.__version__}; {args.threads} intra-op threads; "
          f"export input {args.input_dtype or 'default'}, precision {args.precision}; {args.clock} clock; batch {args.rows} rows; best of {args.repeat}; "
          f"load average at start {load:.1f}")
    for section in args.sections.split(","):
        {"trees": bench_trees, "pipelines": bench_pipelines, "rf-forms": bench_rf_forms,
         "lr-forms": bench_lr_forms, "linear": bench_linear,
         "one-hot": bench_one_hot}[section](args)
    print(f"\nload average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
