"""Compile-time validation (``CompileOptions(validate=True)``): every method of a compiled model
run on the sample rows through the source library and through the compiled program, compared
under the project's contract, the same one the conformance suite asserts
(``tests/conformance/test_conformance.py``): float outputs within ``rtol=1e-5, atol=1e-6`` of the
source (NaN in the same places counts as equal; infinities must match), every other output
(labels, integers, strings) exactly equal, and shapes and dtypes identical. A difference raises
:class:`~peregrine.errors.ValidationError` naming the worst element; otherwise the largest
deviations are returned as a JSON-able report that ``explain()`` shows and artifacts keep."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from peregrine.errors import ValidationError

RTOL, ATOL = 1e-5, 1e-6


def validate(compiled: Any, model: Any, sample: Any, *, report_only: bool = False
             ) -> dict[str, Any]:
    """Compare ``compiled`` with ``model`` on ``sample``; raise ValidationError on a difference.

    Returns ``{"rows", "rtol", "atol", "backend", "device", "methods": {name: {"max_abs",
    "max_rel", "exact"}}}``: per method the largest absolute and relative deviation over the
    elements finite on both sides (relative: where the source value is non-zero); ``exact`` for
    outputs compared by equality (their deviations are 0 when they pass).

    ``report_only``: a program that by request does not keep the contract (the low-precision
    levels, ``Precision.BFLOAT16`` / ``FLOAT16``: docs/passes.md) is measured, not judged:
    values and labels that differ are counted in the report (``labels_changed``) instead of
    raising; a different shape or dtype still raises.
    """
    source_rows = _source_rows(sample, compiled.spec.feature_names)
    methods: dict[str, Any] = {}
    failures: list[ValidationError] = []
    n_rows = 0
    for name in compiled.methods:
        got = np.asarray(getattr(compiled, name)(sample))
        want = _call_source(model, name, source_rows, compiled.spec.source)
        want = np.asarray(want.toarray() if hasattr(want, "toarray") else want)  # scipy.sparse
        n_rows = len(got) if got.ndim else n_rows
        try:
            methods[name] = compare(got, want, f"{compiled.spec.source}.{name}", name,
                                    report_only)
        except ValidationError as exc:
            failures.append(exc)
    if failures:
        first = failures[0]
        if len(failures) > 1:
            others = ", ".join(f.method for f in failures[1:] if f.method)
            first.args = (f"{first.args[0]} (also differs: {others})",)
        raise first
    return {
        "rows": n_rows,
        "rtol": "reported only" if report_only else RTOL,
        "atol": "reported only" if report_only else ATOL,
        "backend": compiled.backend,
        "device": compiled.device,
        "methods": methods,
    }


def compare(got: np.ndarray, want: np.ndarray, where: str, method: str,
            report_only: bool = False) -> dict[str, Any]:
    """One method's outputs: the deviation entry, or ValidationError naming the worst element
    (``report_only``: values are measured, never judged)."""
    if got.shape != want.shape:
        raise ValidationError(
            f"validation failed: {where}: the compiled program returns shape {got.shape}, the "
            f"source returns {want.shape}",
            method=method,
        )
    if got.dtype != want.dtype and not (got.dtype.kind == want.dtype.kind == "O"):
        raise ValidationError(
            f"validation failed: {where}: the compiled program returns dtype {got.dtype}, the "
            f"source returns {want.dtype}",
            method=method,
        )
    if got.size == 0:
        return {"max_abs": 0.0, "max_rel": 0.0, "exact": want.dtype.kind not in "fc"}
    if want.dtype.kind not in "fc":
        differ = np.asarray(got != want, dtype=bool)
        if report_only:
            return {"max_abs": 0.0, "max_rel": 0.0, "exact": True,
                    "labels_changed": int(differ.sum())}
        if differ.any():
            idx = np.unravel_index(int(np.flatnonzero(differ)[0]), got.shape)
            _raise_at(
                where, method, idx, got[idx], want[idx], f"{want.dtype} outputs must be equal"
            )
        return {"max_abs": 0.0, "max_rel": 0.0, "exact": True}
    g = got.astype(np.result_type(got.dtype, np.float64), copy=False)
    w = want.astype(g.dtype, copy=False)
    finite = np.isfinite(g) & np.isfinite(w)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: masked out just below
        diff = np.where(finite, np.abs(g - w), 0.0)
    allowed = ATOL + RTOL * np.abs(np.where(finite, w, 0.0))
    # non-finite values must match exactly (NaN with NaN, each infinity with itself)
    same_special = (np.isnan(g) & np.isnan(w)) | (~np.isnan(g) & ~np.isnan(w) & (g == w))
    ratio = np.where(finite, diff / allowed, np.where(same_special, 0.0, np.inf))
    worst = int(np.argmax(ratio))
    if ratio.flat[worst] > 1.0 and not report_only:
        idx = np.unravel_index(worst, got.shape)
        if finite[idx]:
            rule = (
                f"|diff| {diff[idx]:.3g} > atol {ATOL:g} + rtol {RTOL:g} x |source| "
                f"= {allowed[idx]:.3g}"
            )
        else:
            rule = f"NaN and infinities must match exactly; rtol {RTOL:g}, atol {ATOL:g}"
        _raise_at(where, method, idx, got[idx], want[idx], rule)
    nonzero = finite & (w != 0)
    rel = diff[nonzero] / np.abs(w[nonzero])
    return {"max_abs": float(diff.max()), "max_rel": float(rel.max(initial=0.0)), "exact": False}


def _raise_at(where: str, method: str, idx: tuple, got: Any, want: Any, rule: str) -> None:
    row = int(idx[0])
    column = None if len(idx) == 1 else (int(idx[1]) if len(idx) == 2 else tuple(map(int, idx[1:])))
    at = f"sample row {row}" + ("" if column is None else f", column {column}")
    got, want = _scalar(got), _scalar(want)
    raise ValidationError(
        f"validation failed: {where} differs at {at}: compiled {got!r}, source {want!r} ({rule})",
        method=method,
        row=row,
        column=column,
        compiled=got,
        source=want,
        rtol=RTOL,
        atol=ATOL,
    )


def _scalar(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def _source_rows(sample: Any, names: tuple[str, ...] | None) -> Any:
    """The sample as the source library takes it: the user's own object, except that a torch
    tensor (which Peregrine accepts and the libraries do not) becomes a NumPy array, and a
    DataFrame is put in the fitted column order (the compiled model matches columns by name;
    scikit-learn and XGBoost refuse another order, LightGBM would read by position)."""
    if type(sample).__module__.split(".")[0] == "torch":
        return sample.detach().cpu().numpy()
    columns = getattr(sample, "columns", None)
    if names is not None and columns is not None and list(columns) != list(names):
        if set(names) <= set(columns):
            return sample[list(names)]
    return sample


def _call_source(model: Any, method: str, X: Any, source: str) -> Any:
    try:
        with warnings.catch_warnings():
            # e.g. "X does not have valid feature names": a nuisance here, not the user's call
            warnings.simplefilter("ignore")
            return source_method(model, method)(X)
    except Exception as exc:  # noqa: BLE001 - the source refusing is itself a finding
        raise ValidationError(
            f"validation failed: {source}.{method} raised {type(exc).__name__} on the sample "
            f"rows ({exc}) while the compiled program returned values",
            method=method,
        ) from exc


def source_method(model: Any, method: str) -> Callable[[Any], Any]:
    """The source library's own ``method``. The libraries' low-level Boosters are what model
    files load as; they answer ``predict`` as the frontends read them (see the Booster notes
    in ``frontends/xgboost.py`` and ``frontends/lightgbm.py``)."""
    library = type(model).__module__.split(".")[0]
    if type(model).__name__ == "Booster" and library == "xgboost":
        return lambda X: _xgboost_booster_predict(model, X)
    # lightgbm.Booster.predict(X) takes arrays and DataFrames as they are (best_iteration)
    return getattr(model, method)


def _xgboost_booster_predict(booster: Any, X: Any) -> Any:
    """``Booster.predict(DMatrix(X))``, as tests/conformance/cases_xgboost.py calls it: every
    tree, NaN as missing. A DataFrame brings its own column types; a NumPy array is given the
    booster's (categorical features)."""
    import xgboost

    if hasattr(X, "columns"):
        dm = xgboost.DMatrix(X, enable_categorical=True)
    else:
        dm = xgboost.DMatrix(X, feature_types=booster.feature_types, enable_categorical=True)
    return booster.predict(dm, validate_features=False)
