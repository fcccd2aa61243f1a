"""CompiledModel: the object users get back. It exposes exactly the methods the source model has,
validates inputs at the boundary, runs the backend's Executable, and shapes/labels the outputs as
the source library does."""

from __future__ import annotations

import json
import math
import os
from contextlib import nullcontext
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np

from peregrine.backends import Executable, get_backend, resolve_auto
from peregrine.errors import InputError, NonFiniteInput, UnsupportedModelError
from peregrine.ir.spec import INPUT_ERRORS, METHOD_NAMES, ModelSpec
from peregrine.options import CompileOptions


class _Method:
    """Descriptor: present only when the source model has the method (so ``hasattr`` is honest,
    as scikit-learn's ``available_if`` does)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.__doc__ = f"Same as the source model's ``{name}``; returns the same numbers."

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        if self.name not in obj.spec.methods:
            raise AttributeError(
                f"{obj.spec.source} has no {self.name}(); available: {', '.join(obj.methods)}"
            )

        name = self.name

        def call(X: Any) -> np.ndarray:
            fast = obj._fast.get(name)
            if fast is None:
                fast = obj._fast[name] = obj._fast_path(name)
            # the online case, checked inline: a 2-D float32/float64 array of the right width
            if (fast is not False and type(X) is np.ndarray and X.ndim == 2
                    and X.dtype.num in _FLOAT_NUMS and X.shape[1] == obj._n_features
                    and X.shape[0]):
                return fast(X)
            return obj._call(name, X)

        call.__name__ = name
        call.__doc__ = self.__doc__
        # cached on the instance (this descriptor defines no __set__, so the instance dict wins
        # on the next lookup): no new closure per ``model.predict`` attribute access; where the
        # backend offers it, a builtin doing call's online case in machine code instead
        method = obj._entry(name, call, self.__doc__) or call
        columns = obj.spec.methods[name].frame_columns
        if columns:  # set_output(transform="pandas"): the array as the source's DataFrame
            method = _framed(method, columns, self.__doc__)
        obj.__dict__[name] = method
        return method


def _framed(method: Any, columns: tuple[str, ...], doc: str | None) -> Any:
    """``method`` returning a DataFrame as scikit-learn's pandas output does
    (``_wrap_in_pandas_container``): these columns, the input frame's index (a default
    index for other inputs)."""
    def framed(X: Any) -> Any:
        import pandas as pd

        out = method(X)
        index = X.index if isinstance(X, pd.DataFrame) else None
        return pd.DataFrame(out, columns=list(columns), index=index, copy=False)

    framed.__name__ = getattr(method, "__name__", "transform")
    framed.__doc__ = doc
    return framed


_FLOAT_NUMS = frozenset({np.dtype(np.float32).num, np.dtype(np.float64).num})


def _to_sparse(out: np.ndarray, kind: str) -> Any:
    """The dense result as the scipy.sparse class the source returns (MethodSpec.sparse)."""
    from scipy import sparse

    return getattr(sparse, kind)(out)


class CompiledModel:
    predict = _Method("predict")
    predict_proba = _Method("predict_proba")
    predict_log_proba = _Method("predict_log_proba")
    decision_function = _Method("decision_function")
    transform = _Method("transform")
    score_samples = _Method("score_samples")

    def __init__(self, spec: ModelSpec, backend: str, executable: Executable,
                 options: CompileOptions, device: str = "cpu",
                 content_hash: str | None = None) -> None:
        self.spec = spec
        self.backend = backend
        self.options = options
        self.content_hash = content_hash
        self._exec = executable
        self._device = device
        self._n_features = spec.n_features
        self._fast: dict[str, Any] = {}  # method -> online fast path, or False for none
        # float32 ColumnTransformer blocks of a mixed frame -> (executable, float32 outputs)
        self._variants: dict[frozenset, tuple[Executable, dict[str, bool]]] = {}
        self._frame_blocks = frame_blocks(spec)  # the blocks that may be float32
        # CompileOptions(validate=True): the largest deviations from the source seen on the
        # sample rows (runtime/validate.py); kept in saved artifacts. None: not validated.
        self.validation: dict[str, Any] | None = None
        # what each graph pass changed (passes/manager.py), one entry per pass run; kept in
        # saved artifacts (their graph is the optimized one). None: not recorded.
        self.passes: list[dict[str, str]] | None = None
        # compiled with backend="auto": to() re-picks the backend for the new device
        self.auto_backend = False

    # ------------------------------------------------------------------ public surface --
    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(m for m in METHOD_NAMES if m in self.spec.methods)

    @property
    def device(self) -> str:
        return self._device

    @property
    def n_features_in_(self) -> int:
        return self.spec.n_features

    @property
    def feature_names_in_(self) -> np.ndarray | None:
        names = self.spec.feature_names
        return None if names is None else np.array(names, dtype=object)

    @property
    def classes_(self) -> np.ndarray | None:
        m = self.spec.methods.get("predict")
        return None if m is None else m.labels

    def explain(self) -> str:
        """Human-readable account of what was compiled and which choices were made, and why."""
        info = self.explain_dict()
        lines = [f"Peregrine compiled {info['source']} for backend {info['backend']!r} "
                 f"on {info['device']}"]
        lines.append(f"  methods: {', '.join(info['methods'])}")
        lines.append(f"  input: {info['n_features']} features"
                     + (", matched by column name" if self.spec.feature_names else ""))
        for key, val in info["backend_choices"].items():
            if isinstance(val, dict):
                val = json.dumps(val, default=str)
            lines.append(f"  {key}: {val}")
        for t in info.get("text", ()):
            lines.append(f"  text: {t['analyzer']} {tuple(t['ngram_range'])}-grams, "
                         f"{t['columns']} columns, the graph reads {t['reads']}; tokenizer: "
                         f"{t['tokenizer']}")
        lines.append(f"  validation: {_validation_line(info['validation'])}")
        if isinstance(info["passes"], list):
            lines.append("  passes:")
            lines.extend(f"    {p['pass']}: {p['changed']} ({p['nodes']} nodes)"
                         for p in info["passes"])
        return "\n".join(lines)

    def explain_dict(self) -> dict[str, Any]:
        text = None
        if self.spec.text is not None:
            from peregrine.runtime.text import explain_text

            text = explain_text(self.spec.text)
        return {
            "source": self.spec.source,
            "backend": self.backend,
            "device": self._device,
            "methods": list(self.methods),
            "n_features": self.spec.n_features,
            "options": self.options.to_json(),
            "backend_choices": self._exec.explain(),
            "validation": self.validation or "not validated",
            "passes": self.passes if self.passes is not None else "not recorded",
            **({} if text is None else {"text": text}),
        }

    def to(self, device: str) -> CompiledModel:
        """Move to another device (tensor backends). A model compiled with ``backend="auto"``
        is rebuilt for the backend ``auto`` picks there (native on a CPU, torch on CUDA).
        Returns self for chaining."""
        target = resolve_auto(device) if self.auto_backend else self.backend
        if target == self.backend and device == self._device:
            return self  # already there (a CPU-only backend's executable cannot move)
        if target != self.backend:
            self._exec = get_backend(target).build(self.spec, self.options, device)
            self.backend = target
        elif device.split(":")[0] not in get_backend(target).devices:
            raise UnsupportedModelError(
                f"backend {target!r} runs on {', '.join(get_backend(target).devices)}, not on "
                f"{device!r}: compile with backend='torch' (or 'auto') for a GPU")
        else:
            self._exec = self._exec.to(device)
        self._device = device
        self._fast.clear()
        self._variants.clear()
        for name in METHOD_NAMES:  # cached bound methods (native entries) of the old device
            self.__dict__.pop(name, None)
        return self

    def save(self, path: str | os.PathLike) -> str:
        """Write a versioned, hashed artifact; returns its content hash."""
        from peregrine._version import __version__
        from peregrine.runtime.artifact import save_artifact

        state = getattr(self._exec, "artifact_state", None)
        self.content_hash = save_artifact(
            path, self.spec, backend=self.backend, device=self._device,
            options=self.options.to_json(),
            backend_state=state() if callable(state) else None,
            versions={"peregrine": __version__}, validation=self.validation,
            passes=self.passes,
        )
        return self.content_hash

    def export_onnx(self, path: str | os.PathLike, *, opset: int | None = None,
                    batch: int | str = "dynamic", ml_ops: str = "auto",
                    sample: Any = None, input_dtype: str | None = None,
                    precision: Any = "auto", string_inputs: bool = False) -> Any:
        """Write this program as an ONNX model (input ``X`` float64, or ``input_dtype``
        "float32"/"auto"; ``precision="float32"``: the float32 level; ``string_inputs``: string
        columns as string inputs coded inside the file; docs/export.md; outputs
        ``label`` and ``probabilities`` for classifiers, ``variable`` otherwise), checked with
        ``onnx.checker`` and validated in ONNX Runtime against this model on ``sample`` (or
        generated rows, NaN included where the source accepts it); a difference raises
        ``ValidationError``, an op ONNX cannot express ``UnsupportedModelError``. Returns an
        ``ExportReport``. docs/export.md."""
        from peregrine.export import export_onnx  # lazy: export sits above runtime

        return export_onnx(self, path, opset=opset, batch=batch, ml_ops=ml_ops, sample=sample,
                           input_dtype=input_dtype, precision=precision,
                           string_inputs=string_inputs)

    def export_library(self, path: str | os.PathLike, *, target: str = "x86_64-linux-gnu",
                       cpu: str | None = None, prefix: str = "peregrine", methods: Any = None,
                       header: str | os.PathLike | None = None, cc: str | None = None,
                       sample: Any = None, validate: bool = True) -> Any:
        """Write this program as a shared library for ``target`` ("x86_64-linux-gnu" or
        "aarch64-linux-gnu"; ``cpu``: "x86-64" (default), "x86-64-v2/v3/v4", "host") and its
        C header (``path`` with ``.h``), linking only libc and libm: one function per method
        in a float and a double form (``<prefix>_predict``, ``<prefix>_predict_f64``...).
        When the library runs on this machine it is validated against this model on
        ``sample`` (or generated rows). An op without native code raises
        ``UnsupportedModelError`` naming it. Returns a ``LibraryReport``. docs/export.md."""
        from peregrine.runtime.library import export_library

        return export_library(self, path, target=target, cpu=cpu, prefix=prefix,
                              methods=methods, header=header, cc=cc, sample=sample,
                              validate=validate)

    def model_input(self, X: Any) -> np.ndarray:
        """The numeric matrix the compiled program reads for ``X``: columns matched by name,
        strings and categories as their codes (what ``export_onnx`` files and
        ``export_library`` functions take). Not checked against the NaN/inf policy."""
        return np.asarray(prepare_input(X, self.spec, check=False))

    def probe_row(self, dtype: Any = np.float64) -> np.ndarray:
        """One numeric row the model accepts where it can: zeros, except that a column read
        through a category map holds the code of its first real category (code 0 is the NaN
        slot and 1 None's, which an encoder with handle_unknown='error' rejects). Dask and
        Spark score it to learn a method's output shape and dtype."""
        row = np.zeros((1, self.spec.n_features), dtype=dtype)
        for col, cats in self.spec.category_maps.items():
            known = [i for i, c in enumerate(cats)
                     if c is not None and not (isinstance(c, float) and c != c)]
            if known:
                row[0, col] = known[0]
        return row

    def rebuild(self, backend: str) -> CompiledModel:
        """The same program (graph, options) built for another backend on CPU."""
        return build(self.spec, backend, self.options, "cpu")

    def __repr__(self) -> str:
        return (f"CompiledModel({self.spec.source}, backend={self.backend!r}, "
                f"device={self._device!r}, methods={list(self.methods)})")

    # ---------------------------------------------------------------------- internals --
    def _entry(self, name: str, call: Any, doc: str) -> Any:
        """The method as a builtin that runs ``call``'s online case (one row to a few, the
        checks included) in machine code and hands every other input to ``call``: the
        backend's ``native`` hook on the fast path (native backend: kernels/pyentry.py), or
        None."""
        fast = self._fast.get(name)
        if fast is None:
            fast = self._fast[name] = self._fast_path(name)
        make = getattr(fast, "native", None)
        return None if make is None else make(call, name=name, doc=doc)

    def _fast_path(self, name: str) -> Any:
        """``X -> result`` for an input ``prepare_input`` would pass through unchanged (a 2-D
        float32/float64 array of the right width, the caller checks that): what ``_call`` does,
        minus its generic steps, so one row costs the kernel and little else. False when this
        model or method needs the generic path (rows the graph flags, no backend runner)."""
        spec, method = self.spec, self.spec.methods[name]
        if spec.input_checks or spec.text is not None or method.strings:
            return False  # documents and strings go through prepare_input
        run = self._exec.runner(method.output)
        if run is None:
            return False
        fast = self._finish(method, run)
        native = getattr(run, "native", None)
        if native is not None and fast is not run:  # labels, casts: after the builtin's run
            # a runner that checks the source's NaN/inf policy itself (``checks_finite``)
            # hands that check to the builtin, whose rows then go back to ``run`` (which
            # raises NonFiniteInput for ``checked`` below); built without it, the builtin
            # answered every NaN and infinity (LinearRegression.predict, a MissingIndicator)
            inner = native(run, finite_only=bool(getattr(run, "checks_finite", False)))
            fast = fast if inner is None else self._finish(method, inner)
            native = None
        generic = self._call
        found, bound = guards(spec)
        if found and self.options.validate_input:
            # a step re-validates what earlier ones computed (runtime/guards.py): inputs whose
            # sum of squares proves every |x| <= bound pass (one BLAS pass; NaN fails it); the
            # others take the generic path, which checks exactly. The machine-code builtin
            # checks each value against the bound as it copies it (kernels/pyentry.py)
            # EVERY_ROW (a negative bound: even a zero row may break a rule) makes the limit
            # negative, so no row passes; float64 limits: a float32 sum meets them unrounded
            lim2 = np.float64(math.copysign(bound * bound, bound) * (1 - 1e-6))
            hook, inner_fast, native = native, fast, None
            # np.vdot: the same BLAS sum, but NumPy reads no floating-point status after it;
            # np.dot warns of the overflow (|x| > 1e154) this proof exists to catch
            dot = np.vdot

            f32, lim32 = np.dtype(np.float32), lim2 * 0.5

            def fast(X: np.ndarray) -> np.ndarray:  # noqa: F811
                flat = X.ravel(order="K")  # a view of a C- or F-ordered matrix
                # (vdot raises no warning: no errstate needed, ~1 us saved a call).
                # A float32 sum of n squares may fall short of the exact one by n * 2**-24 of
                # it: half the limit, up to 2**22 values, keeps the proof a proof
                if X.dtype == f32:
                    ok = flat.size < 1 << 22 and dot(flat, flat) < lim32
                else:
                    ok = dot(flat, flat) < lim2
                if ok:
                    return inner_fast(X)
                # a batch beyond the bound may still be proved by its own column ranges
                # (runtime/guards.py). NaN the source accepts passes that proof, and a kernel
                # that checks as it reads (``checks_finite``) then leaves it to the generic
                # path, which says where (a NaN category, a NaN an imputer fills)
                if X.shape[0] >= PROOF_ROWS and batch_proves(spec, X, nan_ok=spec.allow_nan):
                    try:
                        return inner_fast(X)
                    except NonFiniteInput:
                        pass
                return generic(name, X)

            if spec.finite_dtype != "float32" or bound < FLOAT32_OVERFLOW:
                if hook is not None:  # values beyond the bound, NaN or inf: the generic path
                    fast.native = partial(hook, finite_only=True, bound=bound)
                return fast  # the proof also proves every value finite: no other check
        if getattr(run, "checks_finite", False):
            # the kernel checked as it read the rows: no separate pass over the input
            def checked(X: np.ndarray) -> np.ndarray:
                try:
                    return fast(X)
                except NonFiniteInput:  # the generic path checks again and says where
                    return generic(name, X)

            if native is not None:  # the builtin sends rows with NaN/inf to ``checked``
                checked.native = partial(native, finite_only=True)  # type: ignore[attr-defined]
            return checked
        if not self.options.validate_input or (spec.allow_nan and spec.allow_inf):
            return fast  # (run itself when it has ``native``: ``_entry`` finds it there)
        # the source rejects NaN or infinity: a finite sum proves the input holds neither
        # (one reduction, ~0.5 us a row); anything else (a NaN the model accepts, an overflowing
        # sum, a value to reject) takes the generic path, which checks and says where
        total, finite = np.add.reduce, math.isfinite
        if not spec.allow_inf and (spec.allow_nan or spec.finite_dtype == "float32"):
            # One max and one min decide: an infinity fails them, and so does a float64 value
            # that float32 makes infinite where the source rounds to float32 first
            # (scikit-learn's trees). fmax/fmin skip NaN where the source accepts it; maximum
            # and minimum carry it to the comparison where it does not. (A sum was one pass,
            # but a NaN made it NaN and sent the call down the generic path: a decision tree
            # on 20K x 10 rows with NaN, 304 -> 190 us; AMD EPYC family 26.)
            limit = FLOAT32_OVERFLOW if spec.finite_dtype == "float32" else math.inf
            hi, lo = (np.fmax, np.fmin) if spec.allow_nan else (np.maximum, np.minimum)

            def check(X: np.ndarray) -> np.ndarray:
                # (Python floats: a float32 maximum against the limit would cast the limit)
                ok = (float(hi.reduce(X, axis=None)) < limit
                      and float(lo.reduce(X, axis=None)) > -limit)
                return fast(X) if ok else generic(name, X)
        else:
            def check(X: np.ndarray) -> np.ndarray:
                return fast(X) if finite(total(X, None)) else generic(name, X)

        if native is not None:  # the builtin sees each value as it copies it
            check.native = partial(native, finite_only=True)
        return check

    @staticmethod
    def _finish(method: Any, run: Any) -> Any:
        """``run`` followed by what ``_call`` does to its output (``output_shaper``)."""
        plain = not (method.sparse or method.squeeze) and method.labels is None
        declared = getattr(run, "dtype", None)  # (np.dtype("float64") == None holds: test it)
        if plain and method.dtype != "input" and declared is not None and \
                np.dtype(declared) == np.dtype(method.dtype):
            return run  # the runner already returns what the method does
        shape = output_shaper(method)
        return lambda X: shape(run(X), X.dtype)

    def _call(self, name: str, X: Any) -> np.ndarray:
        method = self.spec.methods[name]
        if self.spec.text is not None and self.spec.text.width is None:
            from peregrine.runtime.text import text_matrix  # a vectorizer alone: S is the answer

            return text_matrix(X, self.spec)
        if self.spec.text is None and is_sparse(X):  # scipy.sparse: blocks of rows, or the
            return call_sparse(self, name, X)       # sparse linear path (runtime/sparse.py)
        keep_tensor = getattr(self._exec, "accepts_tensors", False)
        arr = prepare_input(X, self.spec, keep_tensor=keep_tensor,
                            check=self.options.validate_input)
        if arr.shape[0] == 0:
            raise InputError("input has 0 rows; expected at least one")
        # a magnitude beyond the guards' bound may overflow in the steps (as it does in
        # scikit-learn's, which then raises): run quietly, the guards say where it breaks
        beyond = self.options.validate_input and beyond_bound(self.spec, arr)
        exe, out32 = self._exec, None
        if self.spec.text is None and arr.dtype == np.float64 and is_dataframe(X):
            variant = self._frame_variant(X)
            if variant is not None:  # float32 ColumnTransformer blocks of a mixed frame
                exe, out32 = variant
        with np.errstate(all="ignore") if beyond else nullcontext():
            if self.spec.input_checks and self.options.validate_input:
                # rows sklearn would reject (handle_unknown='error'...) are flagged by the
                # graph itself, in the same run: a compiled program cannot raise per row
                res = exe.run(arr, (method.output, INPUT_ERRORS))
                self._raise_flagged(np.asarray(res[INPUT_ERRORS]), arr)
                out = res[method.output]
            else:
                out = exe.run(arr, (method.output,))[method.output]
        if beyond:  # values a later step re-validates (after the encoders' checks: the
            # earlier steps raise first), of the steps this method runs
            check_guards(self.spec, arr, beyond=True, method=name)
        if method.strings:
            return _string_columns(X, self.spec, method.strings)
        # dtype "input": the source keeps a float32 input float32 (sklearn's scalers)
        in_dtype = np.dtype(str(arr.dtype).replace("torch.", "")) \
            if method.dtype == "input" else None
        if in_dtype is not None and out32 is not None and out32[method.output]:
            in_dtype = np.dtype(np.float32)  # every block of the output float32 (np.hstack)
        return output_shaper(method)(np.asarray(out), in_dtype)

    def _frame_variant(self, df: Any) -> tuple[Executable, dict[str, bool]] | None:
        """For a DataFrame read as float64 in which some ColumnTransformer blocks are float32
        (runtime/frame_blocks.py): the executable of the program computing those blocks in
        float32, built for this backend on first use, and per output whether it is float32.
        None when no block is."""
        blocks = float32_blocks(df, self.spec, self._frame_blocks)
        if not blocks:
            return None
        found = self._variants.get(blocks)
        if found is None:  # (two threads may both build it: the same program either way)
            spec = variant_spec(self.spec, blocks)
            flow = float32_flow(spec.graph)
            exe = get_backend(self.backend).build(spec, self.options, self._device)
            found = self._variants[blocks] = (exe, {o: flow[v]
                                                    for o, v in spec.graph.outputs.items()})
        return found

    def _raise_flagged(self, flags: np.ndarray, arr: Any) -> None:
        bad = flags != 0
        if not bad.any():
            return
        r, c = (int(i) for i in np.argwhere(bad)[0])
        what, src = self.spec.input_checks[c]
        where = ""
        if src >= 0:
            names = self.spec.feature_names
            value = float(arr[r, src])
            cats = self.spec.category_maps.get(src)
            if cats is not None:  # a code: show the value the user passed
                # code 0 is NaN's slot (and 1 None's) in the vocabulary: its own value
                value = None if np.isnan(value) or not 0 <= value < len(cats) \
                    else cats[int(value)]
            where = f" in column {names[src] if names else src!r} (value {value!r})"
        raise InputError(f"{self.spec.source}: row {r}{where}: {what}")


def output_shaper(method: Any) -> Any:
    """``(output, input dtype) -> what the method returns``: the source's labels for class
    indices, 1-D where the source squeezes, its dtype ("input": the input's float dtype) and
    its scipy.sparse class. The one place both the generic path (``_call``) and the online
    paths (``_finish``) shape outputs."""
    if method.sparse:
        dense = output_shaper(replace(method, sparse=""))
        return lambda out, dt: _to_sparse(dense(out, dt), method.sparse)
    labels = method.labels
    if labels is not None:
        return lambda out, dt: labels[out.reshape(-1)]
    if method.dtype == "input":
        if method.squeeze:
            return lambda out, dt: out.reshape(-1).astype(dt, copy=False)
        return lambda out, dt: out.astype(dt, copy=False)
    dtype = np.dtype(method.dtype)
    if method.squeeze:
        return lambda out, dt: out.reshape(-1).astype(dtype, copy=False)
    return lambda out, dt: out.astype(dtype, copy=False)


def _string_columns(X: Any, spec: ModelSpec, strings: tuple) -> np.ndarray:
    """MethodSpec.strings: the input's own values of the named columns, the missing ones
    filled, as an object array (what SimpleImputer.transform returns on string columns). The
    mask is scikit-learn's: ``X != X`` (float NaN) for missing_values=np.nan, ``X == None``
    for None; the graph's codes are not used, so unseen strings pass through unchanged."""
    out = np.empty((len(X), len(strings)), dtype=object)
    for k, (col, fill, missing) in enumerate(strings):
        if hasattr(X, "iloc"):  # a DataFrame: columns by name, as prepare_input matched them
            names = spec.feature_names
            raw = (X[names[col]] if names else X.iloc[:, col]).to_numpy(dtype=object)
        else:
            raw = np.asarray(X, dtype=object)[:, col]
        hit = (raw != raw) if missing == "nan" else np.equal(raw, None)
        out[:, k] = np.where(hit.astype(bool), fill, raw)
    return out


def _validation_line(report: Any) -> str:
    if not isinstance(report, dict):
        return "not validated"
    parts = []
    for name, dev in report.get("methods", {}).items():
        if dev.get("labels_changed"):
            parts.append(f"{name} {dev['labels_changed']} label(s) changed")
        elif dev.get("exact"):
            parts.append(f"{name} equal")
        else:
            parts.append(f"{name} max |diff| {dev.get('max_abs', 0.0):.3g}, "
                         f"max rel {dev.get('max_rel', 0.0):.3g}")
    where = f"{report.get('backend')} on {report.get('device')}"
    return (f"against the source on {report.get('rows')} sample rows ({where}; rtol "
            f"{report.get('rtol')}, atol {report.get('atol')}): " + "; ".join(parts))


def build(spec: ModelSpec, backend: str, options: CompileOptions, device: str,
          content_hash: str | None = None, *, sample: np.ndarray | None = None,
          saved: dict[str, Any] | None = None) -> CompiledModel:
    executable = get_backend(backend).build(spec, options, device, sample=sample, saved=saved)
    return CompiledModel(spec, backend, executable, options, device, content_hash)


from peregrine.runtime.frame_blocks import (  # noqa: E402
    float32_blocks,
    float32_flow,
    frame_blocks,
    variant_spec,
)
from peregrine.runtime.guards import (  # noqa: E402
    PROOF_ROWS,
    batch_proves,
    beyond_bound,
    check_guards,
    guards,
)
from peregrine.runtime.inputs import (  # noqa: E402  (after CompiledModel: no cycle)
    FLOAT32_OVERFLOW,
    is_dataframe,
    prepare_input,
)
from peregrine.runtime.sparse import call_sparse, is_sparse  # noqa: E402
