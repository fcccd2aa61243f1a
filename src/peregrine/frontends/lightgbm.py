"""LightGBM 4.x: LGBMClassifier, LGBMRegressor, LGBMRanker, LGBMModel and raw ``lightgbm.Booster``.

The model is read from ``Booster.model_to_string()`` (the text LightGBM itself reloads), not from
``dump_model()``: the JSON dump passes thresholds through ``Common::AvoidInf``, which turns the
-DBL_MAX/+-inf thresholds that appear when training data holds +-inf into +-1e300. The text format
prints every double with 17 significant digits, which round-trips exactly.

Prediction semantics (LightGBM src/c_api.cpp, include/LightGBM/tree.h, src/io/tree.cpp):

* Input rows go through ``RowPairFunctionFromDenseMatric``, which keeps a value only when
  ``fabs(x) > kZeroThreshold || isnan(x)``; the rest read as 0.0. Every |x| <= 1e-35f is therefore
  exactly 0 to every node. Where a numerical threshold t lies in [-1e-35f, 1e-35f) this changes
  the answer, so such thresholds are moved to the equivalent value outside the band (see
  ``_fold_zero_band``); elsewhere ``x <= t`` and ``0 <= t`` agree for tiny x.
* ``NumericalDecision``: comparisons in double, left iff ``x <= threshold``. Missing type None:
  NaN becomes 0.0 and is compared (nan_left = 0 <= t). Zero: NaN becomes 0.0 and |x| <= 1e-35f
  follows default_left (Forest.missing_zero). NaN: NaN follows default_left.
* ``CategoricalDecision``: NaN -> right; ``static_cast<int>(x)`` (truncation, so -0.5 is category
  0) < 0 -> right; bit set in the node's bitset -> left; else right (also past the bitset's end and
  for huge values, whose conversion yields INT_MIN on x86).
* Tree outputs are summed in double per class (tree i feeds class i % num_tree_per_iteration);
  rf models (``average_output``) divide by the number of iterations; the objective's
  ``ConvertOutput`` is the link. boost_from_average is already folded into the first trees.
"""

from __future__ import annotations

import ctypes
import itertools
from typing import Any

import lightgbm
import numpy as np
from lightgbm import Booster, LGBMClassifier, LGBMModel, LGBMRanker, LGBMRegressor

from peregrine.errors import NotFittedError
from peregrine.frontends.base import qualified_name, register_frontend, unsupported
from peregrine.ir import Aggregation, GraphBuilder, Link, Op, make_forest
from peregrine.ir.forest import LIGHTGBM_ZERO_THRESHOLD
from peregrine.ir.spec import MethodSpec, ModelSpec

# decision_type bits (tree.h): kCategoricalMask = 1, kDefaultLeftMask = 2, missing type in bits 2-3
_CATEGORICAL, _DEFAULT_LEFT = 1, 2
_MISSING_NONE, _MISSING_ZERO, _MISSING_NAN = 0, 1, 2

# objective name (first token of the model's ``objective=`` line) -> output link
_IDENTITY_OBJECTIVES = {
    "regression", "regression_l1", "huber", "fair", "quantile", "mape", "lambdarank",
    "rank_xendcg", "custom",
}  # fmt: skip
_EXP_OBJECTIVES = {"poisson", "gamma", "tweedie"}
_MAX_ASSIGNMENTS = 10_000  # placements of ordered category columns tried (see category_maps)
SUPPORTED_OBJECTIVES = (
    "binary, multiclass, multiclassova, cross_entropy, regression, regression_l1, huber, fair, "
    "quantile, mape, poisson, gamma, tweedie, lambdarank, rank_xendcg, custom (raw scores)"
)


# ----------------------------------------------------------------------------- parsing --


def parse_model_string(text: str) -> tuple[dict[str, str], list[dict[str, str]], dict[str, str]]:
    """(header, trees, parameters) of LightGBM's text model format, values as raw strings."""
    header: dict[str, str] = {}
    trees: list[dict[str, str]] = []
    params: dict[str, str] = {}
    current = header
    section = "model"
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if section == "model":
            if line.startswith("Tree="):
                current = {}
                trees.append(current)
            elif line == "end of trees":
                section = "tail"
            else:
                key, sep, value = line.partition("=")
                current[key] = value if sep else ""  # bare flags, e.g. ``average_output``
        elif line == "parameters:":
            section = "parameters"
        elif section == "parameters":
            if line == "end of parameters":
                section = "tail"
            elif line.startswith("[") and line.endswith("]"):
                key, _, value = line[1:-1].partition(": ")
                params[key] = value
    return header, trees, params


def _floats(s: str) -> np.ndarray:
    # NumPy's string cast parses LightGBM's 17-digit output as float() does (correctly
    # rounded; "inf"/"-inf"), a third faster than a list of float()s
    return np.array(s.split(), dtype=np.float64)


def _ints(s: str) -> np.ndarray:
    # fromstring's C integer reader: 4x the string cast (tests/test_lightgbm_frontend.py
    # checks it against int() on every token). It stops at a token it cannot read (with a
    # DeprecationWarning), so callers check the count
    return np.fromstring(s, dtype=np.int64, sep=" ") if s.strip() else np.zeros(0, np.int64)


def _fold_zero_band(t: np.ndarray) -> np.ndarray:
    """Thresholds t' with ``x <= t'`` == ``z(x) <= t`` for every x, where z maps the input band
    |x| <= 1e-35f to 0 as LightGBM's row reader does. Only t in [-1e-35f, 1e-35f) needs moving:
    the band then goes left iff 0 <= t, and values outside it are compared as they are, so t
    becomes the band's upper edge (t >= 0) or the double just below its lower edge (t < 0)."""
    z = LIGHTGBM_ZERO_THRESHOLD
    in_band = (t >= -z) & (t < z)
    moved = np.where(t >= 0.0, z, np.nextafter(-z, -np.inf))
    return np.where(in_band, moved, t)


def _joined(model: Any, trees: list[dict[str, str]], key: str, parse: Any,
            count: int) -> np.ndarray:
    """One field of every tree, parsed in one call (per tree, the calls cost more than the
    numbers: 500 trees x 256 leaves, 0.28 s against 0.1 s), ``count`` numbers in all."""
    try:
        values = parse(" ".join(tree.get(key, "") for tree in trees))
    except ValueError:  # a token that is not a number (fromstring stops there)
        values = ()
    if len(values) != count:
        raise unsupported(model, f"model text whose {key} lines hold {len(values)} numbers "
                          f"for {count} nodes", "a model text LightGBM wrote")
    return values


def forest_from_text(model: Any, header: dict[str, str], trees: list[dict[str, str]]):
    """The Forest of a parsed LightGBM model. Tree t's nodes are its internal nodes (in the
    text's order) followed by its leaves; a child c >= 0 is internal node c, c < 0 leaf ~c."""
    if not trees:
        raise unsupported(model, "a model without trees")
    for tree in trees:
        if tree.get("is_linear", "0").strip() not in ("", "0"):
            raise unsupported(model, "linear_tree=True (trees with linear models in the "
                              "leaves)", "constant-leaf trees")
    n_features = int(header["max_feature_idx"]) + 1
    per_iter = int(header.get("num_tree_per_iteration", "1"))
    n_leaves = np.array([int(tree["num_leaves"]) for tree in trees], np.int64)
    n_int = n_leaves - 1  # a single-leaf tree has no internal node (and no split lines)
    offsets = np.concatenate([[0], np.cumsum(n_int + n_leaves)])
    inner = [tree for tree, k in zip(trees, n_int) if k > 0]
    # per internal node: its tree's first node and first leaf
    base = np.repeat(offsets[:-1], n_int)
    first_leaf = base + np.repeat(n_int, n_int)
    at_int = base + (np.arange(len(base)) - np.repeat(np.cumsum(n_int) - n_int, n_int))
    at_leaf = np.repeat(offsets[:-1] + n_int, n_leaves) + (
        np.arange(n_leaves.sum()) - np.repeat(np.cumsum(n_leaves) - n_leaves, n_leaves))
    n = int(offsets[-1])
    arrays = {
        "tree_offsets": offsets,
        "feature": np.full(n, -1, np.int64), "threshold": np.zeros(n),
        "left": np.full(n, -1, np.int64), "right": np.full(n, -1, np.int64),
        "nan_left": np.zeros(n, bool), "missing_zero": np.zeros(n, bool),
        "value": np.zeros((n, 1)),
    }  # fmt: skip
    arrays["value"][at_leaf, 0] = _joined(model, trees, "leaf_value", _floats, len(at_leaf))
    decision = _joined(model, inner, "decision_type", _ints, len(at_int))
    threshold = _joined(model, inner, "threshold", _floats, len(at_int))
    for side, key in (("left", "left_child"), ("right", "right_child")):
        child = _joined(model, inner, key, _ints, len(at_int))
        arrays[side][at_int] = np.where(child >= 0, base + child, first_leaf + ~child)
    arrays["feature"][at_int] = _joined(model, inner, "split_feature", _ints, len(at_int))
    missing = (decision >> 2) & 3
    default_left = (decision & _DEFAULT_LEFT) != 0
    is_cat = (decision & _CATEGORICAL) != 0
    if np.any(~is_cat & (missing > _MISSING_NAN)):
        raise unsupported(model, f"decision_type values {sorted(set(decision.tolist()))}")
    t = np.where(is_cat, 0.0, _fold_zero_band(threshold))
    arrays["threshold"][at_int] = t
    # None: NaN is compared as 0.0. Zero: NaN -> 0.0 and the zero band take default_left.
    # NaN: NaN takes default_left. Categorical: NaN goes right whatever the missing type.
    arrays["nan_left"][at_int] = ~is_cat & np.where(missing == _MISSING_NONE, 0.0 <= t,
                                                    default_left)
    arrays["missing_zero"][at_int] = ~is_cat & (missing == _MISSING_ZERO)
    cats: dict[str, Any] = {}
    if is_cat.any():
        cats = _categorical_splits(inner, is_cat, threshold, at_int, n)
    return make_forest(
        **arrays, **cats,
        tree_group=np.arange(len(trees)) % per_iter,
        n_features=n_features, n_outputs=per_iter,
        input_dtype=np.dtype(np.float64),  # LightGBM converts every input to double
        aggregation=Aggregation.AVERAGE if "average_output" in header else Aggregation.SUM,
        cat_negative_before_trunc=False,  # static_cast<int> first: -0.5 is category 0
    )  # fmt: skip


def _categorical_splits(inner: list[dict[str, str]], is_cat: np.ndarray,
                        threshold: np.ndarray, at_int: np.ndarray, n: int) -> dict[str, Any]:
    """``cat_index`` (splits numbered in node order across the forest) and the bitset table.
    A categorical node's threshold is its bitset's index within its own tree."""
    cat_index = np.full(n, -1, np.int64)
    bitsets: list[np.ndarray] = []
    start = 0
    for tree in inner:
        stop = start + int(tree["num_leaves"]) - 1
        nodes = start + np.flatnonzero(is_cat[start:stop])
        if len(nodes):
            bounds = _ints(tree["cat_boundaries"])
            words = _ints(tree["cat_threshold"]).astype(np.uint32)
            for i in nodes:
                k = int(threshold[i])
                cat_index[at_int[i]] = len(bitsets)
                bitsets.append(words[bounds[k]: bounds[k + 1]])
        start = stop
    table = np.zeros((len(bitsets), max(len(b) for b in bitsets)), np.uint32)
    for r, b in enumerate(bitsets):
        table[r, : len(b)] = b  # bits past a split's own words are clear: go right
    return {"cat_index": cat_index, "cat_bitsets": table,
            "cat_unknown_left": np.zeros(len(bitsets), bool)}


# -------------------------------------------------------------------------- objectives --


def objective_link(model: Any, objective: str) -> tuple[Link, dict[str, float]]:
    """Output transform of ``ObjectiveFunction::ConvertOutput`` for the model's objective line.
    A custom (callable) objective leaves no objective line; LightGBM then returns raw scores."""
    tokens = objective.split()
    name = tokens[0] if tokens else "custom"
    options = dict(t.split(":", 1) for t in tokens[1:] if ":" in t)
    if "sqrt" in tokens[1:]:
        raise unsupported(model, f"objective {name!r} with reg_sqrt=True",
                          "reg_sqrt=False")
    if name in ("binary", "multiclassova"):
        # BinaryLogloss: 1 / (1 + exp(-sigmoid * x)); OVA applies it per class
        return Link.SIGMOID, {"scale": float(options.get("sigmoid", "1"))}
    if name == "multiclass":
        return Link.SOFTMAX, {}
    if name == "cross_entropy":  # CrossEntropy::ConvertOutput: 1 / (1 + exp(-x))
        return Link.SIGMOID, {"scale": 1.0}
    if name in _EXP_OBJECTIVES:
        return Link.EXP, {}
    if name in _IDENTITY_OBJECTIVES:
        return Link.IDENTITY, {}
    raise unsupported(model, f"objective {name!r}", SUPPORTED_OBJECTIVES)


# ------------------------------------------------------------------------ pandas input --


def _categorical_features(header: dict[str, str], params: dict[str, str]) -> list[int]:
    """Features the model treats as categorical: listed in the ``categorical_feature`` parameter
    (resolved to indices) or described by category values in ``feature_infos``."""
    found = set()
    for tok in params.get("categorical_feature", "").replace(",", " ").split():
        if tok.lstrip("-").isdigit():
            found.add(int(tok))
    for j, info in enumerate(header.get("feature_infos", "").split()):
        if info != "none" and not info.startswith("["):  # numeric infos are "[min:max]"
            found.add(j)
    return sorted(found)


def _integer_range(info: str) -> tuple[float, float] | None:
    if not (info.startswith("[") and info.endswith("]")):
        return None
    lo, _, hi = info[1:-1].partition(":")
    try:
        lo_f, hi_f = float(lo), float(hi)
    except ValueError:
        return None
    if lo_f >= 0 and lo_f.is_integer() and hi_f.is_integer():
        return lo_f, hi_f
    return None


def category_maps(model: Any, pandas_categorical, header: dict[str, str],
                  params: dict[str, str]) -> dict[int, tuple]:
    """Column index -> categories (code order) of the training DataFrame's category columns.

    LightGBM stores only the category lists, in the order of the DataFrame's category-dtype
    columns (``_data_from_pandas``); at predict time it maps the i-th category column through
    the i-th list and sends unseen values to NaN. With ``categorical_feature='auto'`` the
    unordered category columns are exactly the model's categorical features; ordered ones are
    trained as numeric codes (an integer "[lo:hi]" range in ``feature_infos``). The columns are
    taken from the one placement consistent with that (codes < number of categories); when
    several fit, the model cannot say which column a list belongs to and is rejected."""
    if not pandas_categorical:
        return {}
    lists = [tuple(c) for c in pandas_categorical]
    infos = header.get("feature_infos", "").split()
    cat = _categorical_features(header, params)
    # ordered category columns: numeric features holding codes, i.e. an integer [lo:hi] range
    ordered = [j for j, info in enumerate(infos)
               if j not in cat and _integer_range(info) is not None]
    fits = []
    if len(cat) <= len(lists):
        for extra in itertools.islice(itertools.combinations(ordered, len(lists) - len(cat)),
                                      _MAX_ASSIGNMENTS):
            cols = sorted([*cat, *extra])
            if all(_codes_fit(infos, j, len(c)) for j, c in zip(cols, lists)):
                fits.append(cols)
    if len(fits) == 1:
        return dict(zip(fits[0], lists))
    raise unsupported(
        model,
        f"a pandas training DataFrame with {len(lists)} category columns whose positions cannot "
        f"be recovered ({len(fits)} placements fit; categorical features {cat})",
        "unordered pandas category columns used as categorical features (the default)",
    )


def _codes_fit(infos: list[str], j: int, n_categories: int) -> bool:
    if j >= len(infos):
        return False
    info = infos[j]
    if info == "none":
        return True
    rng = _integer_range(info)
    if rng is not None:
        return rng[1] < n_categories
    values = [float(v) for v in info.split(":") if v]
    return all(v < n_categories for v in values)


def _feature_names(model: Any, booster: Booster) -> tuple[str, ...] | None:
    """Names to match DataFrame columns by, when the model was trained with named columns."""
    if isinstance(model, LGBMModel):
        try:
            return tuple(str(n) for n in model.feature_names_in_)
        except AttributeError:  # fitted on a numpy array
            return None
    names = tuple(booster.feature_name())
    if names == tuple(f"Column_{i}" for i in range(len(names))):  # LightGBM's default names
        return None
    return names


# ------------------------------------------------------------------------------ graphs --


def _score_graph(forest, link: Link, link_attrs: dict):
    g = GraphBuilder()
    x = g.input(forest.n_features)
    raw = g.add(Op.TREE_ENSEMBLE, (x,), width=forest.n_outputs, forest=forest)
    score = g.add(Op.LINK, (raw,), width=forest.n_outputs, kind=link, **link_attrs)
    return g, raw, score


def _check_predict_params(model: Any) -> None:
    """Estimator parameters LGBMModel.predict forwards to Booster.predict that change results."""
    params = model.get_params()
    for alias in lightgbm.basic._ConfigAliases.get("pred_early_stop"):
        if params.get(alias):
            raise unsupported(model, f"{alias}=True (prediction early stopping)",
                              "pred_early_stop=False")


def model_text(booster: Booster) -> str:
    """``booster.model_to_string()``, serialised once. LightGBM's wrapper asks its C function
    for the text with a 1 MiB buffer and, for a larger model, again with one of the right
    size: the whole model is written twice (500 trees x 256 leaves, 9.7 MB: 0.18-0.22 s of
    which one call is half). Here the first buffer is sized from the model, and the same C
    function (LGBM_BoosterSaveModelToString, LightGBM's C API) is called as the wrapper calls
    it; anything unexpected falls back to the wrapper. The pandas categories the wrapper
    appends are read from ``booster.pandas_categorical`` instead."""
    try:
        from lightgbm.basic import _LIB, _safe_call

        leaves = max(31, *(int(v) for k, v in booster.params.items()
                           if k in ("num_leaves", "num_leaf", "max_leaves", "max_leaf")))
        size = (1 << 20) + booster.num_trees() * (4096 + 128 * leaves)
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            length = ctypes.c_int64(0)
            _safe_call(_LIB.LGBM_BoosterSaveModelToString(
                booster._handle, ctypes.c_int(0), ctypes.c_int(booster.best_iteration),
                ctypes.c_int(0), ctypes.c_int64(size), ctypes.byref(length),
                ctypes.c_char_p(ctypes.addressof(buf))))
            if length.value <= size:
                return buf.value.decode("utf-8")
            size = length.value
    except (ImportError, AttributeError, TypeError, ValueError):
        pass
    return booster.model_to_string()


def convert_booster(model: Any, booster: Booster, kind: str) -> ModelSpec:
    """kind: 'classifier' (predict labels + predict_proba), 'raw' (Booster.predict default) or
    'custom-classifier' (callable objective: LightGBM returns raw scores from both methods)."""
    text = model_text(booster)  # num_iteration=None: best_iteration, as predict() uses
    header, trees, params = parse_model_string(text)
    forest = forest_from_text(model, header, trees)
    link, link_attrs = objective_link(model, header.get("objective", ""))
    g, raw, score = _score_graph(forest, link, link_attrs)
    k = forest.n_outputs
    if kind == "classifier":
        n_classes = int(model.n_classes_)
        if (n_classes > 2) != (k > 1):
            raise unsupported(model, f"{n_classes} classes with {k} trees per iteration")
        proba = score if k > 1 else g.add(Op.BINARY_PROBA, (score,), width=2)
        label = g.add(Op.ARGMAX, (proba,), dtype="int64", width=1)
        outputs = {"predict_proba": proba, "predict": label}
        methods = {"predict": MethodSpec("predict", labels=np.asarray(model.classes_)),
                   "predict_proba": MethodSpec("predict_proba")}
    else:
        names = ("predict", "predict_proba") if kind == "custom-classifier" else ("predict",)
        outputs = {n: score for n in names}
        methods = {n: MethodSpec(n, squeeze=k == 1) for n in names}
    if kind != "raw" and _HAS_DECISION:  # the raw margin, before the objective's link
        if forest.aggregation is Aggregation.AVERAGE:
            # rf: LightGBM's raw score is the trees' sum; only the link sees their average
            raw = g.add(Op.AFFINE, (raw,), width=k, scale=forest.output_divisor(), shift=0.0)
        outputs["decision_function"] = raw
        methods["decision_function"] = MethodSpec("decision_function", squeeze=k == 1)
    graph = g.build(outputs)
    return ModelSpec(
        graph=graph,
        methods=methods,
        n_features=forest.n_features,
        source=qualified_name(model),
        feature_names=_feature_names(model, booster),
        allow_nan=True,
        allow_inf=True,  # LightGBM accepts +-inf and compares them as doubles
        category_maps=category_maps(model, booster.pandas_categorical, header, params),
        int_input_dtype="float32",  # basic._np2d_to_np1d: non-float arrays become float32
        versions={"lightgbm": lightgbm.__version__},
    )


def _fitted_booster(model: Any) -> Booster:
    if not model.__sklearn_is_fitted__():
        raise NotFittedError(f"{qualified_name(model)} is not fitted; call fit() before "
                             "peregrine.compile()")
    _check_predict_params(model)
    return model.booster_


# LGBMClassifier.decision_function (the raw margin) exists from LightGBM 4.7 on
_HAS_DECISION = hasattr(LGBMClassifier, "decision_function")


@register_frontend(
    LGBMClassifier, library="lightgbm",
    methods=("predict", "predict_proba") + (("decision_function",) if _HAS_DECISION else ()),
    notes="binary/multiclass/multiclassova/cross_entropy; gbdt, dart, rf; NaN, +-inf, "
          "categorical splits and pandas categories",
)
def convert_classifier(model: Any) -> ModelSpec:
    booster = _fitted_booster(model)
    kind = "custom-classifier" if callable(model._objective) else "classifier"
    return convert_booster(model, booster, kind)


@register_frontend(
    LGBMRegressor, LGBMRanker, LGBMModel, library="lightgbm", methods=("predict",),
    notes="regression, l1, huber, fair, quantile, mape, poisson, gamma, tweedie, cross_entropy, "
          "lambdarank, rank_xendcg; gbdt, dart, rf",
)
def convert_regressor(model: Any) -> ModelSpec:
    return convert_booster(model, _fitted_booster(model), "raw")


@register_frontend(Booster, library="lightgbm", methods=("predict",),
                   notes="what Booster.predict(X) returns by default (best_iteration)")
def convert_raw_booster(model: Booster) -> ModelSpec:
    return convert_booster(model, model, "raw")


__all__ = ["category_maps", "convert_booster", "forest_from_text", "objective_link",
           "parse_model_string"]
