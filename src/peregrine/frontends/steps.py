"""Pipeline steps: the registry that lets one fitted estimator build its ops on top of an
existing graph node, so estimators compose (Pipeline, ColumnTransformer, FeatureUnion).

Two registries, keyed by estimator class (``registry.TypeRegistry``, MRO lookup; a subclass
that redefines a reproduced method is refused, ``base.refuse_overrides``):

* ``STEPS``: transformers, ``convert_step(est, ctx, flow) -> Flow``.
* ``HEADS``: final estimators, ``convert_head(est, ctx, flow) -> Head`` (the public methods).
  An estimator with a registered *frontend* but no head (trees, boosting, XGBoost, LightGBM) is
  used as a head by converting it on its own and splicing its graph after the flow
  (``GraphBuilder.splice``), so those frontends need no change.

A ``Flow`` is a graph node plus what composition needs to know about each of its columns:
``src`` (the input column it still is, unchanged, or None once computed) — string columns are
encoded ONCE at the runtime boundary into codes over a per-input-column ``Vocab`` (the
``ModelSpec.category_maps``; code 0 is NaN, 1 None, as scikit-learn tells them apart), and encoders/imputers
reading such a column work on the codes; ``nan`` (the column may hold NaN) and
``keeps_dtype`` (float32 input stays float32, as sklearn's scalers do).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from peregrine.errors import UnsupportedModelError
from peregrine.frontends.base import qualified_name, refuse_overrides, unsupported
from peregrine.frontends.nan_columns import nan_sources
from peregrine.ir import GraphBuilder, Op
from peregrine.ir.spec import GUARD, MethodSpec
from peregrine.registry import TypeRegistry


class Vocab:
    """Codes of one string input column: position in ``values``; 0 is NaN, 1 None (scikit-learn
    tells them apart in object columns: runtime/categories.py). Append-only, so a code handed
    out while building never changes."""

    def __init__(self) -> None:
        self.values: list[Any] = [np.nan, None]

    def code(self, value: Any) -> float:
        if isinstance(value, (float, np.floating)) and np.isnan(value):
            return 0.0
        if value not in self.values[1:]:
            self.values.append(value)
        return float(self.values.index(value, 1))


@dataclass
class Context:
    """Shared state while one model is converted."""

    g: GraphBuilder
    vocabs: dict[int, Vocab] = field(default_factory=dict)  # input column -> its string codes
    allow_nan: bool = True  # cleared when a step that rejects NaN may receive it
    # the input columns whose NaN may reach such a step (frontends/nan_columns.py; None: any
    # column): where allow_nan is cleared, NaN in the other columns is still answered
    # (ModelSpec guard "nan_ok": an encoder or imputer takes it, as in scikit-learn)
    nan_refused: set[int] | None = field(default_factory=set)
    # cleared when a step that rejects infinity reads an input column as it is (infinity an
    # earlier step computes is a guard's); a FunctionTransformer(validate=False) in front of
    # a HistGradientBoosting passes it on, and scikit-learn answers
    allow_inf: bool = True
    # string input columns an encoder with handle_unknown='error' reads (ModelSpec field)
    unknown_error: set[int] = field(default_factory=set)
    # (node, per-column (what, input column or -1)): non-zero = a row sklearn rejects
    checks: list[tuple[str, tuple[tuple[str, int], ...]]] = field(default_factory=list)
    # the transformer ending the pipeline with sparse output, which the runtime converts
    # (MethodSpec.sparse): its step computes the dense equivalent; elsewhere a step whose
    # sparse output the next step would read differently refuses it
    sparse_last: Any = None
    # ModelSpec.sparse_absent of the whole model: a spliced model's own rule when it reads the
    # raw input, "refuse" when a step in front of it may or may not keep a sparse matrix sparse
    sparse_absent: str = "zero"
    sparse_readers: int = 0  # readers of the input that spliced model brought
    # ModelSpec.sparse_nan of the whole model: "refuse" when a spliced model with a sparse NaN
    # rule of its own may receive an input NaN (whether the steps before it keep the matrix
    # sparse, and so which rule applies, may depend on the data: refused, never answered)
    sparse_nan: str = "missing"
    # (node, kind) -> graph output name (GUARD prefix): values a step re-validates
    guarded: dict[tuple[str, str], str] = field(default_factory=dict)
    # guard key -> method output nodes computed without the step that re-validates: a
    # StackingRegressor's transform (its members' predictions) never runs the final estimator
    # whose check_array the guard stands for (model_spec names the methods a guard holds for)
    exempt: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    def exempt_from(self, keys: Any, node: str) -> None:
        """The output ``node`` is computed without the steps that made the guards ``keys``."""
        for key in keys:
            self.exempt.setdefault(key, set()).add(node)

    def add_check(self, node: str, what: list[tuple[str, int]]) -> None:
        self.checks.append((node, tuple(what)))

    def check_node(self) -> str | None:
        """One node holding every check column (the INPUT_ERRORS output), or None."""
        if not self.checks:
            return None
        nodes = [n for n, _ in self.checks]
        if len(nodes) == 1:
            return nodes[0]
        return self.g.add(Op.CONCAT, tuple(nodes), width=sum(len(w) for _, w in self.checks))

    def reject_na(self, flow: Flow, est: Any) -> None:
        """``est`` masks missing values with ``X != X`` / ``X == None`` on string input
        columns, which raises TypeError on pd.NA: the boundary rejects pd.NA there
        (runtime/guards.py ``na_columns``)."""
        self._input_columns(flow, est, "na")

    def refuse_numbers(self, flow: Flow, est: Any) -> None:
        """``est`` compares its input columns' object values with None or a string, and
        scikit-learn refuses a numeric X there (``_check_inputs_dtype``): the boundary refuses
        a numeric array in those columns (runtime/inputs.py)."""
        self._input_columns(flow, est, "strings")

    def read_objects(self, flow: Flow, est: Any) -> None:
        """``est`` reads its input columns only for their float NaNs (``X != X`` on object
        input): the boundary turns object columns there into NaN or 0.0 (runtime/inputs.py)."""
        self._input_columns(flow, est, "objects")

    def refuse_sparse(self, flow: Flow) -> None:
        """The step reading ``flow`` refuses a scipy.sparse matrix (StandardScaler centring
        one, HistGradientBoosting): when ``flow`` is the raw input or columns of it, a sparse
        input is refused as the source refuses it (ModelSpec.sparse_absent "refuse")."""
        node = self.g.node(flow.node)
        while node.op is Op.SELECT:
            node = self.g.node(node.inputs[0])
        if node.op is Op.INPUT:
            self.sparse_absent = "refuse"

    def reject_nan(self, flow: Flow, est: Any = None) -> None:
        """The step reading ``flow`` rejects NaN (sklearn's check_array): so must the input;
        and NaN or infinity an earlier step computes (a guard, runtime/guards.py)."""
        if flow.nan:
            self.refuse_nan(flow)
        if any(s is None for s in flow.src):
            self.guard(flow, est, "inf+nan")
        self.reject_inf(flow, est)  # (its "inf" guard gives way to the stricter one)
        self._input_columns(flow, est, "input")

    def refuse_nan(self, flow: Flow) -> None:
        """A step that rejects NaN reads ``flow``: the input refuses NaN in the columns from
        which one can reach it (all of them where that is not known)."""
        self.allow_nan = False
        if self.nan_refused is not None:
            found = nan_sources(self.g.node, flow.node)
            self.nan_refused = None if found is None else self.nan_refused | found

    def accept_nan_columns(self, n_features: int) -> None:
        """Where NaN is refused in some input columns only: a boundary guard output ("nan_ok",
        runtime/inputs.py) naming the others, in which NaN is answered."""
        if self.allow_nan or self.nan_refused is None:
            return
        cols = sorted(set(range(n_features)) - self.nan_refused)
        if cols:
            x = next(n.name for n in self.g._nodes if n.op is Op.INPUT)
            at = "@" + ",".join(map(str, cols))
            self.guarded[(x + at, "nan_ok")] = f"{GUARD}nan_ok:{len(self.guarded)}:boundary{at}"

    def reject_inf(self, flow: Flow, est: Any) -> None:
        """The step reading ``flow`` rejects infinity (check_array): in the input columns it
        reads as they are (the boundary's check), and in what earlier steps computed (a
        guard)."""
        if any(s is not None for s in flow.src):
            self.allow_inf = False
        if any(s is None for s in flow.src):
            self.guard(flow, est, "inf")

    def _input_columns(self, flow: Flow, est: Any, kind: str) -> None:
        """A graph output naming the input columns ``est`` reads as they are (the boundary
        checks them even where no op reads them: runtime/inputs.py, guards.py)."""
        cols = sorted({int(s) for s in flow.src if s is not None})
        if not cols:
            return
        x = next(n.name for n in self.g._nodes if n.op is Op.INPUT)
        at = "@" + ",".join(map(str, cols))
        name = "a step" if est is None else type(est).__name__
        if (x + at, kind) not in self.guarded:
            self.guarded[(x + at, kind)] = f"{GUARD}{kind}:{len(self.guarded)}:{name}{at}"

    def guard(self, flow: Flow, est: Any, kind: str) -> None:
        """The step ``est`` re-validates ``flow`` (check_array on what earlier steps computed):
        a graph output the runtime checks on inputs large enough to break the rule ``kind``
        ("float32": a value float32 makes infinite, "inf": infinity; "+nan": NaN too)."""
        name = "a step" if est is None else type(est).__name__
        node, cols = flow.node, ""
        sel = self.g.node(node)
        if sel.op is Op.SELECT and self.g.node(sel.inputs[0]).op is Op.INPUT:
            # input columns as they are (a selector's): named in the output, read from the
            # input, so no graph node stays for the guard once the selection is folded away
            node = sel.inputs[0]
            cols = "@" + ",".join(str(int(c)) for c in np.asarray(sel.attrs.columns).reshape(-1))
        key = (node + cols, kind)
        if kind == "inf" and any((node + cols, k) in self.guarded
                                 for k in ("inf+nan", "float32", "float32+nan")):
            return  # a stricter guard on the same values already rejects infinity
        if key not in self.guarded:
            self.guarded[key] = f"{GUARD}{kind}:{len(self.guarded)}:{name}{cols}"

    def vocab(self, src: int | None, est: Any, column: int) -> Vocab:
        if src is None:
            raise UnsupportedModelError(
                f"{qualified_name(est)}: column {column} holds strings computed by an earlier "
                "step; only input columns (optionally imputed) may hold strings"
            )
        return self.vocabs.setdefault(src, Vocab())


@dataclass(frozen=True)
class Flow:
    node: str
    src: tuple[int | None, ...]  # per column: input column it still is, or None
    nan: bool = True  # may hold NaN
    keeps_dtype: bool = True  # float32 input still float32 here (sklearn's dtype rule)
    # what scikit-learn holds here (the next step reads it): "" a dense array, "csr" a
    # scipy.sparse matrix (absent entries are 0 in it; XGBoost reads them as missing, the
    # trees refuse a NaN stored in it), "maybe" either (a step not known to keep or drop
    # sparsity read a sparse matrix), "text" a sparse hstack holding a text block
    # (sklearn_text_columns.py). The graph computes the dense values either way.
    sparse: str = ""

    @property
    def width(self) -> int:
        return len(self.src)

    def computed(self, ctx: Context, node: str, width: int, **kw: Any) -> Flow:
        """A new flow of freshly computed (numeric) columns."""
        return replace(self, node=node, src=(None,) * width, **kw)


@dataclass(frozen=True)
class Head:
    outputs: dict[str, str]  # method -> graph node
    methods: dict[str, MethodSpec]
    allow_nan: bool = False


StepFn = Callable[[Any, Context, Flow], Flow]
HeadFn = Callable[[Any, Context, Flow], Head]
STEPS: TypeRegistry[StepFn] = TypeRegistry("pipeline step", guard=refuse_overrides)
HEADS: TypeRegistry[HeadFn] = TypeRegistry("pipeline head", guard=refuse_overrides)


def register_step(*classes: type):
    return STEPS.register(*classes, library="scikit-learn", methods=("transform",), notes="")


def register_head(*classes: type):
    return HEADS.register(*classes, library="scikit-learn", methods=(), notes="")


def sparse_format(est: Any) -> str:
    """The scipy.sparse class ``est.transform`` returns on dense input, "" when dense (the
    transformers with a sparse option; OneHotEncoder and KBinsDiscretizer build csr_matrix,
    SplineTransformer too on scipy >= 1.8 with scikit-learn 1.x)."""
    if getattr(est, "sparse_output", False) is True or getattr(est, "encode", "") == "onehot":
        return "csr_matrix"
    return ""


def convert_step(est: Any, ctx: Context, flow: Flow) -> Flow:
    if est is None or (isinstance(est, str) and est == "passthrough"):
        return flow
    entry = STEPS.lookup(type(est))
    if entry is None:
        raise UnsupportedModelError(
            f"{qualified_name(est)} is not supported as a pipeline transformer step. Supported: "
            + ", ".join(sorted({e.key.__name__ for e in STEPS}))
        )
    n_in = getattr(est, "n_features_in_", None)
    if n_in is not None and int(n_in) != flow.width:
        raise UnsupportedModelError(f"{qualified_name(est)} expects {n_in} columns, gets "
                                    f"{flow.width}")
    out = entry.fn(est, ctx, flow)
    if rejects_inf(est):  # its check_array (after the step's own, stricter, guards)
        ctx.reject_inf(flow, est)
    if not _composite(est):  # (compositions set their own output's format)
        out = replace(out, sparse=_sparse_after(est, flow))
    return out


def _composite(est: Any) -> bool:
    from sklearn.compose import ColumnTransformer
    from sklearn.pipeline import FeatureUnion, Pipeline

    return isinstance(est, (Pipeline, FeatureUnion, ColumnTransformer))


def _sparse_after(est: Any, flow: Flow) -> str:
    """Flow.sparse of ``est.transform``'s output: sparse where the step builds a sparse
    matrix (OneHotEncoder(sparse_output=True): the others with a sparse option are refused in
    the middle of a pipeline), kept by the selectors (a column subset of a CSR is a CSR) and
    the scalers that scale a CSR, dense after PCA and TruncatedSVD, unknown ("maybe") after any other step reading a sparse matrix."""
    from sklearn.decomposition import PCA, TruncatedSVD
    from sklearn.feature_selection import SelectorMixin
    from sklearn.preprocessing import MaxAbsScaler, StandardScaler

    if sparse_format(est):
        return "csr"
    if not flow.sparse or isinstance(est, (PCA, TruncatedSVD)):  # a dense projection
        return ""
    # the non-centring scalers scale a CSR's stored values (StandardScaler with_mean=True
    # refuses one at fit), keeping which entries are stored
    keeps = isinstance(est, (SelectorMixin, MaxAbsScaler, StandardScaler))
    return flow.sparse if keeps else "maybe"


def sparse_parts(flows: list[Flow]) -> str:
    """Flow.sparse of FeatureUnion's hstack: sparse when any part is (``_hstack``)."""
    kinds = {f.sparse for f in flows}
    return "maybe" if "maybe" in kinds else "csr" if "csr" in kinds else ""


def rejects_inf(est: Any) -> bool:
    """Whether ``est.transform`` validates its input with a check_array that refuses
    infinity: every registered scikit-learn transformer (tried one by one, scikit-learn 1.9:
    the NaN-accepting scalers, imputers, encoders, Quantile/PowerTransformer included) except
    the compositions, which hand X on unchecked, FunctionTransformer(validate=False), and the
    selectors whose tags allow NaN (``ensure_all_finite=False``: VarianceThreshold, RFE or
    SelectFromModel around a NaN-accepting estimator)."""
    from sklearn.compose import ColumnTransformer
    from sklearn.feature_selection import SelectorMixin
    from sklearn.pipeline import FeatureUnion, Pipeline
    from sklearn.preprocessing import FunctionTransformer
    from sklearn.utils import get_tags

    if not type(est).__module__.startswith("sklearn.") or \
            isinstance(est, (Pipeline, FeatureUnion, ColumnTransformer)):
        return False
    if isinstance(est, FunctionTransformer):
        return bool(est.validate)
    if isinstance(est, SelectorMixin):
        return not get_tags(est).input_tags.allow_nan
    return True


def convert_head(est: Any, ctx: Context, flow: Flow) -> Head:
    """The final estimator's methods on top of ``flow``."""
    entry = HEADS.lookup(type(est))
    if entry is not None:
        head = entry.fn(est, ctx, flow)
        if rejects_inf(est):
            ctx.reject_inf(flow, est)
        return head
    if STEPS.lookup(type(est)) is not None:  # a transformer ends the pipeline
        sparse = sparse_format(est)
        ctx.sparse_last = est if sparse else None
        out = convert_step(est, ctx, flow)
        if any(s is not None and s in ctx.vocabs for s in out.src):
            strings = string_passthrough(est, ctx, out)
            return Head({"transform": out.node},
                        {"transform": MethodSpec("transform", dtype="object",
                                                 strings=strings)}, allow_nan=True)
        dtype = "input" if out.keeps_dtype else "float64"
        if not out.keeps_dtype and getattr(est, "dtype", None) is not None:
            dtype = np.dtype(est.dtype).name  # OneHotEncoder/OrdinalEncoder(dtype=...)
        if not sparse and out.sparse == "csr":  # a ColumnTransformer's or FeatureUnion's
            sparse = "csr_matrix"  # sparse hstack (.tocsr()), a selector on a CSR
        return Head({"transform": out.node},
                    {"transform": MethodSpec("transform", dtype=dtype, sparse=sparse)},
                    allow_nan=True)
    return splice_frontend(est, ctx, flow)


def _absent_as_missing(est: Any, ctx: Context, flow: Flow) -> Flow:
    """XGBoost reading a sparse matrix an earlier step built (a OneHotEncoder's, a sparse
    ColumnTransformer's) takes its absent entries as missing (docs/sparse.md): the dense
    values' zeros, which scipy does not store (a dense block is hstacked as its nonzeros),
    become NaN. Refused where the matrix may or may not be sparse."""
    if flow.sparse != "csr":
        what = ("a ColumnTransformer's sparse hstack with a text column" if flow.sparse == "text"
                else "the output of a step that may return a sparse matrix")
        raise unsupported(est, f"reading {what} (XGBoost reads its absent entries as missing)",
                          "a dense matrix before it: sparse_output=False, "
                          "ColumnTransformer(sparse_threshold=0)")
    node = ctx.g.add(Op.IMPUTE, (flow.node,), width=flow.width,
                     values=np.full(flow.width, np.nan), missing=0.0)
    return flow.computed(ctx, node, flow.width, nan=True, sparse="")


def string_passthrough(est: Any, ctx: Context, out: Flow) -> tuple:
    """MethodSpec.strings of a SimpleImputer on string columns ending the pipeline: every
    output column is an input column's strings with the missing ones filled."""
    from sklearn.impute import SimpleImputer

    stats = np.asarray(getattr(est, "statistics_", ()), dtype=object)
    if not isinstance(est, SimpleImputer) or est.add_indicator or len(stats) != out.width or \
            any(s is None or s not in ctx.vocabs for s in out.src):
        raise UnsupportedModelError(f"{qualified_name(est)}: transform would return "
                                    "strings; end the pipeline with an encoder or a "
                                    "SimpleImputer on string columns alone")
    if any(not isinstance(v, str) for v in stats):
        raise unsupported(est, "string columns with a non-string fill value", "a str")
    missing = "none" if est.missing_values is None else "nan"
    return tuple((int(s), str(v), missing) for s, v in zip(out.src, stats))


def splice_frontend(est: Any, ctx: Context, flow: Flow) -> Head:
    """Use a model's own frontend as the final step: convert it alone, splice its graph."""
    from peregrine.frontends import convert

    spec = convert(est)
    if spec.category_maps:
        raise UnsupportedModelError(
            f"{qualified_name(est)} reads pandas categories itself; as a pipeline step it must "
            "receive numbers (encode categories with an earlier step)"
        )
    if spec.input_checks:
        raise UnsupportedModelError(f"{qualified_name(est)} checks its input rows; it cannot be "
                                    "spliced as a pipeline step")
    if spec.n_features != flow.width:
        raise UnsupportedModelError(f"{qualified_name(est)} expects {spec.n_features} "
                                    f"columns, the pipeline gives it {flow.width}")
    check_no_strings(est, ctx, flow)
    if not spec.allow_nan and flow.nan:  # (a computed NaN: the guard below)
        ctx.refuse_nan(flow)
    if spec.sparse_nan != "missing" and flow.nan:
        ctx.sparse_nan = "refuse"
        if flow.sparse:  # an earlier step hands it a sparse matrix that may hold NaN
            ctx.reject_nan(flow, est)
    if spec.sparse_absent == "nan" and flow.sparse:
        flow = _absent_as_missing(est, ctx, flow)
    if spec.sparse_absent != "zero":  # XGBoost: absent entries of a sparse input are missing
        # its rule holds when it alone reads the raw input (model_spec counts the readers)
        raw = ctx.g.node(flow.node).op is Op.INPUT and ctx.sparse_absent == "zero"
        ctx.sparse_absent = spec.sparse_absent if raw else "refuse"
        x = next(n.name for n in spec.graph.nodes if n.op is Op.INPUT)
        ctx.sparse_readers = sum(x in n.inputs for n in spec.graph.nodes)
    # the model validates what the steps before it computed (check_array on its input):
    # scikit-learn's trees cast to float32 and reject the infinity that makes
    limit32 = spec.finite_dtype == "float32" and not spec.allow_inf
    if not spec.allow_inf and any(s is not None for s in flow.src):
        ctx.allow_inf = False  # an input column reaches it as it is: the boundary refuses
    if limit32 or (not (spec.allow_nan and spec.allow_inf) and
                   any(s is None for s in flow.src)):
        ctx.guard(flow, est, ("float32" if limit32 else "inf" if not spec.allow_inf else "")
                  + ("" if spec.allow_nan else "+nan"))
    names = ctx.g.splice(spec.graph, flow.node)
    outputs = {m: names[ms.output] for m, ms in spec.methods.items()}
    methods = {m: replace(ms, output=m) for m, ms in spec.methods.items()}
    return Head(outputs, methods, allow_nan=spec.allow_nan)


# ------------------------------------------------------------------- helpers for steps --


def select(ctx: Context, flow: Flow, columns: Any, block: bool = False) -> Flow:
    """Keep ``columns`` (ints) of ``flow``; no node when it is the identity. ``block``: a
    ColumnTransformer block; read straight from the input, its selection records the columns
    whose frame dtypes decide the block's dtype (``Select.frame_block``)."""
    cols = [int(c) for c in np.asarray(columns, dtype=np.int64).reshape(-1)]
    if cols == list(range(flow.width)):
        return flow
    frame = block and ctx.g.node(flow.node).op is Op.INPUT
    node = ctx.g.add(Op.SELECT, (flow.node,), width=len(cols), columns=np.asarray(cols),
                     **({"frame_block": np.asarray(cols)} if frame else {}))
    return replace(flow, node=node, src=tuple(flow.src[c] for c in cols))


def concat(ctx: Context, flows: list[Flow]) -> Flow:
    flows = [f for f in flows if f.width]
    if len(flows) == 1:
        return flows[0]
    src = tuple(s for f in flows for s in f.src)
    keeps = all(f.keeps_dtype for f in flows)
    # np.hstack: float32 only when every block is float32 (or boolean, MissingIndicator's)
    node = ctx.g.add(Op.CONCAT, tuple(f.node for f in flows), width=len(src), float32=keeps)
    return Flow(node, src, nan=any(f.nan for f in flows), keeps_dtype=keeps)


def weighted(est: Any, ctx: Context, flow: Flow, weight: Any) -> Flow:
    """``res * weight`` (ColumnTransformer / FeatureUnion ``transformer_weights``:
    pipeline.py ``_transform_one``). A Python number meets a float32 block as float32 (NEP 50:
    the weight rounds to float32, the product is float32); a NumPy float64 scalar promotes."""
    if weight is None:
        return flow
    check_no_strings(est, ctx, flow)
    if isinstance(weight, bool) or not isinstance(weight, (int, float, np.integer, np.floating)):
        raise UnsupportedModelError(f"{qualified_name(est)}: transformer weight {weight!r} is "
                                    "not a number")
    strong64 = isinstance(weight, np.floating) and np.dtype(type(weight)).itemsize > 4
    keeps = flow.keeps_dtype and not strong64
    node = ctx.g.add(Op.AFFINE, (flow.node,), width=flow.width, scale=float(weight),
                     shift=0.0, float32="cast" if keeps else "never")
    return replace(flow, node=node, src=(None,) * flow.width, keeps_dtype=keeps)


def check_no_strings(est: Any, ctx: Context, flow: Flow) -> None:
    for i, s in enumerate(flow.src):
        if s is not None and s in ctx.vocabs:
            raise UnsupportedModelError(f"{qualified_name(est)} receives strings in column {i}")
