"""scikit-learn gradient boosting: GradientBoosting{Classifier,Regressor} and
HistGradientBoosting{Classifier,Regressor}.

GradientBoosting (sklearn/ensemble/_gb.py, _gradient_boosting.pyx): X is cast to float32;
``predict_stages`` walks every DecisionTreeRegressor with ``X[i, f] <= threshold`` (it ignores
``missing_go_to_left``: NaN never reaches it, ``validate_data`` rejects it) and adds
``learning_rate * value`` to the init estimator's raw prediction (``_raw_predict_init``).

HistGradientBoosting (_hist_gradient_boosting/_predictor.pyx, ``_predict_one_from_raw_data``):
X is float64 and ``x <= num_threshold`` decides; NaN follows ``missing_go_to_left``; a categorical
value goes left iff its code is in ``raw_left_cat_bitsets``, right iff it is another known code,
else (negative, unknown) it is treated as missing. Since 1.4 every categorical column first goes
through an OrdinalEncoder (``_preprocessor``: values -> position among the sorted fit-time
categories, unknown/NaN -> NaN, categorical columns moved in front), so the predictors only ever
see integer codes in [0, n_categories) or NaN. We reproduce that encoder with Op.ORDINAL_ENCODE
(or ModelSpec.category_maps for pandas category columns) so every input value is exact.

HistGradientBoosting has no public tree structure: this module reads the private fitted state
``_predictors`` (TreePredictor.nodes / raw_left_cat_bitsets), ``_baseline_prediction``,
``_bin_mapper.make_known_categories_bitsets()``, ``_preprocessor`` and ``_loss``, all as of
scikit-learn 1.4-1.9. GradientBoosting's baseline comes from its own ``_raw_predict_init`` and
the loss object ``_loss``.

Known gaps (inputs where the compiled model answers and sklearn does something else):
+-inf in a categorical column (sklearn's encoder raises; here it is missing); a model fit on a
DataFrame with explicit ``categorical_features`` whose column has pandas category dtype with
*numeric* categories (the runtime turns category columns into codes, the graph expects values:
fit with the default "from_dtype" instead); numpy input to a model fit with "from_dtype" (codes
are expected, sklearn would look the numbers up among the categories).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np
from sklearn._loss.link import IdentityLink, LogLink
from sklearn._loss.loss import ExponentialLoss, HalfBinomialLoss, HalfMultinomialLoss
from sklearn.dummy import DummyClassifier, DummyRegressor
from sklearn.ensemble import (
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    HistGradientBoostingClassifier,
    HistGradientBoostingRegressor,
)
from sklearn.utils._missing import is_scalar_nan

from peregrine.frontends.base import (
    add_log_proba,
    declare_params,
    refuse_overrides,
    register_frontend,
    require_fitted,
    unsupported,
)
from peregrine.frontends.sklearn_trees import accepts_nan, tree_arrays, tree_model_spec
from peregrine.ir import GraphBuilder, Link, Op, concat_trees, make_forest
from peregrine.ir.spec import MethodSpec, ModelSpec

# ---------------------------------------------------------------------------- graph tails --


def _classifier_graph(forest, pre, labels, proba_link: dict, strict: bool,
                      log_proba: bool = False):
    """raw -> decision_function; link -> predict_proba; raw -> label. ``strict`` is the binary
    rule: HGB predicts class 1 iff raw > 0, GB iff raw >= 0 (see their predict methods).
    ``log_proba``: also predict_log_proba = np.log(predict_proba) (GB has it, HGB does not)."""
    g = GraphBuilder()
    x = g.input(forest.n_features)
    if pre is not None:
        x = g.add(Op.ORDINAL_ENCODE, (x,), width=forest.n_features, **pre)
    k = forest.n_outputs
    raw = g.add(Op.TREE_ENSEMBLE, (x,), width=k, forest=forest)
    if k == 1:
        p1 = g.add(Op.LINK, (raw,), width=1, **proba_link)
        proba = g.add(Op.BINARY_PROBA, (p1,), width=2)
        label = g.add(Op.THRESHOLD, (raw,), dtype="int64", width=1, value=0.0, strict=strict)
    else:
        proba = g.add(Op.LINK, (raw,), width=k, kind=Link.SOFTMAX)
        label = g.add(Op.ARGMAX, (raw,), dtype="int64", width=1)  # argmax of raw, as sklearn
    outputs = {"decision_function": raw, "predict_proba": proba, "predict": label}
    methods = {
        "predict": MethodSpec("predict", labels=np.asarray(labels)),
        "predict_proba": MethodSpec("predict_proba"),
        "decision_function": MethodSpec("decision_function", squeeze=k == 1),
    }
    if log_proba:
        add_log_proba(g, outputs, methods, max(k, 2))
    return g.build(outputs), methods


def _regressor_graph(forest, pre, link: Link):
    g = GraphBuilder()
    x = g.input(forest.n_features)
    if pre is not None:
        x = g.add(Op.ORDINAL_ENCODE, (x,), width=forest.n_features, **pre)
    raw = g.add(Op.TREE_ENSEMBLE, (x,), width=1, forest=forest)
    out = g.add(Op.LINK, (raw,), width=1, kind=link)
    return g.build({"predict": out}), {"predict": MethodSpec("predict", squeeze=True)}


# ------------------------------------------------------------------------ GradientBoosting --


def _gb_baseline(model: Any) -> np.ndarray:
    """Raw init prediction, computed by sklearn's own ``_raw_predict_init`` (clip + loss link,
    _gb.py ``_init_raw_predictions``) on one row: exact, and X-independent for the init
    estimators accepted here (zero, DummyRegressor, DummyClassifier other than 'stratified')."""
    init = model.init_
    for cls in (DummyClassifier, DummyRegressor):
        if isinstance(init, cls):  # sklearn calls its predict(_proba) below: not overridden
            refuse_overrides(type(init), cls)
    if isinstance(init, str):
        if init != "zero":
            raise unsupported(model, f"init={init!r}", "None, 'zero' or a Dummy estimator")
    elif isinstance(init, DummyClassifier):
        if init.strategy == "stratified":
            raise unsupported(model, "init=DummyClassifier(strategy='stratified') (random)",
                              "prior, most_frequent, uniform, constant")
    elif not isinstance(init, DummyRegressor):
        raise unsupported(model, f"init estimator {type(init).__name__} (depends on X)",
                          "init=None, 'zero', DummyRegressor or DummyClassifier")
    x0 = np.zeros((1, model.n_features_in_), dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = model._raw_predict_init(x0)
    return np.asarray(raw, dtype=np.float64).reshape(-1)


def _gb_accepts_nan(model: Any) -> bool:
    """GradientBoosting rejects NaN in 1.9 (validate_data with the default ensure_all_finite);
    probe rather than hard-code, quietly (a DataFrame-fit model warns about the probe's ndarray).
    Were NaN accepted, predict_stages would still send it right: nan_left is False throughout."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return accepts_nan(model, model.n_features_in_)


def _gb_forest(model: Any):
    require_fitted(model, "estimators_", "init_", "n_features_in_")
    estimators = np.asarray(model.estimators_, dtype=object)
    n_stages, k = estimators.shape
    lr = float(model.learning_rate)
    parts, groups = [], []
    for i in range(n_stages):  # stage-major, as predict_stages accumulates
        for j in range(k):
            tree = estimators[i, j].tree_
            part = tree_arrays(tree)
            # predict_stages compares X <= threshold with no missing-value branch: NaN goes right
            part["nan_left"] = np.zeros(len(part["feature"]), dtype=bool)
            # out += scale * value, both double (_predict_regression_tree_inplace_fast_dense)
            part["value"] = lr * np.asarray(tree.value[:, 0, 0], dtype=np.float64)
            parts.append(part)
            groups.append(j)
    forest = make_forest(
        **concat_trees(parts), tree_group=groups, n_features=model.n_features_in_,
        n_outputs=k, base_score=_gb_baseline(model), input_dtype=np.dtype(np.float32),
    )
    return forest


@register_frontend(
    GradientBoostingClassifier, library="scikit-learn",
    methods=("predict", "predict_proba", "predict_log_proba", "decision_function"),
    notes="log_loss (binary/multiclass), exponential; init None/'zero'/Dummy",
)
def convert_gb_classifier(model: Any) -> ModelSpec:
    require_fitted(model, "classes_", "estimators_", "init_")
    forest = _gb_forest(model)
    loss = model._loss
    if isinstance(loss, ExponentialLoss):
        link = {"kind": Link.SIGMOID, "scale": 2.0}  # HalfLogitLink.inverse: expit(2 * raw)
    elif isinstance(loss, (HalfBinomialLoss, HalfMultinomialLoss)):
        link = {"kind": Link.SIGMOID, "scale": 1.0}
    else:
        raise unsupported(model, f"loss {type(loss).__name__}", "log_loss, exponential")
    # GB binary predict: (raw >= 0) -> class 1 (_gb.py GradientBoostingClassifier.predict)
    graph, methods = _classifier_graph(forest, None, model.classes_, link, strict=False,
                                       log_proba=True)
    return tree_model_spec(model, graph, methods, model.n_features_in_,
                           allow_nan=_gb_accepts_nan(model))


@register_frontend(
    GradientBoostingRegressor, library="scikit-learn", methods=("predict",),
    notes="squared_error, absolute_error, huber, quantile; init None/'zero'/DummyRegressor",
)
def convert_gb_regressor(model: Any) -> ModelSpec:
    forest = _gb_forest(model)
    if not isinstance(model._loss.link, IdentityLink):  # predict returns raw (_gb.py)
        raise unsupported(model, f"loss {model.loss!r}", "losses with an identity link")
    graph, methods = _regressor_graph(forest, None, Link.IDENTITY)
    return tree_model_spec(model, graph, methods, model.n_features_in_,
                           allow_nan=_gb_accepts_nan(model))


# -------------------------------------------------------------------- HistGradientBoosting --


def _hgb_columns(model: Any):
    """(order, encode attrs or None, category_maps). ``order[f]`` is the input column of the
    predictors' feature f: ``_preprocessor`` (a ColumnTransformer) puts the OrdinalEncoder's
    columns first, then the numerical ones (gradient_boosting.py ``_preprocess_X``)."""
    n = int(model.n_features_in_)
    pre = getattr(model, "_preprocessor", None)
    if pre is None:
        return np.arange(n), None, {}
    is_cat = np.asarray(model.is_categorical_, dtype=bool)
    order = np.concatenate([np.flatnonzero(is_cat), np.flatnonzero(~is_cat)])
    slices = pre.output_indices_
    rest = slices.get("remainder", slice(0, 0))
    if slices["encoder"] != slice(0, int(is_cat.sum())) or rest.start != rest.stop:
        raise unsupported(model, "an unexpected categorical preprocessor layout",
                          "scikit-learn 1.4-1.9 HistGradientBoosting")
    encoder = pre.named_transformers_["encoder"]
    # With categorical_features="from_dtype" the columns were pandas categoricals at fit time,
    # so inputs are DataFrames: map values to codes at the boundary (category_maps) and let the
    # graph check the codes. Otherwise (indices, mask, names) the raw numbers are encoded in
    # the graph, so numpy input is exact too.
    from_dtype = isinstance(model.categorical_features, str)
    cols, cats_out, maps = [], [], {}
    for j, cats in zip(np.flatnonzero(is_cat), encoder.categories_):
        if len(cats) and is_scalar_nan(cats[-1]):  # NaN is the missing value, not a category
            cats = cats[:-1]
        if cats.dtype.kind in "iufb" and not from_dtype:
            values = np.asarray(cats, dtype=np.float64)
        else:
            maps[int(j)] = tuple(cats.tolist())
            values = np.arange(len(cats), dtype=np.float64)
        cols.append(int(j))
        cats_out.append(values)
    return order, {"columns": tuple(cols), "categories": tuple(cats_out)}, maps


def _hgb_forest(model: Any, order: np.ndarray):
    require_fitted(model, "_predictors", "_baseline_prediction", "_bin_mapper", "n_features_in_")
    known, f_idx_map = model._bin_mapper.make_known_categories_bitsets()
    parts, groups, bitsets, unknown_left = [], [], [], []
    for predictors in model._predictors:  # iteration-major, as _predict_iterations adds
        for k, pred in enumerate(predictors):
            nodes = pred.nodes
            leaf = nodes["is_leaf"].astype(bool)
            cat = nodes["is_categorical"].astype(bool) & ~leaf
            mgl = nodes["missing_go_to_left"].astype(bool) & ~leaf
            feat = nodes["feature_idx"].astype(np.int64)
            cat_index = np.full(len(nodes), -1, dtype=np.int64)
            for node in np.flatnonzero(cat):
                # left iff code in raw_left bitset, or code not known and missing goes left;
                # anything outside [0, 256) (never produced by the encoder) is missing too
                words = pred.raw_left_cat_bitsets[nodes["bitset_idx"][node]].astype(np.uint32)
                if mgl[node]:
                    words = words | ~known[f_idx_map[feat[node]]].astype(np.uint32)
                cat_index[node] = len(bitsets)
                bitsets.append(words)
                unknown_left.append(bool(mgl[node]))
            parts.append({
                "feature": np.where(leaf, -1, order[np.where(leaf, 0, feat)]),
                "threshold": np.where(leaf | cat, 0.0, nodes["num_threshold"]),
                "left": np.where(leaf, -1, nodes["left"].astype(np.int64)),
                "right": np.where(leaf, -1, nodes["right"].astype(np.int64)),
                "nan_left": mgl,
                "value": np.where(leaf, nodes["value"], 0.0),
                "cat_index": cat_index,
            })
            groups.append(k)
    n_out = int(model.n_trees_per_iteration_)
    if not parts:
        raise unsupported(model, "a model with zero fitted iterations")
    cat_kw = {}
    if bitsets:
        cat_kw = {"cat_bitsets": np.stack(bitsets), "cat_unknown_left": unknown_left,
                  "cat_negative_before_trunc": True}
    arrays = concat_trees(parts)
    if not bitsets:
        arrays.pop("cat_index")
    return make_forest(
        **arrays, tree_group=groups, n_features=model.n_features_in_, n_outputs=n_out,
        base_score=np.asarray(model._baseline_prediction, np.float64).reshape(n_out),
        input_dtype=np.dtype(np.float64), **cat_kw,
    )


def _hgb_spec(model, graph, methods, maps) -> ModelSpec:
    # validate_data(..., ensure_all_finite=False): NaN and +-inf are both accepted, except in
    # a numeric column declared categorical: the fitted _preprocessor's OrdinalEncoder checks
    # those with ensure_all_finite='allow-nan' and raises on +-inf. Refused then for the whole
    # input (a pipeline's rule too: "accepted means answered", steps.model_spec), over-strict
    # for an infinity in the other columns. (A pandas category column holds no infinity.)
    is_cat = getattr(model, "is_categorical_", None)  # None: no categorical feature
    is_cat = np.zeros(0, bool) if is_cat is None else np.asarray(is_cat, dtype=bool)
    numeric_cat = any(j not in maps for j in np.flatnonzero(is_cat))
    spec = tree_model_spec(model, graph, methods, model.n_features_in_, allow_nan=True,
                           category_maps=maps)
    # sparse input: "Sparse data was passed for X, but dense data is required"
    # (checked in float64, X_DTYPE: 1e300 is a finite, unseen category there)
    return dataclasses.replace(spec, allow_inf=not numeric_cat, sparse_absent="refuse",
                               finite_dtype="float64")


@register_frontend(
    HistGradientBoostingClassifier, library="scikit-learn",
    methods=("predict", "predict_proba", "decision_function"),
    notes="binary/multiclass log_loss; NaN, categorical splits, pandas categories",
)
def convert_hgb_classifier(model: Any) -> ModelSpec:
    require_fitted(model, "classes_", "_predictors")
    order, pre, maps = _hgb_columns(model)
    forest = _hgb_forest(model, order)
    if not isinstance(model._loss, (HalfBinomialLoss, HalfMultinomialLoss)):
        raise unsupported(model, f"loss {type(model._loss).__name__}", "log_loss")
    # HGB binary predict: (raw > 0) -> class 1 (gradient_boosting.py predict: "> 0")
    graph, methods = _classifier_graph(forest, pre, model.classes_,
                                       {"kind": Link.SIGMOID, "scale": 1.0}, strict=True)
    return _hgb_spec(model, graph, methods, maps)


@register_frontend(
    HistGradientBoostingRegressor, library="scikit-learn", methods=("predict",),
    notes="squared_error, absolute_error, quantile, poisson, gamma; NaN, categorical splits",
)
def convert_hgb_regressor(model: Any) -> ModelSpec:
    require_fitted(model, "_predictors")
    order, pre, maps = _hgb_columns(model)
    forest = _hgb_forest(model, order)
    link = model._loss.link  # predict = link.inverse(raw)
    if isinstance(link, IdentityLink):
        kind = Link.IDENTITY
    elif isinstance(link, LogLink):
        kind = Link.EXP
    else:
        raise unsupported(model, f"loss {type(model._loss).__name__} (link "
                          f"{type(link).__name__})", "identity- or log-link losses")
    graph, methods = _regressor_graph(forest, pre, kind)
    return _hgb_spec(model, graph, methods, maps)

# tests/test_param_audit.py: learning_rate scales each stage at predict time, init picks the
# raw score's start, loss the link; HGB's categorical_features decide the bitset splits.
_GB_FIT = ("ccp_alpha criterion max_depth max_features max_leaf_nodes min_impurity_decrease "
           "min_samples_leaf min_samples_split min_weight_fraction_leaf n_estimators subsample")
declare_params(GradientBoostingClassifier, implemented="init learning_rate loss",
               ignored=_GB_FIT)
declare_params(GradientBoostingRegressor, implemented="init learning_rate loss",
               ignored=_GB_FIT + " alpha")
_HGB_FIT = ("interaction_cst l2_regularization learning_rate max_bins max_depth max_features "
            "max_leaf_nodes min_samples_leaf monotonic_cst")
declare_params(HistGradientBoostingClassifier, implemented="loss categorical_features",
               ignored=_HGB_FIT)
declare_params(HistGradientBoostingRegressor, implemented="loss categorical_features",
               ignored=_HGB_FIT + " quantile")
