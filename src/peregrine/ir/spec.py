"""The program's contract: what a compiled model promises its caller. A frontend produces a
ModelSpec (the IR graph plus the public methods, the input schema and the input checks); the
passes rewrite its graph; backends lower it; the runtime shapes and checks at the boundary
against it. It lives beside the graph so no layer has to import the frontends to read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from peregrine.ir.graph import Graph
from peregrine.ir.semantics.text import TextSpec

INPUT_ERRORS = "input_errors"  # graph output checked by the runtime (ModelSpec.input_checks)
GUARD = "guard:"  # prefix of graph outputs a step validates (runtime/guards.py)
# guard kinds that name input columns the boundary checks (inputs.py): "input" (NaN/inf
# refused as they are), "na" (pd.NA refused), "strings" (a numeric array refused: a step
# comparing object values with None or a string, which scikit-learn refuses on numbers),
# "objects" (object values read only for their NaNs: MissingIndicator(np.nan) alone),
# "nan_ok" (where ModelSpec.allow_nan is False: columns whose NaN no NaN-rejecting step can
# receive, answered: an encoder's category, an imputer's gap; frontends/nan_columns.py)
BOUNDARY_KINDS = ("na", "input", "strings", "objects", "nan_ok")
# ModelSpec.sparse_absent: how an entry absent from a scipy.sparse input reads
# (runtime/sparse.py, docs/sparse.md). "zero": scikit-learn, LightGBM, CatBoost; "nan": XGBoost
# (a DMatrix from CSR/CSC treats absent entries as missing); "refuse": the source's answer
# depends on which steps keep the matrix sparse (a pipeline whose later XGBoost step would read
# a sparsity-preserving transformer's output): sparse input is an InputError
SPARSE_ABSENT = ("zero", "nan", "refuse")
# ModelSpec.sparse_nan: how a NaN *stored* in a scipy.sparse input reads. "missing": as in a
# dense input; "refuse": InputError (scikit-learn's trees and forests validate sparse X with
# NaN refused: BaseDecisionTree._support_missing_values is False for sparse input, so a model
# that takes NaN in a dense row raises on the same row as CSR); "inf": as +inf (IsolationForest
# takes it, and its sparse traversal, _apply_sparse_csr, has no missing-value branch: NaN <=
# threshold is false, so NaN goes right at every node, as +inf does)
SPARSE_NAN = ("missing", "refuse", "inf")
METHOD_NAMES = ("predict", "predict_proba", "predict_log_proba", "decision_function",
                "transform", "score_samples")


@dataclass(frozen=True)
class MethodSpec:
    """How one public method is computed: which graph output, and how it is shaped/labelled."""

    output: str
    squeeze: bool = False  # return 1-D (the source returns shape (n,))
    labels: np.ndarray | None = None  # integer class index -> label (classifiers' predict)
    dtype: str = "float64"  # dtype the source returns; "input": the input's float dtype
    # "" dense, else the scipy.sparse class the source returns ("csr_matrix", "csc_matrix"):
    # the runtime converts the dense result (a transformer ending the pipeline with sparse
    # output: OneHotEncoder(sparse_output=True), KBinsDiscretizer(encode="onehot"), ...)
    sparse: str = ""
    # non-empty: the method returns an object array of the input's own values, one
    # (input column, fill value, missing) per output column: the raw value, or ``fill`` where it
    # is missing ("nan": a float NaN, as ``X != X``; "none": None), the graph's codes unused
    # (SimpleImputer on string columns ending the pipeline: sklearn returns the strings)
    strings: tuple[tuple[int, Any, str], ...] = ()
    # non-empty: the source returns a pandas DataFrame with these column names (set_output(
    # transform="pandas"): get_feature_names_out(), the input frame's index); the runtime wraps
    # the array the same way
    frame_columns: tuple[str, ...] = ()


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
    # hashed input columns: column index -> hashing rule (runtime/cat_hash.py; today
    # "catboost-city64-low32": CatBoost's CalcCatFeatureHash). The runtime replaces each value
    # of the column by its hash (a uint32, exact in float64) before the graph runs
    hash_columns: dict[int, str] = field(default_factory=dict)
    # per column of the graph output INPUT_ERRORS (present only when non-empty): (what raises,
    # input column it reads or -1). A non-zero entry there is a row sklearn would reject (an
    # unseen category reaching an encoder with handle_unknown='error', a new missing column in
    # MissingIndicator): the runtime raises InputError instead of returning numbers
    input_checks: tuple[tuple[str, int], ...] = ()
    # what an integer or bool numpy array (or tensor) becomes: the source's own cast, which
    # matters above 2**24 (LightGBM converts such arrays to float32, scikit-learn to float64)
    int_input_dtype: str = "float64"
    versions: dict[str, str] = field(default_factory=dict)  # library versions at conversion
    # a text pipeline: the input is documents, turned at the boundary into the dense matrix
    # the graph reads (n_features wide), or, with no graph work (TextSpec.width None), into
    # the sparse matrix the transform returns (ir/semantics/text.py, runtime/text.py)
    text: TextSpec | None = None
    sparse_absent: str = "zero"  # SPARSE_ABSENT: the source's rule for absent sparse entries
    sparse_nan: str = "missing"  # SPARSE_NAN: the source's rule for NaN stored in sparse X
    # the dtype the source checks finiteness in: "float32" where it casts the input to float32
    # first (scikit-learn's tree models: a float64 value beyond float32's range becomes
    # infinity there, and with allow_inf False is rejected: "a value too large for float32")
    finite_dtype: str = "float64"

    def __post_init__(self) -> None:
        if self.sparse_nan not in SPARSE_NAN:
            raise ValueError(f"sparse_nan {self.sparse_nan!r} is not one of {SPARSE_NAN}")
        if self.sparse_absent not in SPARSE_ABSENT:
            raise ValueError(f"sparse_absent {self.sparse_absent!r} is not one of "
                             f"{SPARSE_ABSENT}")
