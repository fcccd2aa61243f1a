"""The IR's operators. Each op's meaning is defined once, by its NumPy rule in
``backends/reference.py``; every other backend lowers each op once, in a table keyed by Op.

Shapes: every tensor is 2-D ``(batch, width)``; methods that return 1-D arrays squeeze at the
runtime boundary, so ops never special-case rank.
"""

from __future__ import annotations

import enum


class Op(enum.Enum):
    INPUT = "input"  # the feature matrix X (batch, n_features)
    # attrs: value — entries equal to it become NaN; compare_dtype (optional, e.g. "float32"):
    # compare after casting the input to that dtype (XGBoost's missing test is on float32(x))
    REPLACE_WITH_NAN = "replace_with_nan"
    TREE_ENSEMBLE = "tree_ensemble"  # attrs: forest — aggregated leaf values + base score
    AFFINE = "affine"  # attrs: scale, shift (per column or scalar): x * scale + shift
    LINK = "link"  # attrs: kind (Link), and kind-specific parameters
    BINARY_PROBA = "binary_proba"  # (n,1) probability p -> (n,2) [1-p, p]
    ARGMAX = "argmax"  # (n,k) -> (n,1) int64, first maximum wins (numpy semantics)
    THRESHOLD = "threshold"  # attrs: value, strict: (n,1) -> int64 (x > v) or (x >= v)
    # attrs: columns (ints), categories (one ascending float64 array per column). Each listed
    # column's value becomes its position among that column's categories (exact float64
    # equality, -0.0 == 0.0), NaN when absent or NaN; other columns pass through unchanged.
    # scikit-learn's OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=nan).
    ORDINAL_ENCODE = "ordinal_encode"


class Link(enum.Enum):
    """Element-wise output transforms. Parameters live in the LINK node's attrs."""

    IDENTITY = "identity"
    SIGMOID = "sigmoid"  # 1 / (1 + exp(-scale * x)); attrs: scale (default 1)
    SOFTMAX = "softmax"  # row-wise, max-subtracted
    EXP = "exp"
    # IsolationForest: -(2 ** (-x / denominator)), x = mean path length sum
    ISOLATION_SCORE = "isolation_score"  # attrs: denominator
