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
    # ---- pipeline operators (scikit-learn featurizers, linear models); torch lowerings in
    # backends/torch/ops_pipeline.py. Every rule computes in float64.
    LINEAR = "linear"  # attrs: weight (in, out), bias (out,): x @ W + b
    SELECT = "select"  # attrs: columns (ints): x[:, columns] (drop / reorder / repeat)
    CONCAT = "concat"  # several inputs, hstacked in order (ColumnTransformer, FeatureUnion)
    # attrs: center, scale (per column): (x - center) / scale (scikit-learn scalers' op order)
    CENTER_SCALE = "center_scale"
    CLIP = "clip"  # attrs: low, high (scalars): np.clip(x, low, high)
    NORMALIZE = "normalize"  # attrs: norm ("l1", "l2", "max"); zero norms divide by 1
    BINARIZE = "binarize"  # attrs: threshold: (x > threshold) as 0.0/1.0
    # attrs: values (per column), missing (float, NaN allowed): entries equal to missing
    # (NaN: isnan) become values[j]
    IMPUTE = "impute"
    # attrs: columns (ints), categories (per column float64 arrays; NaN matches NaN), slots (per
    # column int arrays: output column of each category, -1 = none), unknown_slots (per column:
    # output column set when no category matches, -1 = none); node width: 0/1 indicators
    ONE_HOT = "one_hot"
    # attrs: columns, categories (as ONE_HOT), codes (per column float arrays), unknown (per
    # column float): listed columns -> codes[matching category] or unknown; others unchanged
    CATEGORY_MAP = "category_map"
    POLYNOMIAL = "polynomial"  # attrs: powers (n_out, n_in): out_k = prod_j x_j ** p_kj
    UFUNC = "ufunc"  # attrs: name, one of UFUNCS


# Element-wise NumPy ufuncs a UFUNC node may apply (FunctionTransformer's common funcs).
UFUNCS = ("log1p", "expm1", "exp", "log", "sqrt", "absolute", "square", "negative", "sin", "cos",
          "tanh", "arcsinh", "log2", "log10", "exp2", "cbrt", "reciprocal", "sign", "floor",
          "ceil", "rint", "trunc")


class Link(enum.Enum):
    """Element-wise output transforms. Parameters live in the LINK node's attrs."""

    IDENTITY = "identity"
    SIGMOID = "sigmoid"  # 1 / (1 + exp(-scale * x)); attrs: scale (default 1)
    SOFTMAX = "softmax"  # row-wise, max-subtracted
    EXP = "exp"
    # IsolationForest: -(2 ** (-x / denominator)), x = mean path length sum
    ISOLATION_SCORE = "isolation_score"  # attrs: denominator
