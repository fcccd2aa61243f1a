"""The benchmark machinery (peregrine.bench), in-process: statistics, output checks, peer
selection and pluggability, failure isolation, report files and the plot. No timed assertions:
only counts, shapes and structure."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

sklearn_ensemble = pytest.importorskip("sklearn.ensemble")

from peregrine.bench import (  # noqa: E402
    PEERS,
    BenchConfig,
    Peer,
    Timing,
    align,
    compare,
    register_peer,
    run_benchmark,
    select_systems,
    time_batch,
    time_runs,
    write_report,
)
from peregrine.bench.data import synthetic_rows  # noqa: E402
from peregrine.bench.peers import model_n_features, package_version, score_method  # noqa: E402

FAST = dict(
    batch_sizes=(1, 64), repeat=2, batch1_rows=10, budget_s=5.0, memory="rss", peers=("reference",)
)


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(0)
    X = rng.random((200, 3)) * [1.0, 1000.0, 5.0] + [0.0, 1000.0, -10.0]
    y = (X[:, 0] > 0.5).astype(int)
    return sklearn_ensemble.RandomForestClassifier(4, max_depth=3, random_state=0).fit(X, y)


@pytest.fixture
def extra_peers():
    """Register peers for one test and remove them after, leaving the registry as it was."""
    added: list[str] = []

    def add(cls):
        register_peer(cls)
        added.append(cls.name)
        return cls

    yield add
    for name in added:
        PEERS.pop(name, None)


# ------------------------------------------------------------------------- statistics --


def test_timing_statistics():
    t = Timing(batch_size=100, rows_per_run=100, calls_per_run=1, seconds=[1.0, 2.0, 3.0, 4.0])
    assert t.median_s == 2.5
    assert t.rows_per_s == pytest.approx(40.0)
    slow, fast = t.rows_per_s_iqr
    assert slow < t.rows_per_s < fast
    d = t.to_json()
    assert d["runs"] == 4 and d["min_s"] == 1.0 and d["max_s"] == 4.0
    assert d["q1_s"] <= d["median_s"] <= d["q3_s"]
    empty = Timing(1, 1, 1, error="boom").to_json()
    assert empty["rows_per_s"] is None and empty["error"] == "boom"
    json.dumps(empty, allow_nan=False)


def test_time_runs_warms_up_then_repeats():
    calls = []
    seconds = time_runs(lambda: calls.append(1), repeat=4, budget_s=1e9)
    assert len(seconds) == 4 and len(calls) == 5  # one untimed warm-up
    calls.clear()
    seconds = time_runs(lambda: calls.append(1), repeat=4, budget_s=0.0)
    assert len(seconds) == 1 and len(calls) == 1  # over budget: the warm-up is the sample


def test_batch_one_is_single_row_calls():
    shapes = []
    X = np.zeros((50, 3), np.float32)
    t = time_batch(lambda x: shapes.append(x.shape), X, 1, repeat=2, budget_s=1e9, batch1_rows=7)
    assert t.rows_per_run == t.calls_per_run == 7
    assert set(shapes) == {(1, 3)} and len(shapes) == 7 * 3
    shapes.clear()
    t = time_batch(lambda x: shapes.append(x.shape), X, 20, repeat=2, budget_s=1e9)
    assert set(shapes) == {(20, 3)} and t.calls_per_run == 1


# --------------------------------------------------------------------- output checks --


def test_align_and_compare():
    p = np.array([0.1, 0.7, 0.4])
    two = np.stack([1 - p, p], axis=1)
    assert compare(two, p)["status"] == "ok"  # (n, 2) probabilities vs a Booster's (n,)
    assert compare(p, two)["status"] == "ok"
    assert compare(p.reshape(-1, 1), p)["status"] == "ok"
    off = compare(p + np.array([0, 1e-3, 0]), p)
    assert off["status"] == "mismatch" and off["rows_mismatched"] == 1
    assert off["max_abs_err"] == pytest.approx(1e-3)
    assert compare(p * (1 + 1e-7), p)["status"] == "ok"  # inside rtol 1e-5
    nan = np.array([np.nan, 1.0])
    assert compare(nan, nan)["status"] == "ok"
    labels = np.array(["a", "b", "a"], dtype=object)
    assert compare(labels.copy(), labels)["status"] == "ok"
    assert compare(np.array(["a", "a", "a"], dtype=object), labels)["rows_mismatched"] == 1
    assert compare(np.zeros((3, 3)), p)["status"] == "mismatch"
    assert align(np.zeros((3, 4)), p).shape == (3, 4)  # nothing sensible to do: left as is


# ------------------------------------------------------------------- peers and registry --


def test_helpers(model):
    assert model_n_features(model) == 3
    assert score_method(model) == "predict_proba"
    assert package_version("numpy")
    assert package_version("surely_not_an_installed_module") is None


def test_select_systems(model):
    systems, notes = select_systems(model, "auto")
    assert systems[0].kind == "source"
    assert "peregrine-reference" in [s.name for s in systems]
    names = [s.name for s in systems]
    assert len(names) == len(set(names))
    systems, notes = select_systems(model, ["reference", "bogus"])
    assert [s.name for s in systems] == ["source", "peregrine-reference"]
    assert any("bogus" in n and "unknown peer" in n for n in notes)
    systems, notes = select_systems(model, ["peregrine-nonexistent"])
    assert any("peregrine-nonexistent" in n for n in notes)


def test_builtin_peers_are_registered():
    from peregrine.bench import registered_peers

    assert {"onnxruntime", "tl2cgen", "lleaves", "hummingbird"} <= set(registered_peers())


def test_custom_peer_plugs_in_and_mismatch_is_marked(model, extra_peers):
    @extra_peers
    class Halver(Peer):  # a deliberately wrong "system"
        name = "test-halver"

        def prepare(self, model, n_features, *, threads=None):
            return lambda X: model.predict_proba(X) / 2

    @extra_peers
    class Missing(Peer):
        name = "test-missing"
        packages = ("surely_not_an_installed_module",)

    @extra_peers
    class Broken(Peer):
        name = "test-broken"

        def prepare(self, model, n_features, *, threads=None):
            raise RuntimeError("cannot convert")

    X = synthetic_rows(model, 100, 3)
    config = BenchConfig(
        **{**FAST, "peers": ("reference", "test-halver", "test-missing", "test-broken")}
    )
    result = run_benchmark(model, X, config)
    by_name = {s.name: s for s in result.systems}
    assert by_name["test-halver"].check["status"] == "mismatch"
    assert by_name["peregrine-reference"].check["status"] == "ok"
    assert by_name["test-broken"].status == "failed"
    assert "cannot convert" in by_name["test-broken"].note
    assert any("test-missing" in n and "not installed" in n for n in result.notes)
    assert [t.batch_size for t in by_name["test-halver"].timings] == [1, 64]


def test_reports_and_plot(model, tmp_path):
    from peregrine.bench.plot import make_figure

    X = synthetic_rows(model, 80, 3)  # fewer rows than the largest batch: tiled
    result = run_benchmark(
        model, X, BenchConfig(**{**FAST, "batch_sizes": (1, 16, 128), "memory": "tracemalloc"})
    )
    assert any("repeated" in n for n in result.notes)
    paths = write_report(result, str(tmp_path / "rep"))
    doc = json.loads(open(paths["json"]).read())
    assert doc["config"]["batch_sizes"] == [1, 16, 128]
    for system in doc["systems"]:
        assert "rss_growth_mb" in system["memory"]
        assert system["memory"]["compile_traced_peak_mb"] is not None
    fig = make_figure(result)
    assert len(fig.axes[0].get_lines()) == len(result.systems)
    assert fig.axes[0].get_xscale() == "log" and fig.axes[0].get_yscale() == "log"
    assert open(paths["plot"], "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    md = open(paths["markdown"]).read()
    header = next(line for line in md.splitlines() if line.startswith("| system | check"))
    assert header.count("batch") == 3


def test_synthetic_rows_follow_the_split_ranges(model):
    X = synthetic_rows(model, 2000, 3, seed=1)
    assert X.dtype == np.float32 and X.shape == (2000, 3)
    # feature 1 was fitted on [1000, 2000]: rows are drawn around its thresholds, not around 0
    assert 900 < np.median(X[:, 1]) < 2100


def test_booster_helpers():
    lgb = pytest.importorskip("lightgbm")
    X = np.random.default_rng(0).random((50, 2))
    booster = lgb.train({"verbose": -1, "num_leaves": 4}, lgb.Dataset(X, X[:, 0]), 2)
    assert model_n_features(booster) == 2
    assert score_method(booster) == "predict"


# ------------------------------------------------------------- `peregrine bench`, end to end --

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
QUICK = "--batch-sizes 1,100 --repeat 2 --batch1-rows 20 --memory rss".split()


def bench_cli(*args) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    cmd = [sys.executable, "-m", "peregrine.cli", "bench", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def files(model, tmp_path_factory):
    joblib = pytest.importorskip("joblib")
    pd = pytest.importorskip("pandas")
    d = tmp_path_factory.mktemp("bench")
    joblib.dump(model, d / "rf.joblib")
    pd.DataFrame(synthetic_rows(model, 150, 3)).to_parquet(d / "rows.parquet")
    return d


def test_bench_command_writes_report_files(files):
    report = files / "report"
    r = bench_cli(files / "rf.joblib", "--allow-pickle", "--rows", "300", *QUICK,
                  "--peers", "reference", "--report", report)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    doc = json.loads((report / "report.json").read_text())
    names = [s["name"] for s in doc["systems"]]
    assert names == ["source", "peregrine-reference"]
    for system in doc["systems"]:
        assert system["status"] == "ok", system
        assert [t["batch_size"] for t in system["timings"]] == [1, 100]
        for t in system["timings"]:
            assert t["runs"] >= 1 and t["rows_per_s"] > 0
            assert t["q1_s"] <= t["median_s"] <= t["q3_s"]
    assert doc["systems"][1]["check"]["status"] == "ok"
    assert doc["machine"]["cores"] and doc["versions"]["peregrine-ml"]
    # one line per system in the plot, and the PNG is a real image
    assert len(doc["plot"]["lines"]) == len(doc["systems"])
    assert (report / "plot.png").read_bytes().startswith(PNG_SIGNATURE)
    image = pytest.importorskip("matplotlib.image").imread(report / "plot.png")
    assert image.ndim == 3 and min(image.shape[:2]) > 100
    md = (report / "report.md").read_text()
    assert "| system |" in md and "peregrine[reference]" in md and "Machine" in md
    assert "batch 100" in md


def test_bench_command_with_data_file_and_unknown_peer(files):
    report = files / "report2"
    r = bench_cli(files / "rf.joblib", "--allow-pickle", "--data", files / "rows.parquet",
                  *QUICK, "--peers", "no-such-peer,reference", "--report", report)  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads((report / "report.json").read_text())
    assert doc["data"]["rows"] == 150
    assert any("no-such-peer" in n for n in doc["notes"])


def test_bench_command_errors_are_one_line(files, capsys):
    from peregrine.cli import main

    assert main(["bench", str(files / "rf.joblib"), "--report", str(files / "r3")]) == 1
    err = capsys.readouterr().err
    assert "--allow-pickle" in err and "Traceback" not in err
    (files / "two.csv").write_text("a,b\n1,2\n")
    args = ["bench", str(files / "rf.joblib"), "--allow-pickle", "--data", str(files / "two.csv")]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "expects 3 features" in err and len(err.strip().splitlines()) <= 2
    assert main(["bench", str(files / "rf.joblib"), "--batch-sizes", "0,10"]) == 2


@pytest.mark.peer
def test_bench_command_against_installed_peers(model, files):
    """Every installed peer on a LightGBM text model and the RF pickle; peers that are missing
    or fail are notes, never a crash, and every system that ran was checked."""
    lgb = pytest.importorskip("lightgbm")
    X = synthetic_rows(model, 300, 3)
    booster = lgb.train({"objective": "binary", "num_leaves": 7, "verbose": -1},
                        lgb.Dataset(X, (X[:, 0] > 0.5).astype(int)), num_boost_round=5)  # fmt: skip
    booster.save_model(files / "peer_lgb.txt")
    for path, extra in ((files / "peer_lgb.txt", []), (files / "rf.joblib", ["--allow-pickle"])):
        report = files / f"peers-{path.stem}"
        r = bench_cli(path, *extra, "--rows", "500", *QUICK, "--budget", "2", "--report", report)
        assert r.returncode == 0, r.stderr
        doc = json.loads((report / "report.json").read_text())
        for system in doc["systems"]:
            if system["status"] == "ok" and system["kind"] != "source":
                assert system["check"]["status"] in ("ok", "mismatch", "unchecked")


def test_bench_command_on_a_catboost_file(tmp_path):
    """A .cbm file read with load_model() reports n_features_in_ == 0: the input width comes
    from its frontend, and CatBoost's own predict is the reference the others are checked on."""
    cb = pytest.importorskip("catboost")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    model = cb.CatBoostClassifier(iterations=20, depth=3, verbose=0, thread_count=1)
    model.fit(X, (X[:, 0] + X[:, 1] > 0).astype(int))
    model.save_model(str(tmp_path / "m.cbm"))
    report = tmp_path / "report"
    r = bench_cli(tmp_path / "m.cbm", "--rows", "200", *QUICK, "--peers", "native",
                  "--report", report)  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads((report / "report.json").read_text())
    assert [s["status"] for s in doc["systems"]] == ["ok", "ok"], doc["systems"]
    assert doc["systems"][1]["check"]["status"] == "ok"


def test_bench_command_on_an_onnx_file(tmp_path):
    """An ONNX-ML file's own scorer is ONNX Runtime on the file: the reference for the check."""
    pytest.importorskip("onnxruntime")
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.ensemble import RandomForestClassifier

    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 5)).astype(np.float32)
    model = RandomForestClassifier(n_estimators=5, max_depth=4, random_state=0)
    model.fit(X, (X[:, 0] > 0).astype(int))
    onx = skl2onnx.to_onnx(model, X[:1], options={"zipmap": False})
    (tmp_path / "m.onnx").write_bytes(onx.SerializeToString())
    report = tmp_path / "report"
    r = bench_cli(tmp_path / "m.onnx", "--rows", "200", *QUICK, "--peers", "native",
                  "--report", report)  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads((report / "report.json").read_text())
    assert [s["status"] for s in doc["systems"]] == ["ok", "ok"], doc["systems"]
    assert doc["systems"][1]["check"]["status"] == "ok"
