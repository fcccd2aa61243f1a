"""Built-in peers: ONNX Runtime (via skl2onnx / onnxmltools), TL2cgen (Treelite's C code
generator), lleaves (LLVM for LightGBM) and Hummingbird (tensor programs on PyTorch).

Each peer's ``prepare`` returns what the source library's ``score_method`` returns, up to the
shape conventions the runner aligns (a binary classifier's (n, 2) probabilities against a
Booster's (n,) positive-class probability). Conversions that a peer's own converter rejects
raise, and the runner turns that into a skipped system with a note.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import shutil
import tempfile
import weakref
from typing import Any

import numpy as np

from peregrine.bench.peers import (
    Peer,
    Predict,
    is_booster,
    is_classifier,
    model_library,
    register_peer,
    score_method,
)

TREE_LIBRARIES = ("sklearn", "xgboost", "lightgbm")


def _rows_2d(out: Any, n: int) -> np.ndarray:
    """(n,) for one output per row, (n, k) otherwise: peers disagree on trailing axes."""
    arr = np.asarray(out).reshape(n, -1)
    return arr[:, 0] if arr.shape[1] == 1 else arr


def _booster_of(model: Any) -> Any:
    """The low-level Booster behind a model or one of the libraries' sklearn wrappers."""
    if is_booster(model):
        return model
    if model_library(model) == "xgboost":
        return model.get_booster()
    return model.booster_


def _xgboost_unnamed(model: Any) -> Any:
    """A copy without feature names: onnxmltools parses XGBoost's text dump and only accepts
    the default 'f<index>' names. Columns are positional in the ONNX graph either way."""
    clone = copy.deepcopy(model)
    booster = clone if is_booster(clone) else clone.get_booster()
    booster.feature_names = None
    booster.feature_types = None
    return clone


def _temp_dir(owner: Any, prefix: str) -> str:
    """A scratch directory removed when ``owner`` (the compiled predictor) is collected."""
    path = tempfile.mkdtemp(prefix=prefix)
    weakref.finalize(owner, shutil.rmtree, path, True)
    return path


@register_peer
class OnnxRuntimePeer(Peer):
    """ONNX Runtime on the CPU execution provider. Converters: skl2onnx for scikit-learn,
    onnxmltools for XGBoost and LightGBM. ONNX's tree operators compare in float32, which is
    where mismatches against float64-threshold libraries show up."""

    name = "onnxruntime"
    packages = ("onnxruntime",)
    install_hint = "onnxruntime skl2onnx onnxmltools"

    def applicable(self, model: Any) -> bool:
        library = model_library(model)
        if library == "sklearn":
            return importlib.util.find_spec("skl2onnx") is not None
        if library in ("xgboost", "lightgbm"):
            return importlib.util.find_spec("onnxmltools") is not None
        return False

    def inapplicable_reason(self, model: Any) -> str:
        library = model_library(model)
        if library in TREE_LIBRARIES:
            converter = "skl2onnx" if library == "sklearn" else "onnxmltools"
            return f"converting {library} models needs {converter} (pip install {converter})"
        return super().inapplicable_reason(model)

    def versions(self) -> dict[str, str]:
        from peregrine.bench.peers import package_version

        out = super().versions()
        for p in ("skl2onnx", "onnxmltools", "onnx"):
            v = package_version(p)
            if v:
                out[p] = v
        return out

    def prepare(self, model: Any, n_features: int, *, threads: int | None = None) -> Predict:
        import onnxruntime as ort

        onx = self._convert(model, n_features)
        so = ort.SessionOptions()
        if threads:
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
        sess = ort.InferenceSession(onx.SerializeToString(), so, providers=["CPUExecutionProvider"])
        input_name = sess.get_inputs()[0].name
        outputs = [o.name for o in sess.get_outputs()]
        # classifiers emit (label, probabilities); regressors a single value output
        probs = [o for o in outputs if "prob" in o.lower()]
        wanted = probs[0] if probs and (is_classifier(model) or is_booster(model)) else outputs[0]

        def run(X: np.ndarray) -> np.ndarray:
            out = sess.run([wanted], {input_name: np.asarray(X, dtype=np.float32)})[0]
            return _rows_2d(out, X.shape[0])

        return run

    @staticmethod
    def _convert(model: Any, n_features: int) -> Any:
        library = model_library(model)
        if library == "sklearn":
            from skl2onnx import to_onnx

            final = model.steps[-1][1] if hasattr(model, "steps") else model
            # ZipMap turns probabilities into a list of dicts; off, they stay a tensor
            options = {id(final): {"zipmap": False}} if is_classifier(final) else None
            return to_onnx(model, np.zeros((1, n_features), dtype=np.float32), options=options)
        from onnxmltools import convert_lightgbm, convert_xgboost
        from onnxmltools.convert.common.data_types import FloatTensorType

        types = [("input", FloatTensorType([None, n_features]))]
        if library == "xgboost":
            return convert_xgboost(_xgboost_unnamed(model), initial_types=types)
        return convert_lightgbm(model, initial_types=types, zipmap=False)


@register_peer
class TL2cgenPeer(Peer):
    """Treelite model -> C source (TL2cgen) -> shared library built with the system's gcc."""

    name = "tl2cgen"
    packages = ("tl2cgen", "treelite")
    install_hint = "tl2cgen treelite"

    def available(self) -> bool:
        return super().available() and shutil.which("gcc") is not None

    def unavailable_reason(self) -> str:
        if super().available():
            return "no gcc on PATH (TL2cgen compiles C code)"
        return super().unavailable_reason()

    def applicable(self, model: Any) -> bool:
        return model_library(model) in TREE_LIBRARIES

    def prepare(self, model: Any, n_features: int, *, threads: int | None = None) -> Predict:
        import tl2cgen
        import treelite

        library = model_library(model)
        if library == "xgboost":
            tl_model = treelite.frontend.from_xgboost(_booster_of(model))
        elif library == "lightgbm":
            tl_model = treelite.frontend.from_lightgbm(_booster_of(model))
        else:
            tl_model = treelite.sklearn.import_model(model)
        holder = type("Holder", (), {})()  # owns the temp dir for as long as the predictor lives
        libpath = os.path.join(_temp_dir(holder, "peregrine-tl2cgen-"), "model.so")
        # parallel_comp splits the C source so gcc builds it on every core (big models)
        tl2cgen.export_lib(
            tl_model,
            toolchain="gcc",
            libpath=libpath,
            nthread=threads,
            params={"parallel_comp": threads or os.cpu_count() or 1},
        )
        predictor = tl2cgen.Predictor(libpath, nthread=threads)

        def run(X: np.ndarray, _keep: Any = holder) -> np.ndarray:
            out = predictor.predict(tl2cgen.DMatrix(np.asarray(X, dtype=np.float32)))
            return _rows_2d(out, X.shape[0])

        return run


@register_peer
class LleavesPeer(Peer):
    """lleaves: LightGBM text model -> LLVM IR -> machine code (LightGBM only)."""

    name = "lleaves"
    packages = ("lleaves",)
    install_hint = "lleaves"

    def applicable(self, model: Any) -> bool:
        return model_library(model) == "lightgbm"

    def prepare(self, model: Any, n_features: int, *, threads: int | None = None) -> Predict:
        import lleaves

        booster = _booster_of(model)
        holder = type("Holder", (), {})()
        path = os.path.join(_temp_dir(holder, "peregrine-lleaves-"), "model.txt")
        booster.save_model(path)
        compiled = lleaves.Model(model_file=path)
        compiled.compile()
        n_jobs = threads or os.cpu_count() or 1

        def run(X: np.ndarray, _keep: Any = holder) -> np.ndarray:
            # lleaves recommends one thread for single rows: its thread pool costs more there
            return compiled.predict(X, n_jobs=1 if X.shape[0] == 1 else n_jobs)

        return run


@register_peer
class HummingbirdPeer(Peer):
    """Hummingbird: the model as PyTorch tensor operations (GEMM / tree traversal)."""

    name = "hummingbird"
    packages = ("hummingbird", "torch")
    install_hint = "hummingbird-ml"

    def applicable(self, model: Any) -> bool:
        return model_library(model) in TREE_LIBRARIES

    def prepare(self, model: Any, n_features: int, *, threads: int | None = None) -> Predict:
        import torch
        from hummingbird.ml import convert

        if threads:
            torch.set_num_threads(threads)
        container = convert(model, "torch", np.zeros((1, n_features), dtype=np.float32))
        method = score_method(model)
        fn = getattr(container, method, None) or container.predict
        return lambda X: fn(np.asarray(X, dtype=np.float32))
