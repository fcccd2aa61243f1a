"""The IR's operators. Each op's meaning is defined once, by its NumPy rule in
``backends/reference.py`` (the kernel, meta-estimator and transformer ops' rules in
``reference_models.py`` and ``reference_transformers.py``, registered by it); every other backend lowers each op once, in a table keyed by Op.

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
    # ---- kernel methods and neighbours (helper "kernel": SVMs, KNN, KernelPCA); torch
    # lowerings in backends/torch/ops_kernel.py. Every rule computes in float64.
    # inputs: predictions (n, P) 0/1, confidences (n, P) for the P = k(k-1)/2 pairs i<j in
    # order; attrs: n_classes. scikit-learn's utils.multiclass._ovr_decision_function: votes
    # plus sum_of_confidences / (3 * (|sum| + 1)); prediction 0 votes i, 1 votes j.
    OVR_DECISION = "ovr_decision"
    # attrs: kind ("linear", "poly", "rbf", "sigmoid", "cosine"), vectors (m, d), gamma, coef0,
    # degree, form ("libsvm": libsvm's k_function, rbf as exp(-gamma * sum((x - v)**2)), poly
    # by repeated squaring; "pairwise": sklearn.metrics.pairwise kernels, rbf through the
    # expanded squared euclidean distance): (n, d) -> (n, m) kernel of each row vs each vector;
    # optional center_rows (m,), center_all: KernelCenterer.transform applied to the result
    KERNEL = "kernel"
    # attrs: prob_a, prob_b (per pair), n_classes. libsvm's svm_predict_probability on decision
    # values (n, P): Platt sigmoid per pair clipped to [1e-7, 1 - 1e-7], then libsvm's
    # multiclass_probability (Wu, Lin & Weng pairwise coupling iteration; 2 classes too)
    SVM_PROBA = "svm_proba"
    # attrs: metric ("euclidean", "manhattan", "chebyshev", "minkowski", "cosine"), p
    # (minkowski), vectors (m, d), k, weights ("uniform" | "distance"), values (m, w),
    # normalize (bool). (n, d) -> (n, w): each row's distances to the vectors from the per-pair
    # differences (cosine as sklearn's cosine_distances: 1 - normalized dot, clipped to
    # [0, 2]); the k smallest (ties: lowest index first, a stable sort's first k); weights 1
    # or 1/dist (rows with a zero distance: 1 for zero distances, 0 for the rest); output
    # sum_i w_i * values[idx_i] divided by sum_i w_i, or when normalize by the row sum of that
    # (0 -> 1), as KNeighborsClassifier.predict_proba
    KNN = "knn"

    # ---- transformers area (QuantileTransformer, PowerTransformer, KBinsDiscretizer,
    # SplineTransformer, KNNImputer); torch lowerings in backends/torch/ops_transformers.py.
    # attrs: xp, fp (one 1-D float64 array per input column; xp non-decreasing, lengths may
    # differ between columns), left, right (per column). Column j -> np.interp(x, xp[j], fp[j],
    # left[j], right[j]) exactly: with i the last index where xp[i] <= x, x < xp[0] -> left,
    # x > xp[-1] -> right, x == xp[i] -> fp[i] (the last of repeated xp), else
    # slope * (x - xp[i]) + fp[i]; NaN -> NaN (a one-point table maps NaN to fp[0], as numpy)
    INTERP = "interp"
    # attrs: quantiles (per column, ascending), references (1-D), output ("uniform"|"normal").
    # QuantileTransformer._transform_col: 0.5 * (interp(x, q, r) - interp(-x, -q[::-1],
    # -r[::-1])), stored in the input's dtype; bounds set to 0/1 (x == q[0] / q[-1] for
    # uniform; x -+ 1e-7 beyond them, computed in the input's dtype, for normal); normal:
    # ndtri clipped to ndtri(1e-7 - eps), ndtri(1 - (1e-7 - eps)). NaN passes through
    QUANTILE = "quantile"
    # attrs: method ("yeo-johnson"|"box-cox"), lambdas (per column): scipy's yeojohnson /
    # special.boxcox formulas and branches in float64, stored in the input's dtype; NaN -> NaN
    POWER = "power"
    # attrs: edges (per column, ascending 1-D): count of edges <= x, i.e.
    # np.searchsorted(edges, x, side="right"), as float64 (NaN -> len(edges))
    DIGITIZE = "digitize"
    # attrs: knots (per column, the BSpline's t), degree, coef (rows, n_splines) shared by all
    # columns, extrapolation ("error"|"continue"|"periodic"|"constant"|"linear"), f_min,
    # f_max, fp_min, fp_max (per column (n_splines,) arrays: spline values and slopes at low
    # and high), low, high, reach (per column: the range constant/linear extrapolate beyond
    # and how many end splines they set; sklearn's degree <= 1 increment leaks into later
    # columns, hence per column). Output (n, columns * n_splines): column j's
    # block is scipy BSpline(t, coef, degree)(x) by de Boor's recursion, as
    # SplineTransformer.transform (periodic: x wrapped first; error: NaN outside [t[k], t[n]];
    # constant/linear: outside rows as sklearn sets them). NaN input -> zeros
    BSPLINE = "bspline"
    # attrs: low, high (per column): 1.0 where x < low or x > high, else 0.0 (NaN -> 0.0).
    # Used as an INPUT_ERRORS check (rows sklearn rejects: Box-Cox x <= 0, spline knots)
    RANGE_CHECK = "range_check"
    # attrs: fit_X (m, d) with NaN, n_neighbors, weights ("uniform"|"distance"), columns
    # (ints: the columns to fill), fill (per column of the input: the value when no donor has
    # a distance, sklearn's masked column mean). KNNImputer.transform: nan_euclidean distances
    # to fit_X (sklearn's expanded formula); each NaN in a listed column gets the weighted
    # mean of the k nearest fit rows having that column (ties: lower row index first; NaN
    # distances weigh 0). Width d: other entries pass through
    KNN_IMPUTE = "knn_impute"

    # ---- meta-estimators (helper "meta": Voting, Stacking, Bagging, AdaBoost, calibration,
    # multiclass wrappers); torch lowerings in backends/torch/ops_meta.py; float64 throughout.
    # several inputs of one width; attrs: weights (one float per input), divisor (float):
    # (((x0 * w0) + x1 * w1) + ...) / divisor, summed in input order (np.average over the
    # estimator axis, bincount's accumulation, Bagging's and AdaBoost's running sums)
    WEIGHTED_SUM = "weighted_sum"
    # attrs: weights (m,). Input (n, m) predictions -> (n, 1): AdaBoostRegressor's
    # _get_median_predict: argsort each row, cumulative weights in that order, the first
    # sorted prediction whose cumulative weight >= half the row's total
    WEIGHTED_MEDIAN = "weighted_median"

    # ---- predict_log_proba (helper "logproba"); torch lowering in backends/torch/ops.py.
    # Several inputs (members' log-probabilities); attrs: columns (per input: the output column
    # of each of its columns), starts (input index where each joblib job begins, then the
    # count), shift. BaggingClassifier.predict_log_proba: per job a running np.logaddexp from
    # -inf over its members (columns a member lacks unchanged), then np.logaddexp of the jobs
    # in order, minus shift (log n_estimators); float64
    LOG_ADD_EXP = "log_add_exp"

# Element-wise NumPy ufuncs a UFUNC node may apply (FunctionTransformer's common funcs).
UFUNCS = ("log1p", "expm1", "exp", "log", "sqrt", "absolute", "square", "negative", "sin", "cos",
          "tanh", "arcsinh", "log2", "log10", "exp2", "cbrt", "reciprocal", "sign", "floor",
          "ceil", "rint", "trunc")


def class_pairs(n_classes: int) -> list[tuple[int, int]]:
    """The one-vs-one class pairs (i, j), i < j, in libsvm's and scikit-learn's order: the
    columns of OVR_DECISION's and SVM_PROBA's inputs (helper "kernel"/"meta" ops)."""
    return [(i, j) for i in range(n_classes) for j in range(i + 1, n_classes)]


class Link(enum.Enum):
    """Element-wise output transforms. Parameters live in the LINK node's attrs."""

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
