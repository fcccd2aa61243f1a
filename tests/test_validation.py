"""Compile-time validation: ``CompileOptions(validate=True)`` runs every method on the sample rows
through the source library and the compiled program and raises ValidationError on a difference;
explain() reports the largest deviation; the report survives save/load; off by default; the
CLI's ``--validate``. Perturbed programs (a wrapped executable, an altered forest constant) prove
that validation catches what it claims to."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import zipfile

import numpy as np
import pytest

import peregrine
from peregrine import CompileOptions, InputError, ValidationError
from peregrine.backends import available_backends
from peregrine.ir import Graph, Op
from peregrine.runtime.validate import ATOL, RTOL, compare

xgb = pytest.importorskip("xgboost")
lgb = pytest.importorskip("lightgbm")
joblib = pytest.importorskip("joblib")
pd = pytest.importorskip("pandas")
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

VALIDATE = CompileOptions(validate=True)
BACKENDS = [b for b in ("reference", "torch", "native") if b in available_backends()]


def _data(n: int = 160, nan: bool = True, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    if nan:
        X[::7, 2] = np.nan  # the tree libraries route missing values; the rows must still agree
    return X, y


def _pipeline():
    X, y = _data(nan=False)
    return make_pipeline(StandardScaler(), LogisticRegression()).fit(X, y), X


def _rf_classifier():
    X, y = _data()
    labels = np.array(["no", "yes"], dtype=object)[y]  # string labels: compared exactly
    return RandomForestClassifier(n_estimators=5, max_depth=4, random_state=0).fit(X, labels), X


def _xgb_classifier():
    X, y = _data()
    return xgb.XGBClassifier(n_estimators=10, max_depth=3).fit(X, y), X


def _xgb_booster():
    X, y = _data()
    return xgb.train({"max_depth": 3}, xgb.DMatrix(X, y), 8), X


def _lgb_regressor():
    X, _ = _data()
    target = np.nan_to_num(X[:, 0] * 2 + X[:, 2])
    return lgb.LGBMRegressor(n_estimators=10, verbose=-1).fit(X, target), X


def _lgb_booster():
    X, y = _data()
    return lgb.train({"verbose": -1, "objective": "binary"}, lgb.Dataset(X, y), 8), X


MODELS = {
    "sklearn-pipeline": _pipeline,
    "sklearn-rf-classifier": _rf_classifier,
    "xgb-classifier": _xgb_classifier,
    "xgb-booster": _xgb_booster,
    "lgb-regressor": _lgb_regressor,
    "lgb-booster": _lgb_booster,
}


@pytest.fixture(scope="module")
def models():
    cache: dict = {}

    def get(name):
        if name not in cache:
            cache[name] = MODELS[name]()
        return cache[name]

    return get


# ------------------------------------------------------------------------------- passes --


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(MODELS))
def test_validation_passes_and_explain_reports_deviation(models, name, backend):
    model, X = models(name)
    compiled = peregrine.compile(model, backend, options=VALIDATE, sample_input=X)
    report = compiled.explain_dict()["validation"]
    assert report["rows"] == len(X) and report["backend"] == backend
    assert set(report["methods"]) == set(compiled.methods)
    for method, dev in report["methods"].items():
        assert 0.0 <= dev["max_abs"] and 0.0 <= dev["max_rel"], method
        if not dev["exact"]:
            assert dev["max_rel"] <= RTOL, (method, dev)
    line = next(ln for ln in compiled.explain().splitlines() if "validation:" in ln)
    assert f"{len(X)} sample rows" in line
    for method in compiled.methods:
        assert method in line


def test_string_labels_are_compared_exactly(models):
    model, X = models("sklearn-rf-classifier")
    compiled = peregrine.compile(model, "reference", options=VALIDATE, sample_input=X)
    assert compiled.validation["methods"]["predict"] == {
        "max_abs": 0.0,
        "max_rel": 0.0,
        "exact": True,
    }
    assert "predict equal" in compiled.explain()


def test_dataframe_and_tensor_samples(models):
    model, X = models("xgb-classifier")
    df = pd.DataFrame(X, columns=[f"c{i}" for i in range(X.shape[1])])
    named = xgb.XGBClassifier(n_estimators=5, max_depth=3).fit(df, (X[:, 0] > 0).astype(int))
    # columns in another order: the compiled model matches by name, the source is called on
    # the user's own frame
    shuffled = df[["c3", "c0", "c4", "c1", "c2"]]
    peregrine.compile(named, "reference", options=VALIDATE, sample_input=shuffled)
    torch = pytest.importorskip("torch")
    peregrine.compile(model, "reference", options=VALIDATE, sample_input=torch.from_numpy(X))


def test_xgboost_booster_with_feature_names_and_a_frame():
    X, y = _data()
    names = [f"f_{i}" for i in range(X.shape[1])]
    booster = xgb.train({"max_depth": 3}, xgb.DMatrix(X, y, feature_names=names), 5)
    df = pd.DataFrame(X, columns=names)
    peregrine.compile(booster, "reference", options=VALIDATE, sample_input=df[names[::-1]])
    peregrine.compile(booster, "reference", options=VALIDATE, sample_input=X)


# ------------------------------------------------------------------------------ catches --


class _Perturbed:
    """Wraps a backend Executable: adds ``delta`` to one element of one output (and offers no
    fast runner, so every call goes through ``run``)."""

    def __init__(self, inner, output: str, row: int, column: int | None, delta: float) -> None:
        self._inner, self._output = inner, output
        self._row, self._column, self._delta = row, column, delta

    def run(self, X, outputs):
        res = dict(self._inner.run(X, outputs))
        if self._output in res:
            out = np.array(np.asarray(res[self._output]))  # a copy, in the output's dtype
            if self._column is None:
                out.reshape(len(out), -1)[self._row, 0] += self._delta
            else:
                out[self._row, self._column] += self._delta
            res[self._output] = out
        return res

    def runner(self, output):
        return None

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _perturb_build(monkeypatch, method: str, row: int, column: int | None, delta: float = 1e-3):
    from peregrine import api

    real = api.build

    def build(spec, *args, **kwargs):
        compiled = real(spec, *args, **kwargs)
        output = spec.methods[method].output
        compiled._exec = _Perturbed(compiled._exec, output, row, column, delta)
        return compiled

    monkeypatch.setattr(api, "build", build)


@pytest.mark.parametrize("backend", BACKENDS)
def test_perturbed_executable_raises_with_row_column_values(models, monkeypatch, backend):
    model, X = models("xgb-classifier")
    _perturb_build(monkeypatch, "predict_proba", row=7, column=1)
    with pytest.raises(ValidationError) as info:
        peregrine.compile(model, backend, options=VALIDATE, sample_input=X)
    err = info.value
    msg = str(err)
    assert "XGBClassifier.predict_proba" in msg and "sample row 7, column 1" in msg, msg
    assert "rtol 1e-05" in msg and "atol 1e-06" in msg, msg
    assert (err.method, err.row, err.column) == ("predict_proba", 7, 1)
    assert abs(err.compiled - err.source - 1e-3) < 1e-6
    assert repr(err.compiled) in msg and repr(err.source) in msg
    assert (err.rtol, err.atol) == (RTOL, ATOL)


def test_perturbed_1d_output_names_the_row(models, monkeypatch):
    model, X = models("lgb-regressor")
    _perturb_build(monkeypatch, "predict", row=11, column=None, delta=5e-4)
    with pytest.raises(ValidationError, match=r"LGBMRegressor\.predict differs at sample row 11:"):
        peregrine.compile(model, "reference", options=VALIDATE, sample_input=X)


def test_perturbed_labels_are_caught(models, monkeypatch):
    model, X = models("sklearn-pipeline")
    # the argmax output is an index into classes_: one more picks the other class
    want = model.predict(X)
    row = int(np.flatnonzero(want == 0)[0])
    _perturb_build(monkeypatch, "predict", row=row, column=None, delta=1)
    with pytest.raises(ValidationError, match=f"sample row {row}:.*must be equal") as info:
        peregrine.compile(model, "reference", options=VALIDATE, sample_input=X)
    assert info.value.method == "predict"


@pytest.mark.parametrize("backend", BACKENDS)
def test_perturbed_forest_constant_raises(monkeypatch, backend):
    """A leaf value of the first tree altered by 1e-3 in the IR before any backend sees it."""
    from peregrine import api

    X, _ = _data()
    model = RandomForestRegressor(n_estimators=4, max_depth=4, random_state=0)
    model.fit(X, np.nan_to_num(X[:, 0] + X[:, 1]))
    real = api.run_passes

    def run_passes(graph, *args):
        graph = real(graph, *args)
        nodes = []
        for node in graph.nodes:
            if node.op is Op.TREE_ENSEMBLE:
                forest = node.attrs.forest
                value = forest.value.copy()
                first = slice(int(forest.tree_offsets[0]), int(forest.tree_offsets[1]))
                value[first] += 1e-3
                node = node.with_attrs(forest=dataclasses.replace(forest, value=value))
            nodes.append(node)
        return Graph(tuple(nodes), graph.outputs)

    monkeypatch.setattr(api, "run_passes", run_passes)
    with pytest.raises(
        ValidationError,
        match=r"RandomForestRegressor\.predict differs at "
        r"sample row \d+: compiled .*, source ",
    ) as info:
        peregrine.compile(model, backend, options=VALIDATE, sample_input=X)
    assert info.value.method == "predict" and info.value.column is None
    assert abs(info.value.compiled - info.value.source) == pytest.approx(1e-3 / 4, rel=1e-6)


def test_every_differing_method_is_named(models, monkeypatch):
    model, X = models("xgb-classifier")
    from peregrine import api

    row = int(np.flatnonzero(model.predict(X) == 0)[0])
    real = api.build

    def build(spec, *args, **kwargs):
        compiled = real(spec, *args, **kwargs)
        proba, label = spec.methods["predict_proba"].output, spec.methods["predict"].output
        inner = _Perturbed(compiled._exec, proba, row, 0, 0.5)
        compiled._exec = _Perturbed(inner, label, row, None, 1)  # the class index: 0 -> 1
        return compiled

    monkeypatch.setattr(api, "build", build)
    with pytest.raises(ValidationError) as info:
        peregrine.compile(model, "reference", options=VALIDATE, sample_input=X)
    msg = str(info.value)
    assert info.value.method == "predict" and f"sample row {row}: compiled 1, source 0" in msg
    assert msg.endswith("(also differs: predict_proba)"), msg


# ------------------------------------------------------------------------ compare rules --


def test_compare_rules():
    a = np.array([[1.0, np.nan], [np.inf, -2.0]])
    assert compare(a, a.copy(), "m", "m")["max_abs"] == 0.0  # NaN/inf in the same places
    within = a + np.array([[1e-6, 0.0], [0.0, 2e-5]])  # atol + rtol*2 = 2.1e-5
    dev = compare(within, a, "m", "m")
    assert dev["max_abs"] == pytest.approx(2e-5) and dev["max_rel"] == pytest.approx(1e-5)
    with pytest.raises(ValidationError, match="row 1, column 1"):
        compare(a + np.array([[0.0, 0.0], [0.0, 3e-5]]), a, "m", "m")
    with pytest.raises(ValidationError, match="row 0, column 1: compiled 0.0, source nan"):
        compare(np.nan_to_num(a, posinf=np.inf), a, "m", "m")
    with pytest.raises(
        ValidationError,
        match="row 1, column 0: compiled -inf, source inf .NaN and infinities must match",
    ):
        compare(np.array([[1.0, np.nan], [-np.inf, -2.0]]), a, "m", "m")
    with pytest.raises(ValidationError, match="shape") as info:
        compare(a.reshape(-1), a, "m", "m")
    assert info.value.row is None
    with pytest.raises(ValidationError, match="dtype float32"):
        compare(a.astype(np.float32), a, "m", "m")
    with pytest.raises(ValidationError, match="row 2: compiled 4, source 3"):
        compare(np.array([1, 2, 4]), np.array([1, 2, 3]), "m", "m")
    labels = np.array(["a", "b"], dtype=object)
    assert compare(labels, labels.copy(), "m", "m")["exact"]


# -------------------------------------------------------------------- option and source --


def test_validate_without_sample_raises(models):
    model, _ = models("sklearn-pipeline")
    with pytest.raises(InputError, match="validate=True.*needs sample_input"):
        peregrine.compile(model, "reference", options=VALIDATE)
    with pytest.raises(ValueError):  # InputError is a ValueError
        peregrine.compile(model, "reference", options=VALIDATE)


def _refusing_model():
    X, y = _data(nan=False)
    model = LogisticRegression().fit(X, y)

    def refuse(*_a, **_k):
        raise RuntimeError("the source model was called")

    for name in ("predict", "predict_proba", "predict_log_proba", "decision_function"):
        setattr(model, name, refuse)
    return model, X


def test_off_by_default_calls_no_source_method():
    model, X = _refusing_model()
    assert CompileOptions().validate is False
    compiled = peregrine.compile(model, "reference", sample_input=X)
    assert compiled.validation is None
    assert compiled.explain_dict()["validation"] == "not validated"
    assert "validation: not validated" in compiled.explain()
    # and with validate=True the same model is called (so the test above would have noticed)
    with pytest.raises(ValidationError, match="LogisticRegression.predict raised RuntimeError"):
        peregrine.compile(model, "reference", options=VALIDATE, sample_input=X)


def test_option_checked_and_round_trips():
    with pytest.raises(ValueError, match="validate"):
        CompileOptions(validate="yes")
    assert CompileOptions.from_json(VALIDATE.to_json()) == VALIDATE
    old = CompileOptions().to_json()
    del old["validate"]  # options written before the field existed
    assert CompileOptions.from_json(old).validate is False


# ---------------------------------------------------------------------------- artifacts --


def test_report_survives_save_and_load(models, tmp_path):
    model, X = models("xgb-classifier")
    compiled = peregrine.compile(model, "reference", options=VALIDATE, sample_input=X)
    path = tmp_path / "m.pgn"
    compiled.save(path)
    loaded = peregrine.load(path)
    assert loaded.validation == compiled.validation
    assert loaded.options.validate is True
    line = [ln for ln in loaded.explain().splitlines() if "validation:" in ln]
    assert line == [ln for ln in compiled.explain().splitlines() if "validation:" in ln]


def test_artifact_without_report_or_option_still_loads(models, tmp_path):
    """An artifact written before validation existed: no report, no 'validate' option."""
    model, X = models("lgb-regressor")
    path, old = tmp_path / "new.pgn", tmp_path / "old.pgn"
    peregrine.compile(model, "reference").save(path)
    with zipfile.ZipFile(path) as zf:
        doc = json.loads(zf.read("manifest.json"))
        members = {n: zf.read(n) for n in zf.namelist() if n != "manifest.json"}
    assert "validation" not in doc["body"]
    del doc["body"]["options"]["validate"]
    body = json.dumps(doc["body"], sort_keys=True).encode()
    doc["content_hash"] = hashlib.sha256(body).hexdigest()
    with zipfile.ZipFile(old, "w") as zf:
        zf.writestr("manifest.json", json.dumps(doc))
        for name, data in members.items():
            zf.writestr(name, data)
    loaded = peregrine.load(old)
    assert loaded.validation is None and loaded.options.validate is False
    assert "validation: not validated" in loaded.explain()
    np.testing.assert_allclose(loaded.predict(X), model.predict(X), rtol=RTOL, atol=ATOL)


# ---------------------------------------------------------------------------------- CLI --


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("validate-cli")
    X, y = _data()
    cols = [f"f{i}" for i in range(X.shape[1])]
    df = pd.DataFrame(X, columns=cols)
    df.to_csv(d / "rows.csv", index=False)
    xgb.train({"max_depth": 3}, xgb.DMatrix(X, y), 5).save_model(str(d / "m.json"))
    lgb.LGBMClassifier(n_estimators=5, verbose=-1).fit(X, y).booster_.save_model(str(d / "m.txt"))
    rf = RandomForestClassifier(n_estimators=4, max_depth=3, random_state=0).fit(df, y)
    joblib.dump(rf, d / "rf.joblib")
    return d


def _cli(capsys, *args):
    from peregrine.cli import main

    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("model", ["m.json", "m.txt", "rf.joblib"])
def test_cli_validate(files, capsys, model):
    code, out, err = _cli(
        capsys,
        "compile",
        files / model,
        "-o",
        files / f"{model}.pgn",
        "--allow-pickle",
        "--backend",
        "reference",
        "--sample",
        files / "rows.csv",
        "--validate",
    )
    assert code == 0, err
    assert "validation: against the source on 160 sample rows" in out, out
    loaded = peregrine.load(files / f"{model}.pgn")
    assert loaded.validation is not None and loaded.options.validate


def test_cli_validate_needs_sample(files, capsys):
    code, _, err = _cli(capsys, "compile", files / "m.json", "-o", files / "x.pgn", "--validate")
    assert code == 1 and "--validate needs --sample" in err
    assert not (files / "x.pgn").exists()


def test_cli_validate_failure_is_one_line(files, capsys, monkeypatch):
    _perturb_build(monkeypatch, "predict", row=3, column=None)
    code, _, err = _cli(
        capsys,
        "compile",
        files / "m.json",
        "-o",
        files / "bad.pgn",
        "--backend",
        "reference",
        "--sample",
        files / "rows.csv",
        "--validate",
    )
    assert code == 1, err
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    assert len(lines) == 1 and "Traceback" not in err
    assert "validation failed" in lines[0] and "sample row 3" in lines[0], lines[0]
    assert not (files / "bad.pgn").exists()
