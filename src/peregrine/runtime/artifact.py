"""Artifact format: a zip holding ``manifest.json`` (structure, metadata, per-file SHA-256) and
``.npy`` arrays. Loading never unpickles (``allow_pickle=False``) and never executes code; a
missing, extra, altered or truncated member, or a different format version, is an ArtifactError.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from typing import Any

import numpy as np

from peregrine.errors import ArtifactError
from peregrine.ir import Comparison, Forest, Graph, Link, Node, Op, verify
from peregrine.ir.semantics.text import TextSpec
from peregrine.ir.spec import SPARSE_ABSENT, SPARSE_NAN, MethodSpec, ModelSpec
from peregrine.runtime.cat_hash import HASH_RULES

FORMAT = "peregrine-artifact"
FORMAT_VERSION = 1
MAX_MEMBER_BYTES = 4 << 30  # refuse absurd members before reading them (zip bombs)


class _Writer:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    def array(self, arr: np.ndarray) -> dict[str, str]:
        name = f"arrays/{len(self.files):05d}.npy"
        buf = io.BytesIO()
        arr = np.asarray(arr)
        if arr.dtype == object:
            arr = arr.astype(str)  # string labels; restored to object dtype on load
        np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
        self.files[name] = buf.getvalue()
        return {"__array__": name}

    def value(self, v: Any) -> Any:
        if isinstance(v, Forest):
            meta, arrays = v.to_state()
            return {"__forest__": meta, "arrays": {k: self.array(a) for k, a in arrays.items()}}
        if isinstance(v, Link):
            return {"__link__": v.value}
        if isinstance(v, np.ndarray):
            return self.array(v)
        if isinstance(v, np.generic):
            return v.item()
        if isinstance(v, (list, tuple)):
            return [self.value(x) for x in v]
        if isinstance(v, dict):
            return {"__dict__": [[k, self.value(x)] for k, x in v.items()]}
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        raise TypeError(f"cannot store attribute of type {type(v).__name__} in an artifact")


class _Reader:
    def __init__(self, zf: zipfile.ZipFile, hashes: dict[str, str]) -> None:
        self.zf = zf
        self.hashes = hashes

    def read(self, name: str) -> bytes:
        if name not in self.hashes:
            raise ArtifactError(f"artifact refers to {name!r}, which its manifest does not list")
        try:
            info = self.zf.getinfo(name)
        except KeyError:
            raise ArtifactError(f"artifact is missing member {name!r}") from None
        if info.file_size > MAX_MEMBER_BYTES:
            raise ArtifactError(f"artifact member {name!r} is implausibly large")
        try:
            data = self.zf.read(name)
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise ArtifactError(f"artifact member {name!r} is corrupt: {exc}") from exc
        if hashlib.sha256(data).hexdigest() != self.hashes[name]:
            raise ArtifactError(f"artifact member {name!r} does not match its hash (tampered?)")
        return data

    def array(self, ref: dict) -> np.ndarray:
        try:
            return np.load(io.BytesIO(self.read(ref["__array__"])), allow_pickle=False)
        except ValueError as exc:
            raise ArtifactError(f"artifact array {ref['__array__']!r} is invalid: {exc}") from exc

    def value(self, v: Any) -> Any:
        if isinstance(v, dict):
            if "__array__" in v:
                return self.array(v)
            if "__forest__" in v:
                arrays = {k: self.array(a) for k, a in v["arrays"].items()}
                try:
                    return Forest.from_state(v["__forest__"], arrays)
                except (KeyError, ValueError, TypeError) as exc:
                    raise ArtifactError(f"artifact holds an invalid forest: {exc}") from exc
            if "__link__" in v:
                return Link(v["__link__"])
            if "__dict__" in v:
                return {k: self.value(x) for k, x in v["__dict__"]}
            raise ArtifactError(f"artifact holds an unknown value tag {sorted(v)}")
        if isinstance(v, list):
            return [self.value(x) for x in v]
        return v


def save_artifact(path: Any, spec: ModelSpec, *, backend: str, device: str,
                  options: dict[str, Any], backend_state: dict[str, Any] | None,
                  versions: dict[str, str], validation: dict[str, Any] | None = None,
                  passes: list[dict[str, str]] | None = None) -> str:
    """Write the artifact; returns its content hash. ``validation``: the compile-time
    validation report (JSON-able), ``passes``: what each graph pass changed; each stored only
    when there is one (older readers ignore them)."""
    w = _Writer()
    graph = {
        "nodes": [
            {"name": n.name, "op": n.op.value, "inputs": list(n.inputs), "dtype": n.dtype,
             "width": n.width, "attrs": {k: w.value(a) for k, a in n.attrs.items()}}
            for n in spec.graph.nodes
        ],
        "outputs": dict(spec.graph.outputs),
    }
    methods = {}
    for name, m in spec.methods.items():
        labels = None
        if m.labels is not None:
            labels = {"array": w.array(m.labels), "object": m.labels.dtype == object}
        methods[name] = {"output": m.output, "squeeze": m.squeeze, "dtype": m.dtype,
                         "labels": labels}
        if m.sparse:  # written only when set: artifacts of dense methods read as before
            methods[name]["sparse"] = m.sparse
        if m.strings:
            methods[name]["strings"] = [list(t) for t in m.strings]
        if m.frame_columns:
            methods[name]["frame_columns"] = list(m.frame_columns)
    body = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "backend": backend,
        "device": device,
        "options": options,
        "backend_state": backend_state,
        "versions": versions,
        "spec": {
            "graph": graph,
            "methods": methods,
            "n_features": spec.n_features,
            "source": spec.source,
            "feature_names": list(spec.feature_names) if spec.feature_names else None,
            "allow_nan": spec.allow_nan,
            "allow_inf": spec.allow_inf,
            "category_maps": [[k, w.value(list(v))] for k, v in spec.category_maps.items()],
            "category_unknown_error": sorted(spec.category_unknown_error),
            "hash_columns": [[k, v] for k, v in sorted(spec.hash_columns.items())],
            "input_checks": [[m, c] for m, c in spec.input_checks],
            "int_input_dtype": spec.int_input_dtype,
            "sparse_absent": spec.sparse_absent,
            "sparse_nan": spec.sparse_nan,
            "finite_dtype": spec.finite_dtype,
            "versions": spec.versions,
            "text": None if spec.text is None else w.value(_text_state(spec.text)),
        },
    }
    if validation is not None:
        body["validation"] = validation
    if passes is not None:
        body["passes"] = passes
    hashes = {name: hashlib.sha256(data).hexdigest() for name, data in w.files.items()}
    body["files"] = hashes
    body_bytes = json.dumps(body, sort_keys=True).encode()
    content_hash = hashlib.sha256(body_bytes).hexdigest()
    manifest = json.dumps({"body": body, "content_hash": content_hash}, sort_keys=True).encode()
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(_member("manifest.json"), manifest)
        for name, data in w.files.items():
            zf.writestr(_member(name), data)
    return content_hash


def _member(name: str) -> zipfile.ZipInfo:
    """A zip entry with a fixed timestamp and mode: ``writestr(name, ...)`` stamps the current
    time, so the same model saved twice gave different bytes (and file hashes, and Dask/Spark
    cache keys). 1980-01-01 is the earliest date a zip can hold."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16  # -rw-r--r--, whatever the umask
    return info


def read_manifest(path: Any) -> tuple[dict[str, Any], str, zipfile.ZipFile]:
    try:
        zf = zipfile.ZipFile(path, "r")
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise ArtifactError(f"{path}: not a Peregrine artifact (bad zip: {exc})") from exc
    try:
        raw = zf.read("manifest.json")
        doc = json.loads(raw)
        body, content_hash = doc["body"], doc["content_hash"]
    except KeyError:
        raise ArtifactError(f"{path}: not a Peregrine artifact (no manifest)") from None
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, TypeError) as exc:
        raise ArtifactError(f"{path}: manifest is corrupt ({exc})") from exc
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise ArtifactError(f"{path}: not a Peregrine artifact")
    if hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest() != content_hash:
        raise ArtifactError(f"{path}: manifest does not match its content hash (tampered?)")
    if body.get("format_version") != FORMAT_VERSION:
        raise ArtifactError(
            f"{path}: artifact format version {body.get('format_version')} is not supported by "
            f"this Peregrine (reads version {FORMAT_VERSION}); recompile the model"
        )
    extra = set(zf.namelist()) - set(body["files"]) - {"manifest.json"}
    if extra:
        raise ArtifactError(f"{path}: artifact holds unlisted members {sorted(extra)[:3]}")
    return body, content_hash, zf


def load_artifact(path: Any) -> tuple[ModelSpec, dict[str, Any], str]:
    """Read and verify an artifact: (spec, manifest body, content hash)."""
    body, content_hash, zf = read_manifest(path)
    with zf:
        r = _Reader(zf, body["files"])
        for name in body["files"]:
            r.read(name)  # verify every member's hash up front, whether or not it is used
        try:
            spec = _spec_from_json(body["spec"], r)
        except ArtifactError:
            raise
        except (KeyError, ValueError, TypeError) as exc:
            raise ArtifactError(f"{path}: artifact structure is invalid ({exc})") from exc
    return spec, body, content_hash


def _spec_from_json(d: dict[str, Any], r: _Reader) -> ModelSpec:
    nodes = tuple(
        Node(n["name"], Op(n["op"]), tuple(n["inputs"]),
             {k: r.value(a) for k, a in n["attrs"].items()}, n["dtype"], n["width"])
        for n in d["graph"]["nodes"]
    )
    graph = Graph(nodes, dict(d["graph"]["outputs"]))
    verify(graph)
    methods = {}
    for name, m in d["methods"].items():
        labels = None
        if m["labels"] is not None:
            labels = r.array(m["labels"]["array"])
            if m["labels"]["object"]:
                labels = labels.astype(object)
        sparse = m.get("sparse", "")
        if sparse not in ("", "csr_matrix", "csc_matrix"):
            raise ArtifactError(f"method {name}: unknown sparse format {sparse!r}")
        strings = tuple((int(c), str(f), str(k)) for c, f, k in m.get("strings", ()))
        if any(k not in ("nan", "none") for _, _, k in strings):
            raise ArtifactError(f"method {name}: unknown missing-value kind in {strings!r}")
        frame_columns = m.get("frame_columns", ())
        if not all(isinstance(c, str) for c in frame_columns):
            raise ArtifactError(f"method {name}: frame column names must be strings")
        methods[name] = MethodSpec(m["output"], bool(m["squeeze"]), labels, m["dtype"],
                                   sparse, strings, tuple(frame_columns))
    return ModelSpec(
        graph=graph,
        methods=methods,
        n_features=int(d["n_features"]),
        source=str(d["source"]),
        feature_names=tuple(d["feature_names"]) if d["feature_names"] else None,
        allow_nan=bool(d["allow_nan"]),
        allow_inf=bool(d["allow_inf"]),
        category_maps={int(k): tuple(r.value(v)) for k, v in d["category_maps"]},
        # absent in artifacts written before these fields existed: nothing to check
        category_unknown_error=frozenset(int(k) for k in d.get("category_unknown_error", ())),
        input_checks=tuple((str(m), int(c)) for m, c in d.get("input_checks", ())),
        int_input_dtype=_int_dtype(d.get("int_input_dtype", "float64")),
        hash_columns={int(k): _hash_rule(v) for k, v in d.get("hash_columns", ())},
        versions=dict(d.get("versions", {})),
        sparse_absent=_sparse_rule(d.get("sparse_absent") or _old_sparse_rule(d, graph)),
        # artifacts written before the field: NaN stored in sparse input read as missing
        sparse_nan=_sparse_nan(d.get("sparse_nan", "missing")),
        finite_dtype=_finite_dtype(d.get("finite_dtype", "float64")),
        text=_text_from(d.get("text"), r),
    )


def _text_state(text: TextSpec) -> dict[str, Any]:
    meta, arrays = text.to_state()
    return {"meta": meta, "arrays": arrays}


def _text_from(d: Any, r: _Reader) -> TextSpec | None:
    """The text boundary of a saved text pipeline (None: not one)."""
    if d is None:
        return None
    state = r.value(d)
    return TextSpec.from_state(state["meta"], state["arrays"])


def _hash_rule(value: Any) -> str:
    if value not in HASH_RULES:
        raise ArtifactError(f"artifact's hashing rule {value!r} is not one of {HASH_RULES}")
    return str(value)


def _finite_dtype(value: Any) -> str:
    if value not in ("float32", "float64"):
        raise ArtifactError(f"artifact's finite_dtype {value!r} is not float32 or float64")
    return value


def _old_sparse_rule(d: dict[str, Any], graph: Graph) -> str:
    """The rule of an artifact written before ModelSpec.sparse_absent: XGBoost's own models
    read absent entries as missing; another model holding a forest that compares with ``<``
    (an XGBoost step in a pipeline, perhaps) refuses sparse input; the rest read 0."""
    if str(d["source"]).startswith("xgboost."):
        return "nan"
    strict = any(n.op is Op.TREE_ENSEMBLE and n.attrs.forest.comparison is Comparison.LT
                 for n in graph.nodes)
    return "refuse" if strict else "zero"


def _sparse_rule(value: Any) -> str:
    if value not in SPARSE_ABSENT:
        raise ArtifactError(f"artifact's sparse_absent {value!r} is not one of {SPARSE_ABSENT}")
    return str(value)


def _sparse_nan(value: Any) -> str:
    if value not in SPARSE_NAN:
        raise ArtifactError(f"artifact's sparse_nan {value!r} is not one of {SPARSE_NAN}")
    return str(value)


def _int_dtype(value: Any) -> str:
    if value not in ("float32", "float64"):
        raise ArtifactError(f"artifact's int_input_dtype {value!r} is not float32 or float64")
    return value
