"""The IR's operators, by name. Each op's definition (attribute dataclass with defaults and
validation, width/dtype inference, and its meaning as a NumPy rule) is in ``ir/semantics/``,
one class per op, grouped by area; every other backend lowers each op once, in a table keyed
by Op, or runs that rule.

Shapes: every tensor is 2-D ``(batch, width)``; methods that return 1-D arrays squeeze at the
runtime boundary, so ops never special-case rank.
"""

from __future__ import annotations

import enum


class Op(enum.Enum):
    # core (ir/semantics/core.py, trees.py)
    INPUT = "input"  # the feature matrix X (batch, n_features)
    REPLACE_WITH_NAN = "replace_with_nan"  # a booster's missing value -> NaN
    TREE_ENSEMBLE = "tree_ensemble"  # a Forest's aggregated leaf values
    AFFINE = "affine"  # x * scale + shift
    LINK = "link"  # output transforms (Link)
    BINARY_PROBA = "binary_proba"  # p -> [1 - p, p]
    ARGMAX = "argmax"  # first maximum's column, int64
    THRESHOLD = "threshold"  # x > v (or >=), int64
    ORDINAL_ENCODE = "ordinal_encode"  # value -> position among a column's categories
    CTR_LOOKUP = "ctr_lookup"  # CatBoost's one-hot and CTR columns appended (semantics/ctr.py)
    # pipeline featurizers and linear models (ir/semantics/pipeline.py)
    LINEAR = "linear"  # x @ W + b
    SELECT = "select"  # x[:, columns]
    CONCAT = "concat"  # hstack of the inputs
    CENTER_SCALE = "center_scale"  # (x - center) / scale
    CLIP = "clip"
    NORMALIZE = "normalize"  # row norms l1/l2/max
    BINARIZE = "binarize"
    IMPUTE = "impute"  # missing -> per-column value
    ONE_HOT = "one_hot"
    CATEGORY_MAP = "category_map"  # category -> code
    POLYNOMIAL = "polynomial"  # products of powers
    UFUNC = "ufunc"  # an element-wise NumPy ufunc (UFUNCS)
    # kernel methods and neighbours (ir/semantics/kernels.py, neighbours.py)
    OVR_DECISION = "ovr_decision"  # one-vs-one votes + confidences
    KERNEL = "kernel"  # row-vs-vector kernel matrix
    SVM_PROBA = "svm_proba"  # libsvm's Platt + pairwise coupling
    KNN = "knn"  # k nearest fitted rows, weighted values
    # transformers (ir/semantics/transformers.py)
    INTERP = "interp"  # np.interp per column
    QUANTILE = "quantile"  # QuantileTransformer
    POWER = "power"  # Yeo-Johnson / Box-Cox
    DIGITIZE = "digitize"  # bin index per column
    BSPLINE = "bspline"  # SplineTransformer
    RANGE_CHECK = "range_check"  # rows outside [low, high] (an input check)
    KNN_IMPUTE = "knn_impute"  # KNNImputer
    # meta-estimators (ir/semantics/meta.py)
    WEIGHTED_SUM = "weighted_sum"  # members' outputs, weighted, in order
    WEIGHTED_MEDIAN = "weighted_median"  # AdaBoostRegressor's median
    LOG_ADD_EXP = "log_add_exp"  # Bagging's predict_log_proba
    # neural-network layers in the network's own dtype (ir/semantics/nn.py)
    DENSE = "dense"  # x @ W + b (torch.nn.Linear)
    ACTIVATION = "activation"  # an element-wise or row-wise activation (ACTIVATIONS)
    BATCH_NORM = "batch_norm"  # torch.nn.BatchNorm1d in eval mode


# Element-wise NumPy ufuncs a UFUNC node may apply (FunctionTransformer's common funcs).
UFUNCS = ("log1p", "expm1", "exp", "log", "sqrt", "absolute", "square", "negative", "sin", "cos",
          "tanh", "arcsinh", "log2", "log10", "exp2", "cbrt", "reciprocal", "sign", "floor",
          "ceil", "rint", "trunc")


# Activations an ACTIVATION node may apply (torch.nn's, by their functional names); "identity"
# only casts to the network's dtype.
ACTIVATIONS = ("identity", "relu", "hardtanh", "leaky_relu", "elu", "gelu", "tanh", "sigmoid",
               "softplus", "silu", "mish", "softmax", "log_softmax")


def class_pairs(n_classes: int) -> list[tuple[int, int]]:
    """The one-vs-one class pairs (i, j), i < j, in libsvm's and scikit-learn's order: the
    columns of OVR_DECISION's and SVM_PROBA's inputs (helper "kernel"/"meta" ops)."""
    return [(i, j) for i in range(n_classes) for j in range(i + 1, n_classes)]


class Link(enum.Enum):
    """Output transforms of the LINK op; its parameters are LINK's attributes
    (``ir/semantics/core.py``)."""

    IDENTITY = "identity"
    SIGMOID = "sigmoid"  # 1 / (1 + exp(-scale * x)); attrs: scale (default 1)
    SOFTMAX = "softmax"  # row-wise, max-subtracted
    EXP = "exp"
    # IsolationForest: -(2 ** (-x / denominator)), x = mean path length sum
    ISOLATION_SCORE = "isolation_score"  # attrs: denominator
    # (helper "logproba") row-wise x - logsumexp(x), logsumexp as sklearn's
    # utils._array_api._logsumexp: m = row max, c = count of entries equal to m,
    # s = sum exp(x - m) over the others, log1p(s / c) + log(c) + m (naive Bayes, QDA)
    LOG_SOFTMAX = "log_softmax"
