"""``CompiledModel.export_library``: the compiled program as a shared library and a C header
(``backends/native/aot.py`` lowers and emits the kernels, ``aot_c.py`` writes the C runtime and
links), then, when the library runs on this machine, validated against the compiled model
through ctypes on generated rows. docs/export.md."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from peregrine.errors import UnsupportedModelError, ValidationError

RTOL, ATOL = 1e-5, 1e-6


@dataclass
class LibraryReport:
    """What ``export_library`` wrote."""

    path: str
    header: str
    target: str
    cpu: str
    functions: list[str]  # public symbols
    methods: dict[str, int]  # method -> values per row
    labels: tuple[str, ...] = ()
    rows: int = 0  # validation rows (0: not validated, e.g. a cross target)
    deviations: dict[str, dict[str, float]] = field(default_factory=dict)


def export_library(compiled: Any, path: str | os.PathLike, *, target: str = "x86_64-linux-gnu",
                   cpu: str | None = None, prefix: str = "peregrine",
                   methods: Any = None, header: str | os.PathLike | None = None,
                   cc: str | None = None, sample: Any = None,
                   validate: bool = True) -> LibraryReport:
    from peregrine._version import __version__
    from peregrine.backends.native import aot, aot_c

    if not isinstance(prefix, str) or not aot.PREFIX.match(prefix):
        raise UnsupportedModelError(f"prefix {prefix!r} is not a C identifier")
    t, where = aot.resolve_target(target, cpu)
    low = aot.lower(compiled.spec, compiled.options, t, where,
                    None if methods is None else list(methods))
    objects = aot.emit_objects(low, t, where)
    out = Path(os.fspath(path))
    head = out.with_suffix(".h") if header is None else Path(os.fspath(header))
    report = LibraryReport(str(out), str(head), t.name, where.cpu,
                           aot_c.public_names(low, prefix), dict(low.widths), low.labels)
    # built and validated beside the destination, then renamed: nothing is written unless
    # the library passed
    tmp_lib = out.with_name(f".{out.name}.tmp{os.getpid()}")
    tmp_head = head.with_name(f".{head.name}.tmp{os.getpid()}")
    try:
        aot_c.link(aot_c.source(low, prefix), objects, aot_c.version_script(low, prefix),
                   tmp_lib, cc or t.cc(), soname=out.name)
        if validate and t.native():
            report.rows, report.deviations = _validate(compiled, tmp_lib, low, prefix, sample)
        tmp_head.write_text(aot_c.header(low, prefix, __version__))
        os.replace(tmp_lib, out)
        os.replace(tmp_head, head)
    finally:
        for leftover in (tmp_lib, tmp_head):
            leftover.unlink(missing_ok=True)
    return report


def open_library(path: str | os.PathLike, prefix: str = "peregrine") -> Any:
    """The library loaded with ctypes (its functions typed): for validation and tests."""
    lib = ctypes.CDLL(os.path.abspath(os.fspath(path)))
    # attribute access: ctypes caches those function objects (lib[name] makes a new one)
    for name, restype, argtypes in (("n_features", ctypes.c_size_t, []),
                                    ("n_outputs", ctypes.c_size_t, [ctypes.c_char_p]),
                                    ("n_classes", ctypes.c_size_t, []),
                                    ("class_label", ctypes.c_char_p, [ctypes.c_size_t])):
        fn = getattr(lib, f"{prefix}_{name}")
        fn.restype, fn.argtypes = restype, argtypes
    return lib


def call_library(lib: Any, prefix: str, method: str, X: np.ndarray) -> tuple[int, np.ndarray]:
    """(return code, (rows, n_outputs) float64 result) of ``method`` on X (float32 -> the
    float form, float64 -> the _f64 form)."""
    X = np.ascontiguousarray(X)
    suffix = "" if X.dtype == np.float32 else "_f64"
    width = getattr(lib, f"{prefix}_n_outputs")(method.encode())
    out = np.full((X.shape[0], width), np.nan)
    fn = getattr(lib, f"{prefix}_{method}{suffix}")
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    rc = fn(X.ctypes.data, X.shape[0], out.ctypes.data)
    return rc, out


def _validate(compiled: Any, path: Path, low: Any, prefix: str, sample: Any
              ) -> tuple[int, dict[str, dict[str, float]]]:
    """Every entry point against the compiled model on the same rows (float32 rows for the
    float form): labels equal, values within rtol 1e-5 / atol 1e-6."""
    from peregrine.export.onnx import validation_rows

    X = validation_rows(compiled) if sample is None else np.asarray(sample, np.float64)
    X = X.reshape(-1, compiled.spec.n_features)
    lib = open_library(path, prefix)
    report: dict[str, dict[str, float]] = {}
    for m in low.widths:
        worst = 0.0
        for dt in (np.float32, np.float64):
            rows = X.astype(dt)
            rc, got = call_library(lib, prefix, m, rows)
            if rc != 0:
                raise ValidationError(f"shared library of {compiled.spec.source}: {m} "
                                      f"returned {rc} on the validation rows", method=m)
            want = np.asarray(getattr(compiled, m)(rows))
            method = compiled.spec.methods[m]
            if method.labels is not None:
                idx = {v: i for i, v in enumerate(np.asarray(method.labels).tolist())}
                want = np.array([idx[v] for v in want.tolist()], np.float64)
            want = want.astype(np.float64).reshape(got.shape)
            bad = ~np.isclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True)
            if method.labels is not None:
                bad = got != want
            if bad.any():
                r = int(np.argwhere(bad)[0][0])
                raise ValidationError(
                    f"shared library of {compiled.spec.source}: {m} ({np.dtype(dt).name} "
                    f"rows) differs from the compiled model on {int(bad.sum())} value(s), "
                    f"first at row {r}: library {got[r]!r}, compiled {want[r]!r}",
                    method=m, row=r, rtol=RTOL, atol=ATOL)
            ok = np.isfinite(want)
            if ok.any():
                worst = max(worst, float(np.max(np.abs(got[ok] - want[ok]))))
        report[m] = {"max_abs": worst}
    return len(X), report
