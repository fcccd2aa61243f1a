"""Pipeline benchmark (run by hand, not a test): Peregrine's torch backend vs scikit-learn vs
ONNX Runtime (skl2onnx) on linear models, kernel SVMs, naive Bayes, an MLP, featurizers and a realistic
ColumnTransformer pipeline over string columns.

    .venv/bin/python benchmarks/bench_pipelines.py --rows 200000 --out docs/benchmarks_pipelines.md

Each system scores the same rows in one call; median of --repeats timed runs after warm-up
(calls under a second: until two in a row agree within 20%).
Threads: torch.set_num_threads, ORT intra_op_num_threads and OMP/MKL env (set before imports).
Outputs are checked against scikit-learn (rtol 1e-5 / atol 1e-6) so a fast wrong answer shows.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import warnings

THREADS = "2"
for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(var, THREADS)

LOAD_AT_START = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def _models(n_fit: int, seed: int = 0):
    from sklearn import linear_model as lm
    from sklearn.compose import ColumnTransformer
    from sklearn.datasets import make_classification
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.impute import SimpleImputer
    from sklearn.naive_bayes import BernoulliNB
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import (
        Binarizer,
        MinMaxScaler,
        Normalizer,
        OneHotEncoder,
        PolynomialFeatures,
        StandardScaler,
    )
    from sklearn.svm import SVC, LinearSVC, NuSVC

    X, y = make_classification(n_fit, 20, n_informative=10, random_state=seed)
    X = X.astype(np.float32)
    numeric = [
        ("LogisticRegression", lm.LogisticRegression(max_iter=300), "predict_proba"),
        ("SGDClassifier", lm.SGDClassifier(random_state=0), "decision_function"),
        ("LinearSVC", LinearSVC(), "decision_function"),
        ("BernoulliNB", BernoulliNB(), "predict_proba"),
        ("MLPClassifier", MLPClassifier((100,), max_iter=50, random_state=0), "predict_proba"),
        ("Binarizer", Binarizer(), "transform"),
        ("MinMaxScaler", MinMaxScaler(), "transform"),
        ("Normalizer", Normalizer(), "transform"),
        ("PolynomialFeatures", PolynomialFeatures(2), "transform"),
        ("StandardScaler", StandardScaler(), "transform"),
    ]
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, est, method in numeric:
            out.append((name, est.fit(X, y), method, "numeric"))
        # kernel SVMs: fewer fit rows keep the support-vector count (and the run) moderate
        for name, est in (("SVC", SVC()), ("NuSVC", NuSVC())):
            out.append((name, est.fit(X[:1000], y[:1000]), "decision_function", "numeric"))
        df = _frame(n_fit, seed)
        yd = ((df["num0"].fillna(0) > 0) ^ (df["cat0"] == "c1")).to_numpy().astype(int)
        for head_name, head in (("LogisticRegression", lm.LogisticRegression(max_iter=300)),
                                ("GradientBoosting", GradientBoostingClassifier(
                                    n_estimators=50, max_depth=3, random_state=0))):
            ct = ColumnTransformer([
                ("num", make_pipeline(SimpleImputer(), StandardScaler()), NUM),
                ("cat", OneHotEncoder(handle_unknown="ignore", sparse_output=False), CAT),
            ])
            pipe = make_pipeline(ct, head).fit(df, yd)
            out.append((f"CT(impute+scale+onehot) -> {head_name}", pipe, "predict_proba",
                        "frame"))
    return out, X


NUM = [f"num{i}" for i in range(15)]
CAT = [f"cat{i}" for i in range(5)]


def _frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    data = {c: rng.normal(size=n) for c in NUM}
    for i, c in enumerate(CAT):
        data[c] = rng.choice([f"c{j}" for j in range(4 + 3 * i)], n).astype(object)
    df = pd.DataFrame(data)
    df.loc[::13, "num0"] = np.nan
    return df


def _onnx(model, method: str, kind: str, X):
    import onnxruntime as ort
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType

    if kind == "frame":
        types = [(c, FloatTensorType([None, 1])) for c in NUM]
        types += [(c, StringTensorType([None, 1])) for c in CAT]
        onx = to_onnx(model, initial_types=types, options={"zipmap": False})
    else:
        # classifiers' scores come as a list of dicts (ZipMap) unless zipmap=False; LinearSVC's
        # converter has no such option (and returns an array anyway)
        try:
            opts = {"zipmap": False} if hasattr(model, "classes_") else None
            onx = to_onnx(model, X[:1], options=opts, target_opset=17)
        except NameError:
            onx = to_onnx(model, X[:1], target_opset=17)
    so = ort.SessionOptions()
    so.intra_op_num_threads = int(THREADS)
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(onx.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    pick = names[-1] if method == "predict_proba" or len(names) == 1 else names[-1]
    if method == "transform":
        pick = names[0]

    def feeds(data):
        if kind == "frame":
            return {c: (data[c].to_numpy(np.float32) if c in NUM else
                        data[c].to_numpy(object).astype(str)).reshape(-1, 1)
                    for c in NUM + CAT}
        return {sess.get_inputs()[0].name: data}
    return lambda data: sess.run([pick], feeds(data))[0]


def _touch_memory(gib: float = 3.0) -> None:
    """Write once to a few GiB and free them. On a VM whose guest memory is backed lazily by
    the host, the first write to a never-used page costs far more than a page fault (1M-row
    outputs were seen to take 10x longer for the first calls in a fresh process); without
    this, that cost lands on whichever system runs first."""
    block = np.empty(int(gib * (1 << 30)) // 8)
    block.fill(1.0)
    del block


# Pause before each system: BLAS and OpenMP pools (numpy's OpenBLAS under scikit-learn, torch's
# OpenMP) keep their threads spinning for a while after a call. On 2 cores the next system's
# threads would share the CPUs with them: measured, a fused kernel took 11 ms right after
# scikit-learn's SGDClassifier and 6 ms otherwise.
SETTLE_S = 0.5


# Warm-up: on this VM the first calls that write a large result into memory the process has not
# used yet run up to 10x slower (the host backs guest pages lazily, and reclaims idle ones):
# measured, MinMaxScaler's 80 MB output took 120 ms for the first five calls, then 10 ms. Calls
# under a second are therefore repeated until two in a row agree within 20% (at most 10).
WARM_MAX, WARM_FAST_S = 10, 1.0


def _time(fn, data, repeats: int) -> tuple[float, object]:
    time.sleep(SETTLE_S)
    t = time.perf_counter()
    out = fn(data)  # warm-up
    last = time.perf_counter() - t
    for _ in range(WARM_MAX - 1):
        if last >= WARM_FAST_S:
            break
        t = time.perf_counter()
        fn(data)
        now = time.perf_counter() - t
        if abs(now - last) <= 0.2 * min(now, last):
            break
        last = now
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn(data)
        ts.append(time.perf_counter() - t)
    return float(np.median(ts)), out


def _documents(n: int, seed: int) -> list[str]:
    """Short documents (3-14 Zipf-distributed words of a 20K-word vocabulary, accents, and a
    CJK/Unicode tail on every 7th)."""
    rng = np.random.default_rng(seed)
    letters = list("abcdefghijklmnopqrstuvwxyzéü")
    words = np.array(["".join(rng.choice(letters, rng.integers(2, 9))) for _ in range(20000)])
    p = 1 / np.arange(1, words.size + 1)
    p /= p.sum()
    return [" ".join(rng.choice(words, rng.integers(3, 15), p=p))
            + (" Ünïcode 東京!" if i % 7 == 0 else ".") for i in range(n)]


def _thread_best(fns: dict, data, rounds: int) -> dict[str, float]:
    """Best thread CPU time (time.thread_time: other jobs' load adds wall time, not this) of
    each function, the functions interleaved round after round so a change of load hits them
    alike."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.thread_time()
            fn(data)
            best[name] = min(best[name], time.thread_time() - t)
    return best


def _text_vectorizer(analyzer: str, stop_words: str | None) -> object:
    """The benchmark's vectorizer: TfidfVectorizer(ngram_range=(1, 2)) for words,
    HashingVectorizer(ngram_range=(1, 2)) for "hashing", (2, 4) character n-grams for "char"
    and "char_wb" ("hashing-char": hashed); ``stop_words`` for the word analyzers."""
    from sklearn.feature_extraction.text import HashingVectorizer, TfidfVectorizer

    words = {"stop_words": stop_words} if stop_words else {}
    if analyzer == "word":
        return TfidfVectorizer(ngram_range=(1, 2), **words)
    if analyzer == "hashing":
        return HashingVectorizer(ngram_range=(1, 2), **words)
    if analyzer == "hashing-char":
        return HashingVectorizer(analyzer="char", ngram_range=(2, 4))
    return TfidfVectorizer(analyzer=analyzer, ngram_range=(2, 4))


def bench_text(n_docs: int, repeats: int, ort_batch: int = 1000, ort: bool = True,
               analyzer: str = "word", stop_words: str | None = None) -> str:
    """TfidfVectorizer(ngram_range=(1, 2)) -> LogisticRegression, predict_proba on n_docs
    documents: scikit-learn, Peregrine (native and torch) and ONNX Runtime (skl2onnx; its
    TfIdfVectorizer op returns a dense (rows, vocabulary) tensor, so it runs in batches of
    ``ort_batch`` documents, once). Peregrine and scikit-learn are timed two ways in the same
    run: the median wall time (``_time``) and the best thread CPU time of ``2 * repeats + 1``
    interleaved rounds (the ratio to read on a shared machine)."""
    import subprocess

    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    import peregrine

    docs = _documents(n_docs, 0)
    y = np.random.default_rng(1).integers(0, 3, n_docs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lbfgs stopping at max_iter: the model is a fixture
        vec = _text_vectorizer(analyzer, stop_words)
        pipe = make_pipeline(vec, LogisticRegression(max_iter=50)).fit(docs[:20000],
                                                                       y[:20000])
    t_sk, want = _time(pipe.predict_proba, docs, repeats)
    res, fns = {}, {"sklearn": pipe.predict_proba}
    for backend in ("native", "torch"):
        cm = peregrine.compile(pipe, backend)
        res[backend], got = _time(cm.predict_proba, docs, repeats)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=backend)
        assert np.array_equal(cm.predict(docs), pipe.predict(docs))
        fns[backend] = cm.predict_proba
    load0 = os.getloadavg()[0]
    cpu_s = _thread_best(fns, docs, 2 * repeats + 1)
    load1 = os.getloadavg()[0]
    ort_s, ort_note = None, ""
    try:
        if not ort:
            raise RuntimeError("skipped (--skip-ort)")
        import onnxruntime as ort_rt
        from skl2onnx import to_onnx
        from skl2onnx.common.data_types import StringTensorType

        onx = to_onnx(pipe, initial_types=[("X", StringTensorType([None, 1]))],
                      options={id(pipe.steps[-1][1]): {"zipmap": False},
                               id(pipe.steps[0][1]): {"locale": "C.UTF-8"}})
        so = ort_rt.SessionOptions()
        so.intra_op_num_threads = int(THREADS)
        sess = ort_rt.InferenceSession(onx.SerializeToString(), so,
                                       providers=["CPUExecutionProvider"])
        X = np.array(docs, dtype=object).reshape(-1, 1)
        t = time.perf_counter()
        out = np.concatenate([sess.run(None, {"X": X[i:i + ort_batch]})[1]
                              for i in range(0, n_docs, ort_batch)])
        ort_s = time.perf_counter() - t
        ort_note = (f"max abs dev {np.max(np.abs(out - want)):.2g}, labels equal "
                    f"{np.mean(out.argmax(1) == want.argmax(1)):.1%}")
    except Exception as exc:  # converter gaps are results too
        ort_note = f"{type(exc).__name__}: {str(exc)[:80]}"
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines()
                  if ln.startswith("Model name")), platform.processor())
    vocab = len(getattr(pipe.steps[0][1], "vocabulary_", ())) or pipe.steps[0][1].n_features
    sk_cpu = cpu_s["sklearn"]
    what = " ".join(repr(vec).split())
    lines = [f"Text: {what} -> LogisticRegression, predict_proba "
             f"on {n_docs:,} documents ({vocab:,}-term vocabulary), {model}, load "
             f"{os.getloadavg()[0]:.1f}; median of {repeats} (ORT: one run, batches of "
             f"{ort_batch})",
             f"  wall:       sklearn {t_sk:.3f} s | peregrine native {res['native']:.3f} s "
             f"({t_sk / res['native']:.2f}x sklearn) | torch {res['torch']:.3f} s "
             f"({t_sk / res['torch']:.2f}x)",
             f"  thread CPU: sklearn {sk_cpu:.3f} s | peregrine native {cpu_s['native']:.3f} s "
             f"({sk_cpu / cpu_s['native']:.2f}x sklearn) | torch {cpu_s['torch']:.3f} s "
             f"({sk_cpu / cpu_s['torch']:.2f}x); best of {2 * repeats + 1} interleaved "
             f"rounds, load {load0:.1f} -> {load1:.1f}"]
    if ort_s is not None:
        lines.append(f"  ONNX Runtime {ort_s:.3f} s ({ort_s / res['native']:.1f}x native; "
                     f"{ort_note})")
    else:
        lines.append(f"  ONNX Runtime: {ort_note}")
    return "\n".join(lines)


def bench_text_columns(n_docs: int, repeats: int) -> str:
    """ColumnTransformer([TfidfVectorizer(ngram_range=(1, 2)) on "review", StandardScaler on
    two numbers, OneHotEncoder on a country]) -> LogisticRegression, predict_proba on a
    DataFrame of n_docs rows: scikit-learn and Peregrine (native, torch), the median wall time
    and the best thread CPU time of ``2 * repeats + 1`` interleaved rounds (docs/text.md)."""
    from sklearn.compose import ColumnTransformer
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    import peregrine

    rng = np.random.default_rng(2)
    df = pd.DataFrame({"review": _documents(n_docs, 0), "price": rng.gamma(2.0, 30.0, n_docs),
                       "age": rng.integers(18, 90, n_docs).astype(float),
                       "country": rng.choice(["fr", "de", "us", "jp", "br"], n_docs)})
    y = np.random.default_rng(1).integers(0, 3, n_docs)
    ct = ColumnTransformer([("txt", TfidfVectorizer(ngram_range=(1, 2)), "review"),
                            ("num", StandardScaler(), ["price", "age"]),
                            ("cat", OneHotEncoder(handle_unknown="ignore"), ["country"])])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lbfgs stopping at max_iter: the model is a fixture
        pipe = make_pipeline(ct, LogisticRegression(max_iter=50)).fit(df[:20000], y[:20000])
    t_sk, want = _time(pipe.predict_proba, df, repeats)
    res, fns = {}, {"sklearn": pipe.predict_proba}
    for backend in ("native", "torch"):
        cm = peregrine.compile(pipe, backend)
        res[backend], got = _time(cm.predict_proba, df, repeats)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=backend)
        assert np.array_equal(cm.predict(df), pipe.predict(df))
        fns[backend] = cm.predict_proba
    load0 = os.getloadavg()[0]
    cpu_s = _thread_best(fns, df, 2 * repeats + 1)
    load1 = os.getloadavg()[0]
    vocab = len(pipe[0].named_transformers_["txt"].vocabulary_)
    sk = cpu_s["sklearn"]
    return "\n".join([
        f"Text column in a ColumnTransformer (tf-idf 1-2 grams + 2 scaled + one-hot) -> "
        f"LogisticRegression, predict_proba on a {n_docs:,}-row DataFrame ({vocab:,}-term "
        f"vocabulary), {_cpu_name()}; median of {repeats}",
        f"  wall:       sklearn {t_sk:.3f} s | peregrine native {res['native']:.3f} s "
        f"({t_sk / res['native']:.2f}x sklearn) | torch {res['torch']:.3f} s "
        f"({t_sk / res['torch']:.2f}x)",
        f"  thread CPU: sklearn {sk:.3f} s | peregrine native {cpu_s['native']:.3f} s "
        f"({sk / cpu_s['native']:.2f}x sklearn) | torch {cpu_s['torch']:.3f} s "
        f"({sk / cpu_s['torch']:.2f}x); best of {2 * repeats + 1} interleaved rounds, load "
        f"{load0:.1f} -> {load1:.1f}"])


def one_hot_model(n_rows: int):
    """(pipeline, DataFrame of n_rows rows, its string columns, its number columns):
    ColumnTransformer([OneHotEncoder on 20 string columns of 50 categories, StandardScaler
    on 20 numbers]) -> LogisticRegression, fitted on the first 20,000 rows."""
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    rng = np.random.default_rng(3)
    cats, nums = [f"c{i}" for i in range(20)], [f"x{i}" for i in range(20)]
    values = np.array([f"v{k}" for k in range(50)], dtype=object)
    df = pd.DataFrame({**{c: values[rng.integers(0, 50, n_rows)] for c in cats},
                       **{c: rng.normal(size=n_rows) for c in nums}})
    y = rng.integers(0, 2, n_rows)
    ct = ColumnTransformer([("oh", OneHotEncoder(handle_unknown="ignore"), cats),
                            ("sc", StandardScaler(), nums)])
    fit = min(n_rows, 20000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lbfgs stopping at max_iter: the model is a fixture
        pipe = make_pipeline(ct, LogisticRegression(max_iter=50)).fit(df[:fit], y[:fit])
    return pipe, df, cats, nums


def bench_one_hot(n_rows: int, repeats: int) -> str:
    """ColumnTransformer([OneHotEncoder on 20 string columns of 50 categories, StandardScaler
    on 20 numbers]) -> LogisticRegression, predict_proba on a DataFrame of n_rows rows:
    scikit-learn, Peregrine native and torch (one fused row kernel that picks each category's
    weight row: kernels/rowwise_onehot.py), the native backend with fused kernels off (the
    NumPy rules: the indicators made), and ONNX Runtime (skl2onnx); the median wall time and
    the best thread CPU time of ``2 * repeats + 1`` interleaved rounds (docs/pipelines.md)."""
    import onnxruntime as ort
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType

    import peregrine

    pipe, df, cats, nums = one_hot_model(n_rows)
    t_sk, want = _time(pipe.predict_proba, df, repeats)
    res, fns = {}, {"sklearn": pipe.predict_proba}
    for name, backend, opts in (("native", "native", None), ("torch", "torch", None),
                                ("rules", "native",
                                 peregrine.CompileOptions(fused_kernels=False))):
        cm = peregrine.compile(pipe, backend, options=opts)
        res[name], got = _time(cm.predict_proba, df, repeats)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
        assert np.array_equal(cm.predict(df), pipe.predict(df))
        fns[name] = cm.predict_proba
    same = bool(np.array_equal(peregrine.compile(pipe, "native").decision_function(df[:50000]),
                               pipe.decision_function(df[:50000])))
    types = [(c, StringTensorType([None, 1])) for c in cats]
    types += [(c, FloatTensorType([None, 1])) for c in nums]
    onx = to_onnx(pipe, initial_types=types, options={"zipmap": False})
    so = ort.SessionOptions()
    so.intra_op_num_threads = int(THREADS)
    sess = ort.InferenceSession(onx.SerializeToString(), so, providers=["CPUExecutionProvider"])

    def run_ort(data):
        feeds = {c: data[c].to_numpy(object).astype(str).reshape(-1, 1) for c in cats}
        feeds.update({c: data[c].to_numpy(np.float32).reshape(-1, 1) for c in nums})
        return sess.run(None, feeds)[1]

    t_ort, ox = _time(run_ort, df, repeats)
    fns["ort"] = run_ort
    load0 = os.getloadavg()[0]
    cpu_s = _thread_best(fns, df, 2 * repeats + 1)
    load1 = os.getloadavg()[0]
    def line(kind: str, t: dict) -> str:
        return (f"  {kind}: sklearn {t['sklearn']:.3f} s | native {t['native']:.3f} s "
                f"({t['sklearn'] / t['native']:.2f}x sklearn, {t['ort'] / t['native']:.2f}x "
                f"ORT) | torch {t['torch']:.3f} s ({t['sklearn'] / t['torch']:.2f}x) | "
                f"rules (fused_kernels=False) {t['rules']:.3f} s | ORT {t['ort']:.3f} s")

    return "\n".join([
        f"ColumnTransformer(OneHotEncoder 20 string columns x 50 categories + StandardScaler "
        f"20) -> LogisticRegression, predict_proba on a {n_rows:,}-row DataFrame, "
        f"{_cpu_name()}; median of {repeats}; decision_function equal to scikit-learn's bits: "
        f"{same}; ORT max abs dev {np.max(np.abs(ox - want)):.1e} (float32 inputs)",
        line("wall      ", {**res, "sklearn": t_sk, "ort": t_ort}),
        line("thread CPU", cpu_s) + f"; best of {2 * repeats + 1} interleaved rounds, load "
        f"{load0:.1f} -> {load1:.1f}"])


def _cpu_name() -> str:
    import subprocess

    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines()
                 if ln.startswith("Model name")), platform.processor())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None, help="write a markdown table here")
    ap.add_argument("--text", type=int, default=0, metavar="DOCS",
                    help="run only the text pipeline case on DOCS documents (docs/text.md)")
    ap.add_argument("--skip-ort", action="store_true",
                    help="with --text: leave ONNX Runtime out (minutes on 100K documents)")
    ap.add_argument("--text-columns", type=int, default=0, metavar="ROWS",
                    help="run only the ColumnTransformer-with-a-text-column case on ROWS rows")
    ap.add_argument("--one-hot", type=int, default=0, metavar="ROWS",
                    help="run only the one-hot -> LogisticRegression case on ROWS rows")
    ap.add_argument("--analyzer", default="word",
                    choices=("word", "char", "char_wb", "hashing", "hashing-char"),
                    help="with --text: the vectorizer's analyzer (char: ngram_range (2, 4)); "
                    "hashing: HashingVectorizer(ngram_range=(1, 2)); hashing-char: "
                    "HashingVectorizer(analyzer='char', ngram_range=(2, 4))")
    ap.add_argument("--stop-words", default=None,
                    help="with --text and a word analyzer: the vectorizer's stop_words "
                    "('english')")
    args = ap.parse_args(argv)
    if args.one_hot:
        print(bench_one_hot(args.one_hot, args.repeats), flush=True)
        return 0
    if args.text_columns:
        print(bench_text_columns(args.text_columns, args.repeats), flush=True)
        return 0
    if args.text:
        print(bench_text(args.text, args.repeats, ort=not args.skip_ort,
                         analyzer=args.analyzer, stop_words=args.stop_words), flush=True)
        return 0

    import sklearn
    import torch

    import peregrine

    torch.set_num_threads(int(THREADS))
    _touch_memory()
    models, _ = _models(5000)
    rng = np.random.default_rng(1)
    Xn = rng.normal(size=(args.rows, 20)).astype(np.float32)
    df = _frame(args.rows, 2)
    rows = []
    for name, model, method, kind in models:
        data = df if kind == "frame" else Xn
        try:
            compiled = {
                "peregrine": peregrine.compile(model, "torch"),
                "op_by_op": peregrine.compile(
                    model, "torch", options=peregrine.CompileOptions(fused_kernels=False)),
                "native": peregrine.compile(model, "native"),
            }
        except peregrine.UnsupportedModelError as exc:  # e.g. a frontend not there yet
            print(f"skip {name}: {exc}", flush=True)
            continue
        torch_cm = compiled["peregrine"]
        fused = torch_cm.explain_dict()["backend_choices"].get("fused_kernels", {})
        res = {"model": name, "method": method,
               "fused": torch_cm.spec.methods[method].output in fused}
        t_sk, want = _time(getattr(model, method), data, args.repeats)
        res["sklearn"] = t_sk
        for key, cm in compiled.items():
            res[key], got = _time(getattr(cm, method), data, args.repeats)
            np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                                       rtol=1e-5, atol=1e-6, err_msg=f"{name} {key}")
        try:
            run = _onnx(model, method, kind, data)
            t_ox, ox = _time(run, data, args.repeats)
            ox = np.asarray(ox, np.float64)
            if ox.ndim == 2 and np.ndim(want) == 1 and ox.shape[1] == 2:
                # binary scores come as (n, 2): [-score, score] from linear classifiers, but
                # libsvm's [score, -score] from SVC/NuSVC (libsvm scores class 0 vs 1; sklearn
                # negates that for its binary decision_function)
                from sklearn.svm._base import BaseSVC

                ox = ox[:, 0 if isinstance(model, BaseSVC) else 1]
            ox = ox.reshape(np.shape(want))
            err = float(np.max(np.abs(ox - np.asarray(want, np.float64))))
            res.update(onnx=t_ox, onnx_err=err)
        except Exception as exc:  # converter gaps are results too
            res.update(onnx=None, onnx_note=f"{type(exc).__name__}: {str(exc)[:60]}")
        rows.append(res)
        print(res, flush=True)

    import onnxruntime
    import skl2onnx

    head = [f"# Pipeline benchmark ({args.rows:,} rows, 20 features, {THREADS} threads)", "",
            f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
            f"load average {LOAD_AT_START:.1f} at the start (a shared VM: treat ratios within "
            "~20% of 1 as ties). "
            f"Python {sys.version.split()[0]}, scikit-learn {sklearn.__version__}, torch "
            f"{torch.__version__}, onnxruntime {onnxruntime.__version__}, skl2onnx "
            f"{skl2onnx.__version__}, peregrine {peregrine.__version__}. One call on all rows, "
            f"median of {args.repeats} runs after warm-up calls (until two agree within 20%); float32 input (DataFrame for the "
            "pipelines). Peregrine's outputs were checked against scikit-learn (rtol 1e-5, "
            "atol 1e-6); ORT's max abs deviation is listed. *torch* is the torch backend as "
            "compiled by default (*fused*: its CPU program is one fused row kernel); *op-by-op* "
            "is the same backend with `CompileOptions(fused_kernels=False)`; *native* is the "
            "native backend. The ratios compare the torch backend (default) with sklearn and ORT.",
            "",
            "| model | method | sklearn s | ORT s | torch s | fused | op-by-op s | native s | "
            "sklearn/torch | ORT/torch | ORT max abs dev |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ox, pg = r.get("onnx"), r["peregrine"]
        ort_s = "n/a" if ox is None else f"{ox:.4f}"
        ort_ratio = f"n/a ({r.get('onnx_note', '')})" if ox is None else f"{ox / pg:.2f}x"
        dev = "" if ox is None else f"{r['onnx_err']:.1e}"
        head.append(f"| {r['model']} | {r['method']} | {r['sklearn']:.4f} | {ort_s} | "
                    f"{pg:.4f} | {'yes' if r['fused'] else 'no'} | {r['op_by_op']:.4f} | "
                    f"{r['native']:.4f} | {r['sklearn'] / pg:.2f}x | {ort_ratio} | {dev} |")
    text = "\n".join(head) + "\n"
    print(text)
    if args.out:
        write_report(args.out, text)
    return 0


BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


def write_report(path: str, text: str) -> None:
    """Replace the results between the markers, keeping the prose around them."""
    try:
        with open(path) as fh:
            old = fh.read()
    except FileNotFoundError:
        old = ""
    if BEGIN in old and END in old.split(BEGIN, 1)[1]:
        head, rest = old.split(BEGIN, 1)
        text = f"{head}{BEGIN}\n{text}{END}{rest.split(END, 1)[1]}"
    else:
        text = f"{BEGIN}\n{text}{END}\n{old}"
    with open(path, "w") as fh:
        fh.write(text)


if __name__ == "__main__":
    raise SystemExit(main())
