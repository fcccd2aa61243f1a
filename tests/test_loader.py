"""The library's model loader (peregrine.sources): format detection from content, loading
paths and bytes with each library's own loader, and peregrine.compile(path | bytes)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import peregrine
from peregrine.sources import ModelFileError, ModelFormat, detect_format, load_model

rng = np.random.default_rng(0)
X = rng.normal(size=(200, 4))
y = (X[:, 0] + X[:, 1] > 0).astype(int)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    out = {}
    xgboost = pytest.importorskip("xgboost")
    m = xgboost.XGBRegressor(n_estimators=5, max_depth=3).fit(X, y)
    m.get_booster().save_model(str(d / "m.json"))
    m.get_booster().save_model(str(d / "m.ubj"))
    out["xgb"] = (m, [d / "m.json", d / "m.ubj"])
    lightgbm = pytest.importorskip("lightgbm")
    m = lightgbm.LGBMRegressor(n_estimators=5, verbose=-1).fit(X, y)
    m.booster_.save_model(str(d / "m.txt"))
    out["lgb"] = (m, [d / "m.txt"])
    catboost = pytest.importorskip("catboost")
    m = catboost.CatBoostClassifier(iterations=5, depth=3, verbose=0,
                                   allow_writing_files=False).fit(X, y)
    m.save_model(str(d / "m.cbm"))
    m.save_model(str(d / "m_cb.json"), format="json")
    out["cb"] = (m, [d / "m.cbm", d / "m_cb.json"])
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.ensemble import RandomForestRegressor

    m = RandomForestRegressor(n_estimators=3, max_depth=3, random_state=0).fit(X, y)
    onx = skl2onnx.to_onnx(m, X[:1].astype(np.float32))
    (d / "m.onnx").write_bytes(onx.SerializeToString())
    (d / "m.bin").write_bytes(onx.SerializeToString())  # no telling extension
    out["onnx"] = (m, [d / "m.onnx", d / "m.bin"])
    (d / "m.pkl").write_bytes(pickle.dumps(m))
    out["dir"] = d
    return out


EXPECTED = {"m.json": ModelFormat.XGBOOST_JSON, "m.ubj": ModelFormat.XGBOOST_UBJSON,
            "m.txt": ModelFormat.LIGHTGBM_TEXT, "m.cbm": ModelFormat.CATBOOST_BINARY,
            "m_cb.json": ModelFormat.CATBOOST_JSON, "m.onnx": ModelFormat.ONNX,
            "m.bin": ModelFormat.ONNX}


@pytest.mark.parametrize("kind", ["xgb", "lgb", "cb", "onnx"])
def test_path_and_bytes_load_and_compile(files, kind):
    _, paths = files[kind]
    for path in paths:
        data = path.read_bytes()
        assert detect_format(data[:4096], path.name) is EXPECTED[path.name]
        assert detect_format(data[:4096]) is EXPECTED[path.name]  # content alone decides
        from_path = load_model(path)
        from_bytes = load_model(data)
        assert type(from_path.model) is type(from_bytes.model)
        a = peregrine.compile(str(path), backend="reference").predict(X)
        b = peregrine.compile(data, backend="reference").predict(X)
        np.testing.assert_array_equal(a, b)


def test_catboost_file_loads_as_its_wrapper(files):
    import catboost

    model, paths = files["cb"]
    for path in paths:
        loaded = load_model(path).model
        assert isinstance(loaded, catboost.CatBoostClassifier)
        np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


def test_pickle_needs_permission(files):
    path = files["dir"] / "m.pkl"
    with pytest.raises(ModelFileError, match="allow-pickle"):
        load_model(path)
    with pytest.raises(ModelFileError, match="allow-pickle"):
        peregrine.compile(str(path))
    assert load_model(path, allow_pickle=True).format is ModelFormat.PICKLE


@pytest.mark.parametrize("data, match", [
    (b"", "empty"), (b"\x00\x01garbage", "cannot tell"), (b'{"hello": 1}', "not an XGBoost"),
    (b"PK\x03\x04rest", "artifact"),
])
def test_bad_bytes(data, match):
    with pytest.raises(ModelFileError, match=match):
        load_model(data)


def test_missing_path(tmp_path):
    with pytest.raises(ModelFileError, match="does not exist"):
        peregrine.compile(str(tmp_path / "absent.onnx"))
    with pytest.raises(ModelFileError, match="directory"):
        load_model(tmp_path)
