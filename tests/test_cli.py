"""The `peregrine` command line, end to end: subprocesses running ``python -m peregrine.cli`` on
small saved models (sklearn pickle, LightGBM text, XGBoost JSON/UBJSON), the happy paths and
every bad-input path (one line on stderr, non-zero exit, no traceback, no partial output).

Many error cases call ``main(argv)`` in-process: the same code path minus interpreter start-up,
which keeps this file well under a minute."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
sklearn_ensemble = pytest.importorskip("sklearn.ensemble")
joblib = pytest.importorskip("joblib")

from peregrine.backends import available_backends  # noqa: E402
from peregrine.cli import main  # noqa: E402

FEATURES = ["f0", "f1", "f2", "f3"]
RTOL, ATOL = 1e-5, 1e-6


def cli(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run(
        [sys.executable, "-m", "peregrine.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 1, err
    lines = [ln for ln in err.strip().splitlines() if "error:" in ln]
    assert len(lines) == 1, err
    assert "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], lines[0]


def _rows(n: int = 120, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(rng.random((n, 4)), columns=FEATURES)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """Shared files: an RF pickle fitted on named columns, an unnamed one, data, an artifact."""
    d = tmp_path_factory.mktemp("cli")
    X = _rows()
    y = (X.f0 + X.f1 > 1).astype(int)
    rf = sklearn_ensemble.RandomForestClassifier(n_estimators=5, max_depth=3, random_state=0)
    rf.fit(X, y)
    joblib.dump(rf, d / "rf.joblib")
    plain = sklearn_ensemble.RandomForestRegressor(n_estimators=3, max_depth=3, random_state=0)
    plain.fit(X.to_numpy(), X.f2.to_numpy())
    joblib.dump(plain, d / "plain.pkl")
    X.to_csv(d / "data.csv", index=False)
    X.to_parquet(d / "data.parquet")
    code = main(
        [
            "compile",
            str(d / "rf.joblib"),
            "-o",
            str(d / "rf.pgn"),
            "--allow-pickle",
            "--backend",
            "reference",
        ]
    )
    assert code == 0
    return {"dir": d, "X": X, "rf": rf, "plain": plain}


def _no_leftovers(directory, name: str) -> None:
    left = [p for p in os.listdir(directory) if p == name or p.startswith(f".{name}.")]
    assert not left, f"partial output left behind: {left}"


# --------------------------------------------------------------------------- help, entry --


def test_module_entry_point_and_help():
    r = cli("--help")
    assert r.returncode == 0
    for command in ("compile", "predict", "inspect", "bench"):
        assert command in r.stdout


@pytest.mark.parametrize("command", ["compile", "predict", "inspect", "bench", "backends"])
def test_every_command_has_help(capsys, command):
    assert main([command, "--help"]) == 0  # argparse's SystemExit becomes a return code
    out = capsys.readouterr().out
    assert f"peregrine {command}" in out and "--verbose" in out


def test_console_script_is_installed():
    exe = shutil.which("peregrine", path=os.path.dirname(sys.executable))
    if exe is None:
        pytest.skip("package not installed with its console script in this environment")
    r = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("peregrine ")


def test_usage_error_exits_2(capsys):
    code, _, err = run_main(capsys, "compile")
    assert code == 2 and "required" in err


# --------------------------------------------------------------------- compile / inspect --


def test_compile_pickle_prints_explain_and_warns(work):
    d = work["dir"]
    r = cli(
        "compile",
        d / "rf.joblib",
        "-o",
        d / "rf2.pgn",
        "--allow-pickle",
        "--backend",
        "reference",
        "--batch-size",
        "64",
        "--tune",
        "off",
    )
    assert r.returncode == 0, r.stderr
    assert "sklearn.RandomForestClassifier" in r.stdout
    assert "Peregrine compiled" in r.stdout  # explain()
    assert "warning" in r.stderr and "unpickling" in r.stderr
    assert zipfile.is_zipfile(d / "rf2.pgn")


def test_pickle_without_flag_is_refused(work, capsys):
    d = work["dir"]
    code, _, err = run_main(capsys, "compile", d / "rf.joblib", "-o", d / "nope.pgn")
    assert_one_line_error(code, err, "--allow-pickle")
    _no_leftovers(d, "nope.pgn")


def test_inspect_text_and_json(work, capsys):
    d = work["dir"]
    code, out, _ = run_main(capsys, "inspect", d / "rf.pgn")
    assert code == 0
    for needle in (
        "reference",
        "4 features",
        "f0, f1, f2, f3",
        "predict_proba",
        "content hash",
        "scikit-learn" if "scikit-learn" in out else "sklearn",
    ):
        assert needle in out
    code, out, _ = run_main(capsys, "inspect", d / "rf.pgn", "--json")
    info = json.loads(out)
    assert info["backend"] == "reference"
    assert info["n_features"] == 4 and info["feature_names"] == FEATURES
    assert info["methods"] == ["predict", "predict_proba", "predict_log_proba"]  # as the RF
    assert info["file_size"] == os.path.getsize(d / "rf.pgn")
    assert len(info["content_hash"]) == 64
    assert "peregrine" in info["versions"]
    assert info["explain"] and "reference" in info["explain"]


def test_compile_with_sample_checks_schema(work, capsys):
    d = work["dir"]
    code, _, _ = run_main(
        capsys,
        "compile",
        d / "rf.joblib",
        "-o",
        d / "s.pgn",
        "--allow-pickle",
        "--backend",
        "reference",
        "--sample",
        d / "data.csv",
    )
    assert code == 0
    bad = d / "sample_bad.csv"
    work["X"].drop(columns="f3").to_csv(bad, index=False)
    code, _, err = run_main(
        capsys,
        "compile",
        d / "rf.joblib",
        "-o",
        d / "s2.pgn",
        "--allow-pickle",
        "--backend",
        "reference",
        "--sample",
        bad,
    )
    assert_one_line_error(code, err, "missing columns", "f3")
    _no_leftovers(d, "s2.pgn")


def _usable_backends() -> list[str]:
    try:
        return available_backends()
    except Exception:  # a backend module mid-development must not break collection here
        return ["reference"]


@pytest.mark.parametrize("backend", _usable_backends())
def test_every_available_backend_round_trips(work, capsys, backend):
    d = work["dir"]
    art = d / f"rf-{backend}.pgn"
    code, out, err = run_main(
        capsys, "compile", d / "rf.joblib", "-o", art, "--allow-pickle", "--backend", backend
    )
    assert code == 0, err
    out_csv = d / f"proba-{backend}.csv"
    code, _, err = run_main(
        capsys, "predict", art, d / "data.csv", "-o", out_csv, "--method", "predict_proba"
    )
    assert code == 0, err
    got = pd.read_csv(out_csv)
    assert list(got.columns) == ["proba_0", "proba_1"]
    np.testing.assert_allclose(
        got.to_numpy(), work["rf"].predict_proba(work["X"]), rtol=RTOL, atol=ATOL
    )


# ------------------------------------------------------------------------------ predict --


def test_predict_csv_parquet_and_stdout(work):
    d = work["dir"]
    want = work["rf"].predict(work["X"])
    r = cli("predict", d / "rf.pgn", d / "data.csv", "-o", d / "pred.csv")
    assert r.returncode == 0, r.stderr
    assert (pd.read_csv(d / "pred.csv")["predict"].to_numpy() == want).all()
    r = cli(
        "predict",
        d / "rf.pgn",
        d / "data.parquet",
        "-o",
        d / "proba.parquet",
        "--method",
        "predict_proba",
        "--batch-size",
        "25",
    )
    assert r.returncode == 0, r.stderr
    got = pd.read_parquet(d / "proba.parquet")
    np.testing.assert_allclose(
        got.to_numpy(), work["rf"].predict_proba(work["X"]), rtol=RTOL, atol=ATOL
    )
    r = cli("predict", d / "rf.pgn", d / "data.csv")
    assert r.returncode == 0
    lines = r.stdout.strip().splitlines()
    assert lines[0] == "predict" and len(lines) == len(want) + 1


def test_predict_small_chunks_match_one_chunk(work, capsys):
    d = work["dir"]
    for name, size in (("one.csv", "100000"), ("many.csv", "7")):
        code, _, err = run_main(
            capsys,
            "predict",
            d / "rf.pgn",
            d / "data.csv",
            "-o",
            d / name,
            "--method",
            "predict_proba",
            "--batch-size",
            size,
        )
        assert code == 0, err
    assert (d / "one.csv").read_text() == (d / "many.csv").read_text()


def test_predict_columns_by_name_any_order(work, capsys):
    d = work["dir"]
    shuffled = work["X"][["f3", "f1", "f0", "f2"]]
    shuffled.to_csv(d / "shuffled.csv", index=False)
    code, _, err = run_main(
        capsys, "predict", d / "rf.pgn", d / "shuffled.csv", "-o", d / "shuf.csv"
    )
    assert code == 0, err
    assert (
        pd.read_csv(d / "shuf.csv")["predict"].to_numpy() == work["rf"].predict(work["X"])
    ).all()


def test_wrong_columns_is_an_error_without_output(work, capsys):
    d = work["dir"]
    work["X"].rename(columns={"f2": "zz"}).to_csv(d / "renamed.csv", index=False)
    code, _, err = run_main(capsys, "predict", d / "rf.pgn", d / "renamed.csv", "-o", d / "w.csv")
    assert_one_line_error(code, err, "missing columns ['f2']", "unknown columns ['zz']")
    _no_leftovers(d, "w.csv")
    extra = work["X"].assign(id=range(len(work["X"])))
    extra.to_csv(d / "extra.csv", index=False)
    code, _, err = run_main(capsys, "predict", d / "rf.pgn", d / "extra.csv", "-o", d / "e.csv")
    assert_one_line_error(code, err, "--ignore-extra-columns")
    code, _, err = run_main(
        capsys,
        "predict",
        d / "rf.pgn",
        d / "extra.csv",
        "-o",
        d / "e.csv",
        "--ignore-extra-columns",
    )
    assert code == 0, err


def test_positional_model_checks_column_count(work, capsys):
    d = work["dir"]
    code, _, err = run_main(
        capsys,
        "compile",
        d / "plain.pkl",
        "-o",
        d / "plain.pgn",
        "--allow-pickle",
        "--backend",
        "reference",
    )
    assert code == 0, err
    work["X"].iloc[:, :3].to_csv(d / "three.csv", index=False)
    code, _, err = run_main(capsys, "predict", d / "plain.pgn", d / "three.csv")
    assert_one_line_error(code, err, "3 columns", "expects 4")
    # any header works for a model without feature names: columns are taken by position
    work["X"].set_axis(list("abcd"), axis=1).to_csv(d / "abcd.csv", index=False)
    code, out, err = run_main(capsys, "predict", d / "plain.pgn", d / "abcd.csv")
    assert code == 0, err
    got = pd.read_csv(__import__("io").StringIO(out))["predict"].to_numpy()
    np.testing.assert_allclose(got, work["plain"].predict(work["X"].to_numpy()), rtol=RTOL)


def test_unparseable_row_names_row_and_column(work, capsys):
    d = work["dir"]
    bad = work["X"].astype(object)
    bad.iloc[49, 2] = "oops"  # data row 50, after several 7-row chunks were already written
    bad.to_csv(d / "bad.csv", index=False)
    code, _, err = run_main(
        capsys, "predict", d / "rf.pgn", d / "bad.csv", "-o", d / "bad_out.csv", "--batch-size", "7"
    )
    assert_one_line_error(code, err, "row 50", "column 'f2'", "oops")
    _no_leftovers(d, "bad_out.csv")


def test_malformed_csv_and_empty_file(work, capsys):
    d = work["dir"]
    (d / "ragged.csv").write_text("f0,f1,f2,f3\n1,2,3,4\n1,2,3,4,5\n")
    code, _, err = run_main(
        capsys, "predict", d / "rf.pgn", d / "ragged.csv", "-o", d / "r.parquet"
    )
    assert_one_line_error(code, err, "line 3")
    _no_leftovers(d, "r.parquet")
    (d / "empty.csv").write_text("")
    code, _, err = run_main(capsys, "predict", d / "rf.pgn", d / "empty.csv")
    assert_one_line_error(code, err, "empty")
    (d / "header_only.csv").write_text("f0,f1,f2,f3\n")
    code, _, err = run_main(
        capsys, "predict", d / "rf.pgn", d / "header_only.csv", "-o", d / "h.csv"
    )
    assert_one_line_error(code, err, "no data rows")
    _no_leftovers(d, "h.csv")


def test_predict_unknown_method_and_output_format(work, capsys):
    d = work["dir"]
    code, _, err = run_main(
        capsys, "predict", d / "rf.pgn", d / "data.csv", "--method", "transform"
    )
    assert_one_line_error(code, err, "no transform()", "predict_proba")
    code, _, err = run_main(capsys, "predict", d / "rf.pgn", d / "data.csv", "-o", d / "x.xlsx")
    assert_one_line_error(code, err, ".csv or .parquet")


# ----------------------------------------------------------------------- bad files ----------


@pytest.mark.parametrize("command", ["compile", "inspect", "predict"])
def test_missing_file(work, capsys, command):
    d = work["dir"]
    args = {
        "compile": ["compile", d / "absent.json", "-o", d / "a.pgn"],
        "inspect": ["inspect", d / "absent.pgn"],
        "predict": ["predict", d / "absent.pgn", d / "data.csv"],
    }[command]
    code, _, err = run_main(capsys, *args)
    assert_one_line_error(code, err, "absent")


def test_missing_data_file(work, capsys):
    code, _, err = run_main(capsys, "predict", work["dir"] / "rf.pgn", work["dir"] / "no.csv")
    assert_one_line_error(code, err, "no.csv", "does not exist")


def test_unknown_model_format(work, capsys):
    d = work["dir"]
    (d / "junk.bin").write_bytes(b"\x00\x01garbage")
    code, _, err = run_main(capsys, "compile", d / "junk.bin", "-o", d / "j.pgn")
    assert_one_line_error(code, err, "cannot tell")
    (d / "other.json").write_text('{"hello": 1}')
    code, _, err = run_main(capsys, "compile", d / "other.json", "-o", d / "j.pgn")
    assert_one_line_error(code, err, "XGBoost cannot read", "other.json")
    (d / "other.txt").write_text('{"hello": 1}')
    code, _, err = run_main(capsys, "compile", d / "other.txt", "-o", d / "j.pgn")
    assert_one_line_error(code, err, "not an XGBoost model")
    code, _, err = run_main(capsys, "compile", d / "rf.pgn", "-o", d / "j.pgn")
    assert_one_line_error(code, err, "artifact")
    _no_leftovers(d, "j.pgn")


def test_corrupt_artifacts(work, capsys):
    d = work["dir"]
    raw = (d / "rf.pgn").read_bytes()
    (d / "trunc.pgn").write_bytes(raw[: len(raw) // 2])
    (d / "noise.pgn").write_bytes(os.urandom(256))
    with zipfile.ZipFile(d / "rf.pgn") as src, zipfile.ZipFile(d / "tamper.pgn", "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename.endswith(".npy"):
                data = data[:-1] + bytes([data[-1] ^ 1])
            dst.writestr(item, data)
    for name in ("trunc.pgn", "noise.pgn", "tamper.pgn"):
        for command in (["inspect", d / name], ["predict", d / name, d / "data.csv"]):
            code, _, err = run_main(capsys, *command)
            assert_one_line_error(code, err, name)


def test_verbose_shows_traceback(work):
    d = work["dir"]
    r = cli("predict", d / "nothing.pgn", d / "data.csv", "--verbose")
    assert r.returncode == 1
    assert "does not exist" in r.stderr
    r = cli("--verbose", "compile", d / "rf.joblib", "-o", d / "v.pgn")
    assert r.returncode == 1 and "Traceback" in r.stderr


# --------------------------------------------------------------- XGBoost and LightGBM files --


def _frontend_supports(model) -> bool:
    from peregrine.frontends import FRONTENDS, load_all

    load_all()
    return FRONTENDS.lookup(type(model)) is not None


@pytest.mark.parametrize("ext", ["json", "ubj"])
def test_xgboost_model_file(work, capsys, ext):
    xgb = pytest.importorskip("xgboost")
    d = work["dir"]
    X = work["X"].to_numpy()
    y = (X[:, 0] > 0.5).astype(int)
    booster = xgb.train(
        {"objective": "binary:logistic", "max_depth": 3}, xgb.DMatrix(X, y), num_boost_round=4
    )
    path = d / f"model.{ext}"
    booster.save_model(path)
    loaded = xgb.Booster(model_file=str(path))
    if not _frontend_supports(loaded):
        pytest.skip("this installation has no XGBoost frontend yet")
    code, out, err = run_main(
        capsys, "compile", path, "-o", d / f"xgb-{ext}.pgn", "--backend", "reference"
    )
    assert code == 0, err
    assert f"xgboost-{'json' if ext == 'json' else 'ubjson'}" in out
    code, out, err = run_main(capsys, "predict", d / f"xgb-{ext}.pgn", d / "data.parquet")
    assert code == 0, err
    got = pd.read_csv(__import__("io").StringIO(out)).to_numpy().ravel()
    np.testing.assert_allclose(got, loaded.predict(xgb.DMatrix(X)), rtol=RTOL, atol=ATOL)


def test_lightgbm_text_model(work, capsys):
    lgb = pytest.importorskip("lightgbm")
    d = work["dir"]
    X = work["X"]
    booster = lgb.train(
        {"objective": "regression", "num_leaves": 7, "verbose": -1},
        lgb.Dataset(X, X.f0 * 2 + X.f1),
        num_boost_round=5,
    )
    path = d / "lgb.txt"
    booster.save_model(path)
    loaded = lgb.Booster(model_file=str(path))
    if not _frontend_supports(loaded):
        pytest.skip("this installation has no LightGBM frontend yet")
    code, out, err = run_main(
        capsys, "compile", path, "-o", d / "lgb.pgn", "--backend", "reference"
    )
    assert code == 0, err
    code, _, err = run_main(
        capsys, "predict", d / "lgb.pgn", d / "data.csv", "-o", d / "lgb_pred.parquet"
    )
    assert code == 0, err
    got = pd.read_parquet(d / "lgb_pred.parquet")["predict"].to_numpy()
    np.testing.assert_allclose(got, loaded.predict(X.to_numpy()), rtol=RTOL, atol=ATOL)


def test_value_policy_errors_use_file_row_numbers(tmp_path, capsys):
    """A value the source library rejects (here inf for a model that refuses it) is reported
    with the row number in the file, not within the chunk."""
    import peregrine
    from peregrine.frontends import convert

    X = _rows(40)
    rf = sklearn_ensemble.RandomForestRegressor(n_estimators=2, max_depth=2, random_state=0)
    rf.fit(X, X.f0)
    if convert(rf).allow_inf:
        pytest.skip("this frontend accepts inf for RandomForestRegressor")
    peregrine.compile(rf, backend="reference").save(tmp_path / "m.pgn")
    X.iloc[30, 1] = np.inf
    X.to_csv(tmp_path / "inf.csv", index=False)
    code, _, err = run_main(capsys, "predict", tmp_path / "m.pgn", tmp_path / "inf.csv",
                            "--batch-size", "8")  # fmt: skip
    assert_one_line_error(code, err, "data row 31")


def test_inspect_when_backend_is_missing_here(work, capsys, monkeypatch):
    from peregrine.errors import UnsupportedModelError
    from peregrine.runtime import compiled

    def unavailable(*args, **kwargs):
        raise UnsupportedModelError("backend 'reference' is not available: test")

    monkeypatch.setattr(compiled, "build", unavailable)
    code, out, _ = run_main(capsys, "inspect", work["dir"] / "rf.pgn", "--json")
    assert code == 0
    info = json.loads(out)
    assert info["explain"] is None and "not available" in info["note"]
    assert info["n_features"] == 4  # everything else is still there
