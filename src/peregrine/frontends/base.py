"""What a frontend produces (a ModelSpec) and the registry that maps estimator classes to
frontends. A frontend reads only public fitted state or the library's own dump/JSON APIs (the
exceptions are documented where they happen) and never evaluates the model itself."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from peregrine.errors import NotFittedError, UnsupportedModelError
from peregrine.ir import Graph, GraphBuilder, Link, Op
from peregrine.registry import TypeRegistry

INPUT_ERRORS = "input_errors"  # graph output checked by the runtime (ModelSpec.input_checks)
METHOD_NAMES = ("predict", "predict_proba", "predict_log_proba", "decision_function",
                "transform", "score_samples")


@dataclass(frozen=True)
class MethodSpec:
    """How one public method is computed: which graph output, and how it is shaped/labelled."""

    output: str
    squeeze: bool = False  # return 1-D (the source returns shape (n,))
    labels: np.ndarray | None = None  # integer class index -> label (classifiers' predict)
    dtype: str = "float64"  # dtype the source returns; "input": the input's float dtype


@dataclass(frozen=True)
class ModelSpec:
    """A converted model: the IR graph plus the contract of the public methods and input."""

    graph: Graph
    methods: dict[str, MethodSpec]
    n_features: int
    source: str  # "sklearn.ensemble.RandomForestClassifier"
    feature_names: tuple[str, ...] | None = None
    allow_nan: bool = True  # source accepts NaN in the input
    allow_inf: bool = True  # source accepts +-inf in the input
    # pandas category columns: column index -> categories in code order (code = position), as
    # the source library recorded them at fit time
    category_maps: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    # category-mapped input columns read by an encoder with handle_unknown='error': a string
    # absent from the column's map is rejected at the boundary (InputError naming the value)
    category_unknown_error: frozenset[int] = frozenset()
    # per column of the graph output INPUT_ERRORS (present only when non-empty): (what raises,
    # input column it reads or -1). A non-zero entry there is a row sklearn would reject (an
    # unseen category reaching an encoder with handle_unknown='error', a new missing column in
    # MissingIndicator): the runtime raises InputError instead of returning numbers
    input_checks: tuple[tuple[str, int], ...] = ()
    # what an integer or bool numpy array (or tensor) becomes: the source's own cast, which
    # matters above 2**24 (LightGBM converts such arrays to float32, scikit-learn to float64)
    int_input_dtype: str = "float64"
    versions: dict[str, str] = field(default_factory=dict)  # library versions at conversion


Converter = Callable[[Any], ModelSpec]
FRONTENDS: TypeRegistry[Converter] = TypeRegistry("frontend")


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


def convert(model: Any) -> ModelSpec:
    """Dispatch to the frontend registered for ``type(model)``."""
    from peregrine.frontends import load_all

    load_all()
    entry = FRONTENDS.lookup(type(model))
    if entry is None:
        names = sorted({e.key.__name__ for e in FRONTENDS})
        raise UnsupportedModelError(
            f"{qualified_name(model)} is not supported. Supported models: {', '.join(names)}"
        )
    spec = entry.fn(model)
    for name in spec.methods:
        if name not in METHOD_NAMES:
            raise RuntimeError(f"frontend for {spec.source} declared unknown method {name!r}")
    return spec
