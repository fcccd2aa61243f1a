"""What a frontend produces (a ModelSpec) and the registry that maps estimator classes to
frontends. A frontend reads only public fitted state or the library's own dump/JSON APIs (the
exceptions are documented where they happen) and never evaluates the model itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from peregrine.errors import NotFittedError, UnsupportedModelError
from peregrine.ir import GraphBuilder, Link, Op
from peregrine.ir.spec import METHOD_NAMES, MethodSpec, ModelSpec
from peregrine.registry import TypeRegistry

# What a subclass may not redefine and still compile as its registered parent (issue #11): the
# methods Peregrine reproduces, and the helpers the library's own versions of them call, read
# from the predict/transform paths of scikit-learn 1.x, XGBoost and LightGBM (e.g.
# LinearClassifierMixin.decision_function, _predict_proba_lr, BaseGradientBoosting._raw_predict,
# _BaseNB._joint_log_likelihood, LGBMModel.booster_). A user class overriding ``__init__``,
# ``fit`` or anything else compiles; one overriding these would answer differently than the
# parent Peregrine compiles, so it is refused, naming the method.
REPRODUCED_EXTRA = ("predict_joint_log_proba", "inverse_transform", "get_precision",
                    "get_covariance", "get_support", "kneighbors", "get_booster", "booster_")
REPRODUCED_HELPERS = (
    "_decision_function", "_predict_proba_lr", "_joint_log_likelihood", "_linear_predictor",
    "_raw_predict", "_raw_predict_init", "_predict_iterations", "_predict_proba",
    "_compute_proba_from_decision", "_get_median_predict", "_forward_pass_fast", "_predict",
    "_transform", "_score_samples", "_compute_score_samples", "_compute_chunked_score_samples",
    "_dense_decision_function", "_sparse_decision_function", "_compute_kernel", "_get_kernel",
    "_unnormalized_transform", "_e_step", "_fit_transform", "_solve_W", "_get_support_mask",
    "_transform_col", "_transform_X_ordinal", "_map_infrequent_categories", "_calc_impute",
    "_get_missing_features_info", "_combinations", "_get_predictions", "_collect_probas",
    "_concatenate_predictions", "_hstack", "_iter", "_final_estimator", "_get_iteration_range",
    "_can_use_inplace_predict",
)


# Methods among METHOD_NAMES that a supported class has and its compiled model does not, each
# with the reason (issue #11: the compiled model has exactly the source's methods, or the
# missing one is listed here). Keyed by (library.ClassName as ``qualified_name`` spells it,
# method); an entry may hold for some parameters only (it says which).
# tests/test_method_audit.py walks every supported class against this table.
REFUSED_METHODS: dict[tuple[str, str], str] = {
    ("sklearn.MultiOutputClassifier", "predict_proba"):
        "scikit-learn returns a list of one (n, n_classes) array per output, and a compiled "
        "method returns one array; compile each fitted member of estimators_ instead",
    ("sklearn.LinearDiscriminantAnalysis", "transform"):
        "only with solver='lsqr', where scikit-learn's own transform raises "
        "NotImplementedError (solver 'svd' and 'eigen' are compiled)",
}


def refused_method(model: Any, method: str) -> str | None:
    """Why ``method`` of ``model`` (or of the supported class it subclasses) is not compiled,
    or None when it is not listed in REFUSED_METHODS."""
    for cls in type(model).__mro__:
        why = REFUSED_METHODS.get((f"{cls.__module__.split('.')[0]}.{cls.__qualname__}", method))
        if why is not None:
            return why
    return None


def _owner(cls: type, name: str) -> type | None:
    """The class in ``cls``'s MRO whose own namespace defines ``name``, or None."""
    return next((k for k in cls.__mro__ if name in vars(k)), None)


def refuse_overrides(cls: type, registered: type) -> None:
    """Raise UnsupportedModelError when ``cls`` (a subclass of the ``registered`` class whose
    converter would compile it) resolves a reproduced method or helper to a different
    definition than ``registered`` does: Peregrine would silently return the parent's answer.
    Public methods count even where the parent lacks them (the compiled model would lack a
    method the source has); a private helper only where the parent defines it (nothing in the
    library calls a name it does not define)."""
    for name in METHOD_NAMES + REPRODUCED_EXTRA + REPRODUCED_HELPERS:
        theirs = _owner(registered, name)
        if theirs is None and name.startswith("_"):
            continue
        mine = _owner(cls, name)
        if mine is not theirs:
            raise UnsupportedModelError(
                f"{cls.__module__}.{cls.__qualname__} overrides {name}() of "
                f"{registered.__module__.split('.')[0]}.{registered.__qualname__} (in "
                f"{mine.__qualname__ if mine else '?'}); Peregrine reproduces only the "
                f"library's own {name}, so it cannot compile this subclass. Compile an instance "
                f"of {registered.__qualname__}, or a subclass that leaves {name} alone"
            )


Converter = Callable[[Any], ModelSpec]
FRONTENDS: TypeRegistry[Converter] = TypeRegistry("frontend", guard=refuse_overrides)


def register_frontend(*classes: type, library: str, methods: tuple[str, ...], notes: str = ""):
    """Register ``fn(model) -> ModelSpec`` for ``classes``; the info feeds ``supported_models``."""
    return FRONTENDS.register(*classes, library=library, methods=methods, notes=notes)


def add_log_proba(g: GraphBuilder, outputs: dict[str, str], methods: dict[str, MethodSpec],
                  width: int, *, scores: str | None = None, floor_zeros: bool = False) -> None:
    """Add ``predict_log_proba`` next to ``outputs["predict_proba"]`` (``width`` classes),
    computed as the source class computes it; call it only for classes that have the method:

    * default: ``np.log(predict_proba(X))`` (trees, forests, GB, AdaBoost, logistic and SGD,
      MLP, SVC): a zero probability gives -inf, as numpy does (without its warning);
    * ``scores``: ``scores - logsumexp(scores)`` (naive Bayes' jll, QDA's scores): finite where
      the probability underflows to 0 (``Link.LOG_SOFTMAX``);
    * ``floor_zeros``: LinearDiscriminantAnalysis adds ``finfo.smallest_normal`` to the exact
      zeros of predict_proba before the log (an IMPUTE of the value 0)."""
    if scores is not None:
        node = g.add(Op.LINK, (scores,), width=width, kind=Link.LOG_SOFTMAX)
    else:
        node = outputs["predict_proba"]
        if floor_zeros:
            tiny = float(np.finfo(np.float64).smallest_normal)
            node = g.add(Op.IMPUTE, (node,), width=width, values=np.full(width, tiny),
                         missing=0.0)
        node = g.add(Op.UFUNC, (node,), width=width, name="log")
    outputs["predict_log_proba"] = node
    methods["predict_log_proba"] = MethodSpec("predict_log_proba")


def qualified_name(model: Any) -> str:
    cls = type(model)
    top = cls.__module__.split(".")[0]
    return f"{top}.{cls.__qualname__}"


def require_fitted(model: Any, *attrs: str) -> None:
    """Raise NotFittedError unless every attribute in ``attrs`` exists on the model."""
    missing = [a for a in attrs if getattr(model, a, None) is None]
    if missing:
        raise NotFittedError(
            f"{qualified_name(model)} is not fitted (missing {', '.join(missing)}); "
            "call fit() before peregrine.compile()"
        )


def unsupported(model: Any, what: str, supported: str = "") -> UnsupportedModelError:
    msg = f"{qualified_name(model)}: {what} is not supported"
    if supported:
        msg += f" (supported: {supported})"
    return UnsupportedModelError(msg)


def sklearn_feature_names(model: Any) -> tuple[str, ...] | None:
    names = getattr(model, "feature_names_in_", None)
    return None if names is None else tuple(str(n) for n in names)


# The parameter audit (issue #11, item 7). For each supported scikit-learn class, every key of
# ``get_params(deep=False)`` is declared next to its frontend as either
# * implemented: the compiled answer depends on it (it is read at predict/transform time, or it
#   changes the shape of the fitted state the frontend reads) and the frontend reproduces every
#   value it accepts (refusing the others with UnsupportedModelError naming the parameter), or
# * ignored: it only steers fitting (its effect is entirely in the fitted attributes read) or
#   does not touch the returned values (copy, n_jobs, verbose, memory layout, feature names).
# tests/test_param_audit.py fails on any key in neither set, so a parameter a new library
# version adds is audited before it can give a silent wrong answer, and it fits every class with
# each implemented parameter at a non-default value against the source.
# Names that are fit-only wherever scikit-learn uses them; a class may list them or not.
FIT_ONLY = frozenset((
    "max_iter", "tol", "random_state", "n_jobs", "verbose", "warm_start", "copy", "copy_X",
    "copy_x", "cache_size", "shrinking", "class_weight", "n_iter_no_change",
    "validation_fraction", "early_stopping", "shuffle", "cv", "scoring", "error_score",
    "pre_dispatch", "return_train_score", "n_init", "verbose_feature_names_out",
))
PARAMS: dict[type, tuple[frozenset[str], frozenset[str]]] = {}


def declare_params(*classes: type, implemented: str = "", ignored: str = "") -> None:
    """Declare ``classes``' constructor parameters (space-separated names) for the audit."""
    entry = (frozenset(implemented.split()), frozenset(ignored.split()) | FIT_ONLY)
    for cls in classes:
        if cls in PARAMS:
            raise RuntimeError(f"parameters of {cls!r} declared twice")
        PARAMS[cls] = entry
