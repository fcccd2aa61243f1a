"""Save/load: identical predictions, and every kind of damage is an ArtifactError."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier

import peregrine
from peregrine.errors import ArtifactError


@pytest.fixture(scope="module")
def fitted():
    X, y = make_classification(300, 6, n_informative=4, n_classes=3, random_state=1)
    X[::5, 2] = np.nan
    y = np.array(["a", "b", "c"], dtype=object)[y]
    return RandomForestClassifier(8, max_depth=5, random_state=0).fit(X, y), X


@pytest.fixture
def saved(fitted, tmp_path):
    model, _ = fitted
    compiled = peregrine.compile(model, "reference")
    path = tmp_path / "model.peregrine"
    compiled.save(path)
    return compiled, path


def _backends():
    from peregrine.backends import available_backends

    return available_backends()


@pytest.mark.parametrize("backend", ["reference", "torch", "torchscript", "native"])
def test_roundtrip_predicts_identically(fitted, tmp_path, backend):
    if backend not in _backends():
        pytest.skip(f"{backend} not available")
    model, X = fitted
    compiled = peregrine.compile(model, backend)
    path = tmp_path / "m.peregrine"
    digest = compiled.save(path)
    loaded = peregrine.load(path)
    assert loaded.backend == backend
    assert loaded.content_hash == digest
    assert loaded.methods == compiled.methods
    np.testing.assert_array_equal(loaded.predict_proba(X), compiled.predict_proba(X))
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    assert loaded.predict(X).dtype == model.predict(X).dtype


def test_load_with_other_backend(saved, fitted):
    _, path = saved
    model, X = fitted
    for backend in _backends():
        loaded = peregrine.load(path, backend=backend)
        np.testing.assert_allclose(loaded.predict_proba(X), model.predict_proba(X), rtol=1e-5,
                                   atol=1e-6)


def _rewrite(path, out, edit):
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = edit(info.filename, src.read(info.filename))
            if data is not None:
                dst.writestr(info.filename, data)


def test_tampered_array_rejected(saved, tmp_path):
    _, path = saved

    def flip(name, data):
        if name.startswith("arrays/") and name.endswith("00002.npy"):
            b = bytearray(data)
            b[-1] ^= 0x01
            return bytes(b)
        return data

    bad = tmp_path / "bad.peregrine"
    _rewrite(path, bad, flip)
    with pytest.raises(ArtifactError, match="hash"):
        peregrine.load(bad)


def test_tampered_manifest_rejected(saved, tmp_path):
    _, path = saved

    def edit(name, data):
        if name == "manifest.json":
            doc = json.loads(data)
            doc["body"]["spec"]["n_features"] = 7
            return json.dumps(doc).encode()
        return data

    bad = tmp_path / "bad.peregrine"
    _rewrite(path, bad, edit)
    with pytest.raises(ArtifactError, match="content hash"):
        peregrine.load(bad)


def test_missing_and_extra_members_rejected(saved, tmp_path):
    _, path = saved
    missing = tmp_path / "missing.peregrine"
    _rewrite(path, missing, lambda n, d: None if n.endswith("00001.npy") else d)
    with pytest.raises(ArtifactError, match="missing"):
        peregrine.load(missing)
    extra = tmp_path / "extra.peregrine"
    _rewrite(path, extra, lambda n, d: d)
    with zipfile.ZipFile(extra, "a") as zf:
        zf.writestr("payload.pkl", b"cos\nsystem\n(S'echo hi'\ntR.")
    with pytest.raises(ArtifactError, match="unlisted"):
        peregrine.load(extra)


def test_truncated_file_rejected(saved, tmp_path):
    _, path = saved
    data = path.read_bytes()
    for cut in (10, len(data) // 2, len(data) - 5):
        bad = tmp_path / f"trunc{cut}.peregrine"
        bad.write_bytes(data[:cut])
        with pytest.raises(ArtifactError):
            peregrine.load(bad)


def test_not_an_artifact(tmp_path):
    junk = tmp_path / "junk.peregrine"
    junk.write_bytes(b"definitely not a zip")
    with pytest.raises(ArtifactError, match="not a Peregrine artifact"):
        peregrine.load(junk)
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("hello.txt", "hi")
    with pytest.raises(ArtifactError, match="no manifest"):
        peregrine.load(other)


def test_incompatible_version_rejected(saved, tmp_path):
    import hashlib

    _, path = saved

    def bump(name, data):
        if name == "manifest.json":
            doc = json.loads(data)
            doc["body"]["format_version"] = 999
            body = json.dumps(doc["body"], sort_keys=True).encode()
            doc["content_hash"] = hashlib.sha256(body).hexdigest()  # a well-formed future file
            return json.dumps(doc).encode()
        return data

    bad = tmp_path / "future.peregrine"
    _rewrite(path, bad, bump)
    with pytest.raises(ArtifactError, match="version 999"):
        peregrine.load(bad)


def test_arrays_never_unpickled(saved, tmp_path):
    """An object array smuggled in with a matching hash is refused by allow_pickle=False."""
    import hashlib
    import io

    _, path = saved
    buf = io.BytesIO()
    np.save(buf, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    evil = buf.getvalue()

    def edit(name, data):
        if name.endswith("00000.npy"):
            return evil
        if name == "manifest.json":
            doc = json.loads(data)
            files = doc["body"]["files"]
            key = next(k for k in files if k.endswith("00000.npy"))
            files[key] = hashlib.sha256(evil).hexdigest()
            body = json.dumps(doc["body"], sort_keys=True).encode()
            doc["content_hash"] = hashlib.sha256(body).hexdigest()
            return json.dumps(doc).encode()
        return data

    bad = tmp_path / "evil.peregrine"
    _rewrite(path, bad, edit)
    with pytest.raises(ArtifactError):
        peregrine.load(bad)


def test_missing_file():
    with pytest.raises(FileNotFoundError):
        peregrine.load("/nonexistent/model.peregrine")


def test_load_accepts_bytes_and_file_objects(tmp_path):
    """What a server, a Dask worker or a Spark task holds: the artifact's bytes, no file."""
    import io

    from sklearn.ensemble import RandomForestRegressor

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 5))
    model = RandomForestRegressor(n_estimators=5, max_depth=4, random_state=0).fit(X, X[:, 0])
    path = tmp_path / "m.peregrine"
    peregrine.compile(model, "reference").save(path)
    data = path.read_bytes()
    with open(path, "rb") as handle:
        for source in (data, bytearray(data), io.BytesIO(data), handle):
            np.testing.assert_array_equal(peregrine.load(source).predict(X), model.predict(X))
    with pytest.raises(peregrine.ArtifactError, match="artifact bytes"):
        peregrine.load(data[: len(data) // 2])


@pytest.mark.parametrize("backend", ["reference", "native"])
def test_saving_twice_gives_identical_bytes(fitted, tmp_path, monkeypatch, backend):
    """Artifact bytes depend on the model only: Dask/Spark workers cache kernels by the bytes'
    SHA-256, and a build system compares them. The clock is moved between saves (zip entries
    used to carry the time of writing)."""
    import time as time_module

    model, X = fitted
    compiled = peregrine.compile(model, backend)
    a, b = tmp_path / "a.peregrine", tmp_path / "b.peregrine"
    compiled.save(a)
    real = time_module.time
    monkeypatch.setattr(zipfile.time, "time", lambda: real() + 3 * 86400 + 7)
    compiled.save(b)
    assert a.read_bytes() == b.read_bytes()
    with zipfile.ZipFile(a) as zf:
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    assert (peregrine.load(b).predict(X) == model.predict(X)).all()
