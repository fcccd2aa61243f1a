"""Ahead-of-time shared libraries (``CompiledModel.export_library``, ``peregrine export
--format shared-library``): a C harness compiled with gcc against the generated header calls
every method in its float and double form; the results are compared with the source library
(rtol 1e-5 / atol 1e-6, labels identical) and with the in-process native backend (the same
bits) on rows with NaN, +-inf and values at the trees' thresholds. The libraries need only
libc and libm (readelf, ldd). aarch64 libraries are cross-compiled and run under qemu-user."""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("llvmlite")
pytest.importorskip("sklearn")

from sklearn.datasets import make_classification, make_regression  # noqa: E402
from sklearn.ensemble import (  # noqa: E402
    ExtraTreesRegressor,
    GradientBoostingClassifier,
    HistGradientBoostingClassifier,
    IsolationForest,
    RandomForestClassifier,
)
from sklearn.impute import SimpleImputer  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402
from sklearn.neighbors import KNeighborsClassifier  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import OneHotEncoder, StandardScaler  # noqa: E402
from sklearn.tree import DecisionTreeRegressor  # noqa: E402

import peregrine  # noqa: E402
from peregrine.errors import UnsupportedModelError  # noqa: E402
from peregrine.export.onnx import validation_rows  # noqa: E402
from peregrine.runtime.library import call_library, open_library  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6
GCC = shutil.which("gcc")
CROSS = shutil.which("aarch64-linux-gnu-gcc")
QEMU = shutil.which("qemu-aarch64")
AARCH64_SYSROOT = "/usr/aarch64-linux-gnu"
NO_AARCH64 = ("aarch64 tests need aarch64-linux-gnu-gcc and qemu-aarch64 (apt-get install "
              "gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user; `make env` does)")
LIBS = {"libc.so.6", "libm.so.6"}

pytestmark = pytest.mark.skipif(GCC is None, reason="needs gcc to link the libraries")


# ------------------------------------------------------------------------------ models --
def _cls(k=3, n=500, d=7, seed=0):
    X, y = make_classification(n, d, n_informative=5, n_redundant=0, n_classes=k,
                               random_state=seed)
    return X, y


def _nan(X, seed=1, p=0.1):
    X = X.copy()
    X[np.random.default_rng(seed).random(X.shape) < p] = np.nan
    return X


@cache
def _model(name):
    X, y = _cls()
    Xr, yr = make_regression(500, 7, random_state=0)
    if name == "xgb_multi":
        xgb = pytest.importorskip("xgboost")
        return xgb.XGBClassifier(n_estimators=12, max_depth=4).fit(_nan(X), y)
    if name == "xgb_binary":  # predict_proba returns float32
        xgb = pytest.importorskip("xgboost")
        return xgb.XGBClassifier(n_estimators=12, max_depth=4).fit(_nan(X), y > 0)
    if name == "lgbm_binary":
        lgb = pytest.importorskip("lightgbm")
        return lgb.LGBMClassifier(n_estimators=12, num_leaves=15, verbose=-1).fit(_nan(X), y > 0)
    if name == "lgbm_regressor":  # compares in float64: the double form keeps inputs exact
        lgb = pytest.importorskip("lightgbm")
        return lgb.LGBMRegressor(n_estimators=12, num_leaves=15, verbose=-1).fit(_nan(Xr), yr)
    if name == "rf_strings":
        labels = np.array(["cat", "dog", "émeu"])[y]
        return RandomForestClassifier(6, max_depth=6, random_state=0).fit(X, labels)
    if name == "gbm_binary":
        return GradientBoostingClassifier(n_estimators=10, random_state=0).fit(X, y > 0)
    if name == "decision_tree":
        return DecisionTreeRegressor(max_depth=12, random_state=0).fit(Xr, yr)
    if name == "extra_trees":
        return ExtraTreesRegressor(5, max_depth=6, random_state=0).fit(Xr, yr)
    if name == "hist_gb":
        return HistGradientBoostingClassifier(max_iter=8).fit(_nan(X), y)
    if name == "isolation_forest":
        return IsolationForest(n_estimators=8, random_state=0).fit(X)
    if name == "logistic":
        return LogisticRegression(max_iter=500).fit(X, y)
    if name == "linear":
        return LinearRegression().fit(Xr, yr)
    if name == "onehot_logistic":  # the row kernel's one-hot weight rows (rowwise_onehot.py)
        cats = np.round(X[:, :4] * 3)
        return make_pipeline(OneHotEncoder(handle_unknown="ignore"),
                             LogisticRegression(max_iter=500)).fit(cats, y)
    if name == "scaler_forest":
        return make_pipeline(StandardScaler(), RandomForestClassifier(
            4, max_depth=5, random_state=0)).fit(X, y)
    raise KeyError(name)


FAMILIES = ["xgb_multi", "xgb_binary", "lgbm_binary", "lgbm_regressor", "rf_strings",
            "gbm_binary", "decision_tree", "extra_trees", "hist_gb", "isolation_forest",
            "logistic", "linear", "scaler_forest", "onehot_logistic"]


def _rows(compiled, n=300):
    """Threshold values and their float32/float64 neighbours, normal draws, NaN and +-inf
    where the source accepts them."""
    return np.ascontiguousarray(validation_rows(compiled, n=n, seed=3))


# ----------------------------------------------------------------------------- harness --
def _harness(lib: Path, prefix: str, methods, cc: str) -> Path:
    """A C program against the header: calls every method in both forms on the rows in
    x32.bin / x64.bin and writes (return code, values) per call."""
    calls = []
    for m in methods:
        calls.append(f"""    {{
        size_t w = {prefix}_n_outputs("{m}");
        double *o = malloc(rows * w * sizeof(double) + 1);
        dump(dir, "{m}_f32", {prefix}_{m}(X32, rows, o), o, rows * w);
        dump(dir, "{m}_f64", {prefix}_{m}_f64(X64, rows, o), o, rows * w);
        free(o);
    }}""")
    source = f"""#include <stdio.h>
#include <stdlib.h>
#include "{lib.with_suffix('.h').name}"

static void *slurp(const char *dir, const char *name, size_t n) {{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    void *buf = malloc(n + 1);
    FILE *f = fopen(path, "rb");
    if (f == NULL || fread(buf, 1, n, f) != n) exit(3);
    fclose(f);
    return buf;
}}

static void dump(const char *dir, const char *what, int rc, const double *o, size_t n) {{
    char path[4096];
    snprintf(path, sizeof path, "%s/out_%s.bin", dir, what);
    FILE *f = fopen(path, "wb");
    fwrite(&rc, sizeof rc, 1, f);
    fwrite(o, sizeof(double), n, f);
    fclose(f);
}}

int main(int argc, char **argv) {{
    if (argc != 3) return 2;
    const char *dir = argv[1];
    size_t rows = (size_t)strtoull(argv[2], NULL, 10), nf = {prefix}_n_features();
    const float *X32 = slurp(dir, "x32.bin", rows * nf * sizeof(float));
    const double *X64 = slurp(dir, "x64.bin", rows * nf * sizeof(double));
{chr(10).join(calls)}
    printf("%zu %zu %zu\\n", nf, {prefix}_n_classes(), {prefix}_n_outputs("no_such_method"));
    for (size_t i = 0; i < {prefix}_n_classes(); i++) printf("%s\\n", {prefix}_class_label(i));
    return {prefix}_class_label({prefix}_n_classes()) == NULL ? 0 : 4;
}}
"""
    c_file = lib.parent / f"{lib.stem}_harness.c"
    exe = lib.parent / f"{lib.stem}_harness"
    c_file.write_text(source)
    subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-o", str(exe),
                    str(c_file), str(lib), f"-Wl,-rpath,{lib.parent}", f"-I{lib.parent}"],
                   check=True, capture_output=True, text=True)
    return exe


def _run_harness(exe: Path, X: np.ndarray, methods, qemu: bool = False):
    d = exe.parent
    X.astype(np.float32).tofile(d / "x32.bin")
    X.astype(np.float64).tofile(d / "x64.bin")
    cmd = [str(exe), str(d), str(len(X))]
    if qemu:
        cmd = [QEMU, "-L", AARCH64_SYSROOT, *cmd]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    out = {}
    for m in methods:
        for form in ("f32", "f64"):
            raw = np.fromfile(d / f"out_{m}_{form}.bin", dtype=np.uint8)
            assert raw[:4].view(np.int32)[0] == 0, (m, form)
            out[m, form] = raw[4:].view(np.float64).reshape(len(X), -1)
    return out, res.stdout.splitlines()


def _expected(model, compiled, method, X):
    """(source library's result, in-process native result) as the library writes them:
    class indices for labels, float64 values."""
    source = np.asarray(getattr(model, method)(X))
    native = np.asarray(getattr(compiled, method)(X))
    labels = compiled.spec.methods[method].labels
    if labels is not None:
        index = {v: i for i, v in enumerate(np.asarray(labels).tolist())}
        source = np.array([index[v] for v in source.tolist()], np.float64)
        native = np.array([index[v] for v in native.tolist()], np.float64)
    return source.astype(np.float64), native.astype(np.float64)


def _check(model, compiled, got, X, methods, bits=True):
    for m in methods:
        for form, dt in (("f32", np.float32), ("f64", np.float64)):
            rows = X.astype(dt)
            have = got[m, form]
            source, native = _expected(model, compiled, m, rows)
            source, native = source.reshape(have.shape), native.reshape(have.shape)
            if compiled.spec.methods[m].labels is not None:
                np.testing.assert_array_equal(have, source, err_msg=f"{m} {form}")
            else:
                np.testing.assert_allclose(have, source, rtol=RTOL, atol=ATOL,
                                           err_msg=f"{m} {form}")
            if not bits:
                continue
            if m == "predict_log_proba" and any(
                    n.op.name == "TREE_ENSEMBLE" for n in compiled.spec.graph.nodes):
                # after a forest the process takes NumPy's log, the library libm's
                np.testing.assert_array_max_ulp(have, native, maxulp=2)
            else:
                assert np.array_equal(have.view(np.int64), native.view(np.int64)), (
                    f"{m} {form}: not the in-process native backend's bits")


# ------------------------------------------------------------------------------- tests --
@pytest.mark.parametrize("name", FAMILIES)
def test_library_matches_source_and_native_bits(name, tmp_path):
    model = _model(name)
    compiled = peregrine.compile(model, "native")
    lib = tmp_path / f"{name}.so"
    report = compiled.export_library(lib)  # validated through ctypes as well
    assert report.rows > 0 and Path(report.header).exists()
    methods = list(report.methods)
    assert methods == list(compiled.methods)
    exe = _harness(lib, "peregrine", methods, GCC)
    X = _rows(compiled)
    if name == "xgb_multi":  # more rows than a block of the runtime (2048)
        X = np.vstack([X] * 8)
    got, stdout = _run_harness(exe, X, methods)
    _check(model, compiled, got, X, methods)
    n_features, n_classes, unknown = (int(v) for v in stdout[0].split())
    assert (n_features, unknown) == (compiled.n_features_in_, 0)
    labels = compiled.classes_
    if "predict" in methods and labels is not None:
        assert stdout[1:] == [str(v) for v in labels.tolist()]
        assert n_classes == len(labels)


def test_needs_only_libc_and_libm(tmp_path):
    compiled = peregrine.compile(_model("logistic"), "native")
    lib = tmp_path / "m.so"
    report = compiled.export_library(lib, prefix="fraud")
    dynamic = subprocess.run(["readelf", "-d", "-W", str(lib)], capture_output=True,
                             text=True, check=True).stdout
    needed = {line.split("[")[1].rstrip("]") for line in dynamic.splitlines()
              if "(NEEDED)" in line}
    assert needed <= LIBS, needed
    ldd = subprocess.run(["ldd", str(lib)], capture_output=True, text=True, check=True).stdout
    for line in ldd.splitlines():
        name = line.split()[0]
        assert name in LIBS or "vdso" in name or "ld-linux" in name, line
    symbols = subprocess.run(["readelf", "--dyn-syms", "-W", str(lib)], capture_output=True,
                             text=True, check=True).stdout
    defined = {f[7] for f in (line.split() for line in symbols.splitlines())
               if len(f) == 8 and f[6] != "UND" and f[3] == "FUNC"}
    assert defined == set(report.functions)  # kernels and helpers stay local
    assert all(f.startswith("fraud_") for f in defined)


def test_error_codes(tmp_path):
    compiled = peregrine.compile(_model("logistic"), "native")  # rejects NaN and infinity
    lib = compiled.export_library(tmp_path / "m.so", validate=False)
    so = open_library(lib.path)
    X = np.ascontiguousarray(_cls()[0][:5])
    rc, out = call_library(so, "peregrine", "predict_proba", X)
    assert rc == 0
    np.testing.assert_array_equal(out, compiled.predict_proba(X))
    for bad in (np.nan, np.inf):
        Xb = X.copy()
        Xb[3, 2] = bad
        assert call_library(so, "peregrine", "predict", Xb)[0] == 2  # ERR_NONFINITE
        assert call_library(so, "peregrine", "predict", Xb.astype(np.float32))[0] == 2
    assert so.peregrine_predict_f64(None, 3, None) == 1  # ERR_ARGUMENT
    assert so.peregrine_predict_f64(None, 0, None) == 0  # no rows: nothing to do
    assert so.peregrine_n_outputs(b"predict_proba") == 3
    assert so.peregrine_n_outputs(None) == 0
    assert so.peregrine_class_label(7) is None


@pytest.mark.parametrize("cpu", ["x86-64-v3", "x86-64-v4", "host"])  # v2: the default path
def test_cpu_levels_same_bits(cpu, tmp_path):
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    need = {"x86-64-v3": " avx2", "x86-64-v4": " avx512f"}.get(cpu, "")
    if need and need not in flags:
        pytest.skip(f"this CPU cannot run {cpu} code")
    model = _model("xgb_multi")
    compiled = peregrine.compile(model, "native")
    report = compiled.export_library(tmp_path / "m.so", cpu=cpu, validate=False)
    so = open_library(report.path)
    X = _rows(compiled)
    for dt in (np.float32, np.float64):
        rc, got = call_library(so, "peregrine", "predict_proba", X.astype(dt))
        assert rc == 0
        want = compiled.predict_proba(X.astype(dt)).astype(np.float64)
        assert np.array_equal(got, want)


@pytest.mark.skipif(CROSS is None or QEMU is None, reason=NO_AARCH64)
@pytest.mark.parametrize("name", ["xgb_multi", "lgbm_binary", "logistic"])
def test_aarch64_under_qemu(name, tmp_path):
    model = _model(name)
    compiled = peregrine.compile(model, "native")
    lib = tmp_path / f"{name}_a64.so"
    report = compiled.export_library(lib, target="aarch64-linux-gnu")
    assert report.rows == 0  # not this machine's code: not validated here
    header = subprocess.run(["readelf", "-h", "-d", "-W", str(lib)], capture_output=True,
                            text=True, check=True).stdout
    assert "AArch64" in header
    needed = {line.split("[")[1].rstrip("]") for line in header.splitlines()
              if "(NEEDED)" in line}
    assert needed <= LIBS, needed
    methods = list(report.methods)
    exe = _harness(lib, "peregrine", methods, CROSS)
    X = _rows(compiled, n=200)
    got, _ = _run_harness(exe, X, methods, qemu=True)
    # the same kernels (scalar walks) and glibc's exp: the host's bits
    _check(model, compiled, got, X, methods)


def test_refuses_what_it_cannot_build(tmp_path):
    X, y = _cls()
    compiled = peregrine.compile(LogisticRegression(max_iter=300).fit(X, y), "native")
    with pytest.raises(UnsupportedModelError, match="riscv64"):
        compiled.export_library(tmp_path / "m.so", target="riscv64-linux-gnu")
    with pytest.raises(UnsupportedModelError, match="x86-64-v9"):
        compiled.export_library(tmp_path / "m.so", cpu="x86-64-v9")
    with pytest.raises(UnsupportedModelError, match="C identifier"):
        compiled.export_library(tmp_path / "m.so", prefix="9lives")
    with pytest.raises(UnsupportedModelError, match="transform"):
        compiled.export_library(tmp_path / "m.so", methods=["transform"])
    knn = peregrine.compile(KNeighborsClassifier(3).fit(X, y), "reference")
    with pytest.raises(UnsupportedModelError, match="KNN"):
        knn.export_library(tmp_path / "m.so")
    imputed = peregrine.compile(make_pipeline(SimpleImputer(), LogisticRegression()).fit(
        _nan(X), y), "reference")
    with pytest.raises(UnsupportedModelError, match="IMPUTE"):
        imputed.export_library(tmp_path / "m.so")
    assert not (tmp_path / "m.so").exists()


def test_methods_subset_and_prefix(tmp_path):
    compiled = peregrine.compile(_model("rf_strings"), "reference")
    (tmp_path / "include").mkdir()
    report = compiled.export_library(tmp_path / "rf.so", methods=["predict"], prefix="rf",
                                     header=tmp_path / "include" / "rf_model.h")
    assert report.header == str(tmp_path / "include" / "rf_model.h")
    assert report.functions[:2] == ["rf_predict", "rf_predict_f64"]
    assert report.methods == {"predict": 1}
    text = Path(report.header).read_text()
    assert "int rf_predict(const float *X, size_t rows, double *out);" in text
    assert "predict_proba" not in text
    assert report.labels == ("cat", "dog", "émeu")


def test_cli_shared_library(tmp_path, capsys):
    from peregrine.cli import main

    lgb = pytest.importorskip("lightgbm")
    X, y = make_regression(300, 5, random_state=0)
    booster = lgb.LGBMRegressor(n_estimators=8, num_leaves=7, verbose=-1).fit(X, y).booster_
    model_file = tmp_path / "model.txt"
    booster.save_model(str(model_file))
    lib = tmp_path / "out" / "lgbm.so"
    lib.parent.mkdir()
    assert main(["export", str(model_file), "--format", "shared-library", "-o", str(lib),
                 "--prefix", "lgbm"]) == 0
    printed = capsys.readouterr().out
    assert "validated predict" in printed and "lgbm_predict_f64" in printed
    assert lib.exists() and lib.with_suffix(".h").exists()
    rc, got = call_library(open_library(lib, "lgbm"), "lgbm", "predict", X[:40])
    assert rc == 0
    np.testing.assert_allclose(got[:, 0], booster.predict(X[:40]), rtol=RTOL, atol=ATOL)

    assert main(["export", str(model_file), "--format", "shared-library", "-o", str(lib),
                 "--target", "sparc-sun-solaris"]) == 1
    assert "sparc-sun-solaris" in capsys.readouterr().err


def test_validation_failure_writes_nothing(tmp_path):
    from peregrine.errors import ValidationError

    compiled = peregrine.compile(_model("decision_tree"), "native")
    truth = compiled.predict
    compiled.__dict__["predict"] = lambda X: truth(X) + 1.0  # a model the library disagrees with
    with pytest.raises(ValidationError, match="predict"):
        compiled.export_library(tmp_path / "m.so")
    assert not list(tmp_path.iterdir())


def test_pandas_category_columns_take_codes(tmp_path):
    pd = pytest.importorskip("pandas")
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"a": rng.normal(size=400),
                       "c": pd.Categorical(rng.choice(["x", "y", "z"], 400))})
    model = lgb.LGBMClassifier(n_estimators=8, verbose=-1).fit(df, (df.a > 0) ^ (df.c == "y"))
    report = peregrine.compile(model, "native").export_library(tmp_path / "m.so")
    assert "1: c (category codes: 0 = x, 1 = y, 2 = z" in Path(report.header).read_text()
    codes = np.c_[df.a.to_numpy(), df.c.cat.codes.to_numpy().astype(np.float64)]
    rc, got = call_library(open_library(report.path), "peregrine", "predict_proba", codes)
    assert rc == 0
    np.testing.assert_allclose(got, model.predict_proba(df), rtol=RTOL, atol=ATOL)


def test_threads_may_call_at_once(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    compiled = peregrine.compile(_model("xgb_multi"), "native")
    report = compiled.export_library(tmp_path / "m.so", validate=False)
    so = open_library(report.path)
    X = _rows(compiled, n=3000)  # two blocks of the runtime per call
    want = compiled.predict_proba(X).astype(np.float64)
    with ThreadPoolExecutor(4) as pool:  # ctypes drops the GIL: the calls overlap
        results = list(pool.map(lambda _: call_library(so, "peregrine", "predict_proba", X),
                                range(8)))
    for rc, got in results:
        assert rc == 0 and np.array_equal(got, want)
