"""The CLI's predict on a CSV for a pipeline whose string encoder saw None and NaN at fit time:
the vocabulary holds both (null categories, which a pandas Categorical refuses), and the
predictions are scikit-learn's on the same file as pandas reads it (an empty cell is NaN)."""

from __future__ import annotations

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
joblib = pytest.importorskip("joblib")

from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import OneHotEncoder  # noqa: E402

from peregrine.cli import main  # noqa: E402


def test_predict_csv_with_null_categories(tmp_path, capsys):
    rng = np.random.default_rng(0)
    n = 90
    color = np.array(["red", "blue", None, np.nan, "green"] * (n // 5), dtype=object)
    X = pd.DataFrame({"color": pd.Series(color, dtype=object), "x": rng.random(n)})
    y = (X.x > 0.5).astype(int) ^ (X.color == "red").astype(int)
    model = make_pipeline(
        ColumnTransformer([("c", OneHotEncoder(handle_unknown="ignore", sparse_output=False),
                            ["color"])], remainder="passthrough"),
        LogisticRegression()).fit(X, y)
    assert any(c is None for c in model[0].named_transformers_["c"].categories_[0])
    joblib.dump(model, tmp_path / "m.joblib")
    # empty cells, known strings and one never seen at fit time
    test = pd.DataFrame({"color": ["red", "", "purple", "green", "blue", ""] * 3,
                         "x": rng.random(18)})
    test.to_csv(tmp_path / "rows.csv", index=False)
    assert main(["compile", str(tmp_path / "m.joblib"), "-o", str(tmp_path / "m.pgn"),
                 "--allow-pickle", "--backend", "reference"]) == 0
    code = main(["predict", str(tmp_path / "m.pgn"), str(tmp_path / "rows.csv"), "-o",
                 str(tmp_path / "out.csv"), "--method", "predict_proba"])
    _, err = capsys.readouterr()
    assert code == 0, err
    want = model.predict_proba(pd.read_csv(tmp_path / "rows.csv"))
    got = pd.read_csv(tmp_path / "out.csv").to_numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
