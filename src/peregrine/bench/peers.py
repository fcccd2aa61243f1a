"""The systems a benchmark times: the source library's own predict, Peregrine's backends, and the
peers a user would pick instead (ONNX Runtime, TL2cgen, lleaves, Hummingbird).

A peer is a small class: ``available()`` (its packages import here), ``applicable(model)`` (it can
run this kind of model) and ``prepare(model, n_features) -> fn`` where ``fn(X)`` returns the same
quantity as the source library's scoring method (``score_method``): probabilities for
classifiers, predictions otherwise. Adding a peer is one class with ``@register_peer``::

    @register_peer
    class MyPeer(Peer):
        name = "mypeer"
        packages = ("mypeer",)

        def applicable(self, model):
            return model_library(model) == "lightgbm"

        def prepare(self, model, n_features, *, threads=None):
            compiled = mypeer.compile(model)
            return compiled.predict

Peregrine's own backends are not registered here: ``peregrine_peers()`` makes one per entry of
``peregrine.backends.available_backends()``, so a new backend shows up with no change here.
"""

from __future__ import annotations

import copy
import functools
import importlib
import importlib.metadata
import importlib.util
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

Predict = Callable[[np.ndarray], Any]

# distribution names for the import names peers need (for the report's version table)
DISTRIBUTIONS = {
    "sklearn": "scikit-learn",
    "hummingbird": "hummingbird-ml",
    "peregrine": "peregrine-ml",
}


def package_version(module: str) -> str | None:
    """Installed version of the package providing import name ``module`` (None if absent).
    Distribution names differ from import names (sklearn: scikit-learn; xgboost may come as
    xgboost-cpu), so the lookup goes through importlib.metadata's own mapping."""
    if importlib.util.find_spec(module) is None:
        return None
    names = [DISTRIBUTIONS.get(module, module), *_distributions().get(module, ())]
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


# ------------------------------------------------------------------------ model helpers --


def model_library(model: Any) -> str:
    """'sklearn', 'xgboost', 'lightgbm', ... : the top-level package of the model's class."""
    return type(model).__module__.split(".")[0]


def is_booster(model: Any) -> bool:
    """The libraries' low-level Booster objects (what model files load as), not sklearn wrappers."""
    return type(model).__name__ == "Booster" and model_library(model) in ("xgboost", "lightgbm")


def is_classifier(model: Any) -> bool:
    return hasattr(model, "predict_proba")


def score_method(model: Any) -> str:
    """The method every system is timed and checked on: predict_proba where the model has it
    (the scores users ship), predict otherwise (Boosters' predict already applies the link)."""
    return "predict_proba" if is_classifier(model) else "predict"


def model_n_features(model: Any) -> int:
    for attr in ("n_features_in_", "n_features_"):
        n = getattr(model, attr, None)
        # a CatBoost model read with load_model() says 0 here: ask its frontend below
        if isinstance(n, (int, np.integer)) and n > 0:
            return int(n)
    if is_booster(model):
        if model_library(model) == "xgboost":
            return int(model.num_features())
        return int(model.num_feature())
    try:  # a model only Peregrine reads (a saved Spark ML pipeline): its input contract
        from peregrine.frontends import convert

        return int(convert(model).n_features)
    except Exception:  # noqa: BLE001 - no frontend takes it either
        pass
    raise ValueError(f"cannot tell how many features {type(model).__name__} reads")


def model_feature_names(model: Any) -> tuple[str, ...] | None:
    names = getattr(model, "feature_names_in_", None)
    if names is None and is_booster(model):
        names = model.feature_names if model_library(model) == "xgboost" else model.feature_name()
    return None if names is None else tuple(str(n) for n in names)


def describe_model(model: Any) -> str:
    return f"{model_library(model)}.{type(model).__name__}"


# ------------------------------------------------------------------------------- peers --


class Peer:
    """One system to benchmark. Subclasses set ``name`` and ``packages`` and implement
    ``applicable`` and ``prepare``; ``prepare`` does all conversion/compilation (it is timed as
    compile time) and returns a function of a 2-D float array."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = "peer"  # "source" | "peregrine" | "peer"
    packages: ClassVar[tuple[str, ...]] = ()  # import names; all must be installed
    install_hint: ClassVar[str] = ""

    @property
    def label(self) -> str:
        return self.name

    def available(self) -> bool:
        return all(importlib.util.find_spec(p) is not None for p in self.packages)

    def unavailable_reason(self) -> str:
        missing = [p for p in self.packages if importlib.util.find_spec(p) is None]
        hint = f" (pip install {self.install_hint})" if self.install_hint else ""
        return f"not installed: {', '.join(missing)}{hint}"

    def applicable(self, model: Any) -> bool:
        return True

    def inapplicable_reason(self, model: Any) -> str:
        return f"does not handle {describe_model(model)}"

    def prepare(self, model: Any, n_features: int, *, threads: int | None = None) -> Predict:
        raise NotImplementedError

    def versions(self) -> dict[str, str]:
        out = {}
        for p in self.packages:
            v = package_version(p)
            if v is not None:
                out[DISTRIBUTIONS.get(p, p)] = v
        return out


PEERS: dict[str, type[Peer]] = {}


def register_peer(cls: type[Peer]) -> type[Peer]:
    if not cls.name:
        raise ValueError(f"{cls.__name__} must set a name")
    if cls.name in PEERS:
        raise RuntimeError(f"peer {cls.name!r} registered twice")
    PEERS[cls.name] = cls
    return cls


class SourcePeer(Peer):
    """The library's own scoring: always run, and the reference every other output is checked
    against. Thread count is set on a shallow copy so the caller's model is left alone."""

    name = "source"
    kind = "source"

    def __init__(self, model: Any = None) -> None:
        self._library = model_library(model) if model is not None else "source"

    @property
    def label(self) -> str:
        return f"{self._library} (own predict)"

    def versions(self) -> dict[str, str]:
        v = package_version(self._library)
        return {DISTRIBUTIONS.get(self._library, self._library): v} if v else {}

    def prepare(self, model: Any, n_features: int, *, threads: int | None = None) -> Predict:
        library = model_library(model)
        if library == "onnx":  # an ONNX file's own scorer is ONNX Runtime on that very file
            return _onnx_file_predict(model, threads)
        if is_booster(model) and library == "xgboost":
            booster = model.copy()
            if threads:
                booster.set_param({"nthread": threads})
            # inplace_predict: XGBoost's fast path for in-memory arrays (no DMatrix build)
            return lambda X: booster.inplace_predict(X, validate_features=False)
        if is_booster(model):  # lightgbm.Booster
            kwargs = {"num_threads": threads} if threads else {}
            return lambda X: model.predict(X, **kwargs)
        if threads and hasattr(model, "get_params") and "n_jobs" in model.get_params(deep=False):
            model = copy.copy(model)
            model.set_params(n_jobs=threads)
        return getattr(model, score_method(model))


def _onnx_file_predict(model: Any, threads: int | None) -> Predict:
    """The file's first output (a classifier's labels, a regressor's values: what ``predict``
    of the compiled model returns) in ONNX Runtime, fed in the dtype the graph declares."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    if threads:
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    first = sess.get_inputs()[0]
    dtype = np.float64 if first.type == "tensor(double)" else np.float32
    output = sess.get_outputs()[0].name

    def run(X: np.ndarray) -> np.ndarray:
        return sess.run([output], {first.name: np.asarray(X, dtype=dtype)})[0]

    return run


class PeregrinePeer(Peer):
    """One Peregrine backend. ``prepare`` is ``peregrine.compile``; the model must have a
    frontend, and the compiled method is the source's ``score_method``."""

    kind = "peregrine"
    packages = ()

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.name = f"peregrine-{backend}"  # instance attribute: one peer per backend

    @property
    def label(self) -> str:
        return f"peregrine[{self.backend}]"

    def versions(self) -> dict[str, str]:
        from peregrine import __version__

        return {"peregrine-ml": __version__}

    def applicable(self, model: Any) -> bool:
        from peregrine.frontends import FRONTENDS, load_all

        load_all()
        return FRONTENDS.lookup(type(model)) is not None

    def unsupported_reason(self, model: Any) -> str:
        return f"Peregrine has no frontend for {describe_model(model)} in this installation"

    def prepare(self, model: Any, n_features: int, *, threads: int | None = None) -> Predict:
        import peregrine
        from peregrine.options import CompileOptions

        compiled = peregrine.compile(
            model, backend=self.backend, options=CompileOptions(n_threads=threads)
        )
        method = score_method(model)
        if method not in compiled.methods:  # e.g. a Booster: only predict
            method = "predict"
        return getattr(compiled, method)


def peregrine_peers(notes: list[str] | None = None) -> list[PeregrinePeer]:
    """One peer per backend available on this machine, discovered, never listed by hand.

    A backend whose module is broken (mid-development, or a bad install) must not take the
    whole benchmark down: then each registered backend is probed on its own and the broken
    one is left out with a note."""
    import peregrine.backends as backends

    try:
        return [PeregrinePeer(b) for b in backends.available_backends()]
    except Exception:  # noqa: BLE001 - fall through to probing one by one
        pass
    out = []
    for name in (key for key, *_ in getattr(backends, "_MODULES", ())):
        try:
            backends.get_backend(name)
        except Exception as exc:  # noqa: BLE001
            from peregrine.errors import UnsupportedModelError

            if not isinstance(exc, UnsupportedModelError) and notes is not None:
                notes.append(
                    f"peregrine[{name}]: skipped, backend failed to load: "
                    f"{type(exc).__name__}: {exc}"
                )
            continue
        out.append(PeregrinePeer(name))
    return out


def registered_peers() -> dict[str, type[Peer]]:
    """The registry, with the built-in peers loaded (explicitly, not by import side effect
    order)."""
    importlib.import_module("peregrine.bench.builtin_peers")
    return PEERS


def select_systems(model: Any, peers: str | list[str] = "auto") -> tuple[list[Peer], list[str]]:
    """The systems to run for ``model`` and a note for every one left out.

    ``peers`` is ``"auto"`` (every installed, applicable peer and every available Peregrine
    backend) or a list of names: peer names, and Peregrine backend names (``native``,
    ``peregrine-native``). If the list names no Peregrine backend, all available ones are
    added: they are what is being benchmarked. The source library always runs first.
    """
    registry = registered_peers()
    notes: list[str] = []
    wanted_peers: list[str]
    if peers == "auto" or peers == ["auto"]:
        wanted_peers, backends = list(registry), peregrine_peers(notes)
    else:
        names = [peers] if isinstance(peers, str) else list(peers)
        wanted_peers, backends = [], []
        for raw in names:
            name = raw.strip().lower()
            backend = name.removeprefix("peregrine-").removeprefix("peregrine:")
            if name in ("source", "own", "library"):
                continue  # always included
            if name in registry:
                wanted_peers.append(name)
                continue
            # Named backends are checked one by one: importing every backend (torch...) just
            # to run the ones asked for would be slow.
            reason = _backend_unavailable(backend)
            if reason is None:
                backends.append(PeregrinePeer(backend))
            elif name.startswith("peregrine") or not reason.startswith("unknown backend"):
                notes.append(f"{raw}: skipped, {reason}")
            else:
                notes.append(
                    f"{raw}: skipped, unknown peer (peers: {', '.join(registry)}; "
                    "or a Peregrine backend, see 'peregrine backends')"
                )
        if not backends:
            backends = peregrine_peers(notes)
    systems: list[Peer] = [SourcePeer(model)]
    for peer in backends:
        if peer.applicable(model):
            systems.append(peer)
        else:
            notes.append(f"{peer.label}: skipped, {peer.unsupported_reason(model)}")
    for name in wanted_peers:
        peer = registry[name]()
        if not peer.available():
            notes.append(f"{name}: skipped, {peer.unavailable_reason()}")
        elif not peer.applicable(model):
            notes.append(f"{name}: skipped, {peer.inapplicable_reason(model)}")
        else:
            systems.append(peer)
    return systems, notes


def _backend_unavailable(name: str) -> str | None:
    """None when Peregrine backend ``name`` can run here, else the registry's reason."""
    from peregrine.backends import get_backend
    from peregrine.errors import UnsupportedModelError

    try:
        get_backend(name)
    except UnsupportedModelError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - a broken backend module is a note, not a crash
        return f"backend failed to load: {type(exc).__name__}: {exc}"
    return None
