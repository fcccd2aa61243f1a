"""Models the deployment tests (serve, Spark) score: one definition, shared."""

from __future__ import annotations

import numpy as np
import pandas as pd


def string_pipeline(n: int):
    """(fitted model, frame): a string column one-hot encoded (unseen values are an error) and
    two numbers, into a LogisticRegression with string labels."""
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    rng = np.random.default_rng(1)
    df = pd.DataFrame({"color": rng.choice(["red", "green", "blue"], n),
                       "x1": rng.normal(size=n), "x2": rng.normal(size=n)})
    y = np.where(df.x1 + (df.color == "red") > 0.5, "yes", "no")
    model = make_pipeline(
        ColumnTransformer([("oh", OneHotEncoder(handle_unknown="error"), ["color"])],
                          remainder="passthrough"),
        LogisticRegression(),
    ).fit(df, y)
    return model, df
