"""Tree-ensemble scoring: Peregrine's native backend against the systems a user would pick instead.

Models (28 generated features, trained on 100K rows): XGBoost 500 trees depth 8, LightGBM 500
trees depth 8 / 256 leaves, RandomForest 100 trees depth 8. Each system scores ``predict_proba``
at batch 1 (a loop of single-row calls), 1K rows and 100K rows on ``--threads`` threads.
Systems: the library's own predict, ONNX Runtime (skl2onnx / onnxmltools), TL2cgen, lleaves,
Peregrine native and Peregrine torch; any that is not installed is skipped with a note.

    .venv/bin/python benchmarks/bench_trees.py --out docs/benchmarks.md

Each system runs in a process of its own. Times are the best of ``--repeat`` runs after one
warm-up, on float32 input (the machine may be shared: other processes only add time). Compile times are
measured cold: Peregrine's with an empty kernel cache; TL2cgen and lleaves artifacts are cached
under ``--cache`` across runs (lleaves needs many minutes for these models), so their compile
time is the one recorded when the cache was filled. This is a script, not a test.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


@dataclass
class Result:
    system: str
    compile_s: float | None = None
    times: dict[str, float] = field(default_factory=dict)  # batch label -> seconds per run
    max_diff: float | None = None
    load: float | None = None  # 1-minute load average when the system's timing started
    peak_mb: float | None = None  # resident memory a first 100K-row call adds at its peak
    note: str = ""


# ------------------------------------------------------------------------------- models --
def make_data(rows: int, seed: int = 0):
    from sklearn.datasets import make_classification

    X, y = make_classification(rows, 28, n_informative=18, random_state=seed)
    return X.astype(np.float32), y


def train(name: str, X, y, threads: int):
    if name == "xgboost":
        import xgboost as xgb

        return xgb.XGBClassifier(n_estimators=500, max_depth=8, tree_method="hist",
                                 n_jobs=threads, random_state=0).fit(X, y)
    if name == "lightgbm":
        import lightgbm as lgb

        # deterministic: the same trees every run, so cached TL2cgen / lleaves builds apply
        return lgb.LGBMClassifier(n_estimators=500, max_depth=8, num_leaves=256,
                                  n_jobs=threads, verbose=-1, random_state=0,
                                  deterministic=True, force_row_wise=True).fit(X, y)
    from sklearn.ensemble import RandomForestClassifier

    return RandomForestClassifier(100, max_depth=8, n_jobs=threads, random_state=0).fit(X, y)


N_TREES = {"xgboost": 500, "lightgbm": 500, "rf": 100}
TRAIN_ROWS = 100_000


# ------------------------------------------------------------------------------ systems --
def library(model, threads):
    """The library's predict_proba on ``threads`` threads, and on one for single rows: their
    thread pools cost far more than one row (XGBoost: ~14 ms per call on two threads)."""
    import copy

    single = copy.copy(model)  # n_jobs is a plain parameter on all three estimators
    single.set_params(n_jobs=1)
    model.set_params(n_jobs=threads)
    return lambda X: (single if len(X) == 1 else model).predict_proba(X)


def onnxruntime(model, threads):
    from peregrine.bench.builtin_peers import OnnxRuntimePeer

    peer = OnnxRuntimePeer()
    if not peer.available() or not peer.applicable(model):
        raise ImportError(peer.inapplicable_reason(model) if peer.available()
                          else peer.unavailable_reason())
    run = peer.prepare(model, 28, threads=threads)
    return lambda X: _proba(run(X), len(X))


def tl2cgen(model, threads, cache: Path):
    import tl2cgen

    key = _model_hash(model)
    lib = cache / f"tl2cgen-{key}.so"
    with _build_time(lib):
        if not lib.exists():
            tl = treelite_model(model)
            tmp = cache / f"tl2cgen-{key}.tmp.so"
            tl2cgen.export_lib(tl, toolchain="gcc", libpath=str(tmp), nthread=threads,
                               params={"parallel_comp": threads})
            os.replace(tmp, lib)
    predictor = tl2cgen.Predictor(str(lib), nthread=threads)
    single = tl2cgen.Predictor(str(lib), nthread=1)  # as for the libraries: no pool per row
    return lambda X: _proba((single if len(X) == 1 else predictor).predict(tl2cgen.DMatrix(X)),
                            len(X))


def onedal(model, threads):
    """oneDAL's gradient-boosting inference (scikit-learn-intelex's daal4py model builders),
    for XGBoost and LightGBM models."""
    import daal4py

    if type(model).__module__.split(".")[0] not in ("xgboost", "lightgbm"):
        raise ImportError("daal4py.mb.convert_model reads XGBoost/LightGBM/CatBoost models only")
    daal4py.daalinit(threads)
    converted = daal4py.mb.convert_model(model.get_booster() if hasattr(model, "get_booster")
                                         else model.booster_)
    return lambda X: _proba(converted.predict_proba(X), len(X))


def treelite_model(model):
    """The model in Treelite's format (what TL2cgen compiles and GTIL interprets)."""
    import treelite

    if type(model).__module__.startswith("xgboost"):
        return treelite.frontend.from_xgboost(model.get_booster())
    if type(model).__module__.startswith("lightgbm"):
        return treelite.frontend.from_lightgbm(model.booster_)
    return treelite.sklearn.import_model(model)


def gtil(model, threads):
    """Treelite's own interpreter (GTIL), the reference implementation of its model format."""
    import treelite

    tl = treelite_model(model)
    return lambda X: _proba(np.asarray(treelite.gtil.predict(tl, X, nthread=threads)).reshape(
        len(X), -1), len(X))


def lleaves(model, threads, cache: Path):
    """lleaves 1.3 calls llvmlite's legacy pass manager, gone in llvmlite 0.50: its two LLVM
    entry points are re-implemented here on the new pass manager, unchanged otherwise (same
    IR from lleaves' own code generator, O3, same target machine)."""
    import lleaves as ll
    import llvmlite.binding as llvm
    import llvmlite.ir
    from lleaves import compiler, llvm_binding
    from lleaves.compiler.ast import parse_to_ast
    from lleaves.compiler.codegen import gen_forest

    def compile_to_module(file_path, fblocksize=34, finline=True, raw_score=False,
                          froot_func_name="forest_root", use_fp64=True):
        forest = parse_to_ast(file_path)
        forest.raw_score = raw_score
        module_ir = llvmlite.ir.Module(name="forest")
        gen_forest(forest, module_ir, fblocksize, froot_func_name, use_fp64)
        module_ir.triple = llvm.get_process_triple()
        module = llvm.parse_assembly(str(module_ir))
        module.verify()
        tm = llvm_binding._get_target_machine()
        pto = llvm.create_pipeline_tuning_options(3)
        pto.inlining_threshold = 1
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(module, pb)
        return module

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    compiler.compile_to_module = compile_to_module
    llvm_binding._initialize_llvm = lambda: None  # llvmlite 0.50 initialises itself
    key = _model_hash(model)
    text = cache / f"lleaves-{key}.txt"
    model.booster_.save_model(str(text))
    compiled = ll.Model(model_file=str(text))
    obj = cache / f"lleaves-{key}.o"
    with _build_time(obj):
        compiled.compile(cache=str(obj))

    def run(X):
        p = compiled.predict(np.asarray(X, np.float64), n_jobs=1 if len(X) == 1 else threads)
        return np.stack([1 - p, p], axis=1)

    return run


def peregrine_backend(backend: str, device: str = "cpu"):
    def prepare(model, threads):
        import peregrine
        from peregrine.backends import available_backends

        if backend not in available_backends():
            raise ImportError(f"Peregrine backend {backend!r} is not available here")
        if device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise ImportError("no CUDA device here")
        options = peregrine.CompileOptions(n_threads=threads)
        # numpy rows in and out: a GPU's time includes the copies both ways, as a user sees it
        return peregrine.compile(model, backend, device=device, options=options).predict_proba

    return prepare


class _build_time:
    """Record how long building a cached artifact took (next to it), and report that time
    when the artifact is reused: the compile time is the cold one either way."""

    seconds: dict[str, float] = {}

    def __init__(self, artifact: Path) -> None:
        self.artifact, self.record = artifact, artifact.with_suffix(".seconds")

    def __enter__(self):
        self.fresh = not self.artifact.exists()
        self.start = time.perf_counter()

    def __exit__(self, *exc):
        if exc[0] is not None:
            return
        if self.fresh:
            self.record.write_text(f"{time.perf_counter() - self.start:.3f}")
        if self.record.exists():
            _build_time.seconds["last"] = float(self.record.read_text())


def _proba(out, n: int) -> np.ndarray:
    """(n, 2) class probabilities from a peer's (n,), (n, 1), (n, 2) or (n, 1, 2) output."""
    out = np.asarray(out).reshape(n, -1)
    if out.shape[1] == 1:
        return np.stack([1 - out[:, 0], out[:, 0]], axis=1)
    return out


def _model_hash(model) -> str:
    if type(model).__module__.startswith("xgboost"):
        raw = bytes(model.get_booster().save_raw("json"))
    elif type(model).__module__.startswith("lightgbm"):
        raw = model.booster_.model_to_string().encode()
    else:
        raw = repr(model.get_params()).encode() + b"%d" % len(model.estimators_)
    return hashlib.sha256(raw).hexdigest()[:16]


# ------------------------------------------------------------------------------- timing --
def _proc_kib(field_name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise OSError(f"{field_name} not in /proc/self/status")


def peak_call_mb(fn, X) -> float | None:
    """Resident memory one call adds at its peak, C/C++ allocations included (tracemalloc sees
    only Python's): reset the process's high-water mark (Linux: ``clear_refs`` 5), call, and
    subtract the resident size before the call. None where /proc does not offer that."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = _proc_kib("VmRSS")
        fn(X)
        return (_proc_kib("VmHWM") - before) / 1024
    except OSError:
        return None


def best_time(fn, X, repeat: int, budget_s: float = 20.0) -> float:
    """Fastest of ``repeat`` runs: on a shared machine, other processes only ever add time."""
    fn(X)
    times, start = [], time.perf_counter()
    for _ in range(repeat):
        t = time.perf_counter()
        fn(X)
        times.append(time.perf_counter() - t)
        if time.perf_counter() - start > budget_s:
            break
    return float(np.min(times))


def per_row_time(fn, X, rows: int, repeat: int) -> float:
    singles = [X[i:i + 1] for i in range(rows)]
    fn(singles[0])
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        for r in singles:
            fn(r)
        runs.append((time.perf_counter() - t) / rows)
    return float(np.min(runs))


SYSTEMS = ("library", "onnxruntime", "onedal", "tl2cgen", "treelite-gtil", "lleaves",
           "peregrine-native", "peregrine-torch", "peregrine-torch-cuda")


def prepare_system(label: str, model, threads: int, cache: Path):
    if label == "library":
        return library(model, threads)
    if label == "onnxruntime":
        return onnxruntime(model, threads)
    if label == "tl2cgen":
        return tl2cgen(model, threads, cache)
    if label == "onedal":
        return onedal(model, threads)
    if label == "treelite-gtil":
        return gtil(model, threads)
    if label == "lleaves":
        return lleaves(model, threads, cache)
    _, backend, *device = label.split("-")
    return peregrine_backend(backend, *device)(model, threads)


def bench_model(name, model, X, args, cache) -> list[Result]:
    """Every system in a process of its own (spawned, the model handed over by
    multiprocessing): thread pools that keep spinning after a call (OpenMP, ONNX Runtime)
    must not slow down the system measured after them."""
    import multiprocessing

    wanted = args.systems.split(",") if args.systems else list(SYSTEMS)
    want = library(model, args.threads)(X[:1000])
    ctx = multiprocessing.get_context("spawn")
    results = []
    for label in SYSTEMS:
        if (label not in wanted and label != "library") or (
                label == "lleaves" and name != "lightgbm"):
            continue
        # a plain (non-daemonic) process: scikit-learn's joblib refuses to start workers from
        # a pool's daemonic ones and would score with one thread
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(send, label, model, X, want, vars(args),
                                                str(cache)))
        proc.start()
        r = Result(**recv.recv())
        proc.join()
        results.append(r)
        if not r.times:
            print(f"  {label:18s} {r.note}", flush=True)
            continue
        print(f"  {label:18s} compile {r.compile_s:7.2f} s   batch1 {r.times['1'] * 1e6:9.1f} us"
              f"   1K {r.times['1K'] * 1e3:8.2f} ms   100K {r.times['100K'] * 1e3:9.1f} ms"
              f"   max|diff| {r.max_diff:.1e}", flush=True)
    return results


def _child(conn, *job) -> None:
    try:
        conn.send(measure_system(*job))
    except BaseException as exc:  # noqa: BLE001 - report any failure to the parent
        conn.send(vars(Result(job[0], note=f"failed: {type(exc).__name__}: {exc}"[:160])))
    finally:
        conn.close()


def measure_system(label, model, X, want, args: dict, cache: str) -> dict:
    kernels = tempfile.mkdtemp(prefix="peregrine-bench-")
    try:
        return _measure(label, model, X, want, argparse.Namespace(**args), cache, kernels)
    finally:
        shutil.rmtree(kernels, ignore_errors=True)


def _measure(label, model, X, want, args, cache: str, kernels: str) -> dict:
    r = Result(label)
    # a fresh process: an empty kernel cache makes Peregrine's compile time the cold one
    os.environ["PEREGRINE_CACHE_DIR"] = kernels
    try:
        if label.startswith("peregrine"):  # compile time, not Python's import time
            from peregrine.backends import available_backends

            available_backends()
        t = time.perf_counter()
        fn = prepare_system(label, model, args.threads, Path(cache))
        r.compile_s = _build_time.seconds.get("last", time.perf_counter() - t)
    except Exception as exc:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
        r.note = f"skipped: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        return vars(r)
    r.max_diff = float(np.max(np.abs(np.asarray(fn(X[:1000]), np.float64) - want)))
    r.load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    r.times["1"] = per_row_time(fn, X, args.single_rows, max(7, args.repeat))
    r.times["1K"] = best_time(fn, X[:1000], args.repeat * 4)
    if r.times["1K"] * args.rows / 1000 > args.max_seconds:
        r.note = f"large batch not timed (~{r.times['1K'] * args.rows / 1000:.0f} s a run)"
        r.times["100K"] = float("nan")
    else:
        # the first large call: buffers a system keeps between calls count once, here
        r.peak_mb = peak_call_mb(fn, X[: args.rows])
        r.times["100K"] = best_time(fn, X[: args.rows], args.repeat)
    return vars(r)  # a plain dict crosses the process boundary


# ------------------------------------------------------------------------------ reports --
def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("peregrine-ml", "numpy", "scikit-learn", "xgboost", "lightgbm", "onnxruntime",
                "skl2onnx", "onnxmltools", "tl2cgen", "treelite", "lleaves", "scikit-learn-intelex", "llvmlite", "torch"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    try:  # the CPU-only wheel installs under another distribution name
        out.setdefault("xgboost", version("xgboost-cpu"))
    except PackageNotFoundError:
        pass
    try:
        import llvmlite.binding as llvm

        out["LLVM"] = ".".join(map(str, llvm.llvm_version_info))
    except ImportError:
        pass
    return out


def machine() -> dict[str, Any]:
    from peregrine.bench.report import machine_info

    info = machine_info()
    try:
        import llvmlite.binding as llvm

        feats = llvm.get_host_cpu_features()
        simd = [f for f in ("avx512f", "avx2", "fma") if feats.get(f)]
        info["llvm_cpu"] = f"{llvm.get_host_cpu_name()} ({', '.join(simd)})"
    except (ImportError, RuntimeError):
        pass
    info["load_average"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    try:
        import torch

        if torch.cuda.is_available():
            info["gpu"] = f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda})"
    except ImportError:
        pass
    return info


def markdown(all_results: dict, args, meta: dict) -> str:
    lines = [f"Run: `{' '.join(sys.argv)}` on {time.strftime('%Y-%m-%d %H:%M')}", ""]
    m = meta["machine"]
    lines.append(f"Machine: {m.get('cpu')} ({m.get('usable_cores', m.get('cores'))} cores, "
                 f"{m.get('memory_gib')} GiB), LLVM host CPU {m.get('llvm_cpu', '?')}, "
                 f"load average {m.get('load_average', float('nan')):.1f} at the start. "
                 f"Threads: {args.threads}. Input: float32, {args.rows:,} rows x 28 features."
                 + (f" GPU: {m['gpu']} (`peregrine-torch-cuda`: numpy rows in and out, the "
                    "copies to and from the GPU included)." if m.get("gpu") else ""))
    lines.append("")
    lines.append("Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()))
    lines.append("")
    for name, results in all_results.items():
        trees = N_TREES[name]
        native = next((r for r in results if r.system == "peregrine-native" and r.times), None)
        lines += [f"### {TITLES[name]}", "",
                  "| system | compile s | batch 1 us/call | 1K rows ms | 100K rows ms "
                  "| ns/(row·tree) 100K | native speedup 100K | native speedup 1K "
                  "| native speedup batch 1 | peak MB 100K | max abs diff | load |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in results:
            if not r.times:
                lines.append(f"| {r.system} | {r.note} |" + " |" * 10)
                continue
            t = r.times
            ratio = {k: (t[k] / native.times[k]) if native else float("nan") for k in t}
            lines.append(
                f"| {r.system} | {r.compile_s:.2f} | {t['1'] * 1e6:.1f} | {t['1K'] * 1e3:.2f} "
                f"| {t['100K'] * 1e3:.1f} | {t['100K'] / args.rows / trees * 1e9:.2f} "
                f"| {ratio['100K']:.1f}x | {ratio['1K']:.1f}x | {ratio['1']:.1f}x "
                f"| {_mb(r.peak_mb)} | {r.max_diff:.1e} | {r.load:.1f} |" + (f" {r.note}" if r.note else ""))
        lines.append("")
    lines += ["### Targets", ""] + targets(all_results) + [""]
    return "\n".join(lines)


def _mb(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


TITLES = {"xgboost": "XGBoost, 500 trees, max_depth 8",
          "lightgbm": "LightGBM, 500 trees, max_depth 8, num_leaves 256",
          "rf": "RandomForest, 100 trees, max_depth 8"}


def targets(all_results: dict) -> list[str]:
    def get(model, system, key="100K"):
        for r in all_results.get(model, []):
            if r.system == system and r.times:
                return r.times[key] if key else r
        return None

    rows = []

    def check(text, value, goal, higher=True):
        if value is None:
            rows.append(f"- {text}: not measured")
            return
        ok = value >= goal if higher else value <= goal
        rows.append(f"- {text}: {value:.2f} (target {'>=' if higher else '<='} {goal}) "
                    f"**{'met' if ok else 'missed'}**")

    n = lambda m, k="100K": get(m, "peregrine-native", k)  # noqa: E731
    ratio = lambda m, s, k="100K": (get(m, s, k) / n(m, k)  # noqa: E731
                                    if get(m, s, k) and n(m, k) else None)
    check("XGBoost 100K: native speedup over xgboost", ratio("xgboost", "library"), 8)
    check("LightGBM 100K: native speedup over lightgbm", ratio("lightgbm", "library"), 10)
    check("LightGBM 100K: native speedup over lleaves", ratio("lightgbm", "lleaves"), 4)
    check("RandomForest 100K: native speedup over ONNX Runtime", ratio("rf", "onnxruntime"), 8)
    check("XGBoost 100K: native speedup over oneDAL", ratio("xgboost", "onedal"), 2.5)
    check("LightGBM 100K: native speedup over oneDAL", ratio("lightgbm", "onedal"), 2)
    b1 = n("xgboost", "1")
    check("XGBoost batch 1: native us per predict_proba call", b1 * 1e6 if b1 else None, 3,
          higher=False)
    for model in ("xgboost", "lightgbm", "rf"):  # the physical reference: ~0.6 ns at depth 8
        t = n(model)
        trees = {"xgboost": 500, "lightgbm": 500, "rf": 100}[model]
        if t:
            rows.append(f"- {model} 100K: native {t / 1e5 / trees * 1e9:.2f} ns per (row x tree) "
                        f"wall")
    for model, title in (("xgboost", "XGBoost"), ("lightgbm", "LightGBM"), ("rf", "RF")):
        lib, nat_r = get(model, "library", None), get(model, "peregrine-native", None)
        if lib and nat_r and lib.peak_mb is not None and nat_r.peak_mb is not None:
            check(f"{title} 100K: native peak MB minus the library's (first call)",
                  nat_r.peak_mb - lib.peak_mb, 0, higher=False)
    for model, title in (("xgboost", "XGBoost"), ("lightgbm", "LightGBM"), ("rf", "RF")):
        nat = get(model, "peregrine-native", None)  # issue #13: a cold compile within 1.5 s
        check(f"{title}: native compile seconds (cold kernel cache)",
              nat.compile_s if nat else None, 1.5, higher=False)
    return rows


def write_report(path: Path, text: str) -> None:
    old = path.read_text() if path.exists() else f"# Benchmarks\n\n{BEGIN}\n{END}\n"
    if BEGIN not in old:
        old += f"\n{BEGIN}\n{END}\n"
    head, rest = old.split(BEGIN, 1)
    tail = rest.split(END, 1)[1] if END in rest else ""
    path.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000, help="rows in the large batch")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--models", default="xgboost,lightgbm,rf")
    p.add_argument("--systems", default="", help="comma list (default: all installed)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--single-rows", type=int, default=500, help="rows in the batch-1 loop")
    p.add_argument("--max-seconds", type=float, default=60.0,
                   help="skip the large batch for a system expected to take longer a run")
    p.add_argument("--cache", default=str(Path.home() / ".cache" / "peregrine" / "bench"))
    p.add_argument("--out", default="", help="markdown file to update (e.g. docs/benchmarks.md)")
    p.add_argument("--json", default="", help="write raw results as JSON here")
    args = p.parse_args(argv)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    meta = {"machine": machine(), "versions": versions()}
    X, y = make_data(TRAIN_ROWS)  # the models stay the same whatever --rows times
    all_results = {}
    for name in args.models.split(","):
        t = time.perf_counter()
        model = train(name, X, y, args.threads)
        print(f"{TITLES[name]} (trained in {time.perf_counter() - t:.0f} s)", flush=True)
        all_results[name] = bench_model(name, model, X, args, cache)
    text = markdown(all_results, args, meta)
    print("\n" + text)
    if args.out:
        write_report(Path(args.out), text)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"meta": meta, "results": {k: [r.__dict__ for r in v]
                                       for k, v in all_results.items()}}, indent=1, default=str))


if __name__ == "__main__":
    main()
