"""The C side of an ahead-of-time library (aot.py): the runtime wrapping the kernels into one
public function per method and input dtype, the header, the symbol list, and the link.

The runtime does no floating-point arithmetic of its own: it calls the kernels block by block,
has the result copied out by a store function emitted in IR beside them (rounding to float32
where the method returns float32, as NumPy's astype does; see ``aot.STORES`` for why not in C)
and checks the input for NaN/infinity where the source rejects them. It is compiled as ISO C11
with ``-ffp-contract=off``, so no compiler fuses anything.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from peregrine.backends.native.aot import (
    Buffer,
    ForestCall,
    Lowered,
    MethodProgram,
    store_symbol,
)
from peregrine.backends.native.codegen import ARGS, DESC
from peregrine.errors import UnsupportedModelError

BLOCK_ROWS = 2048  # rows per block: the intermediate values of a block stay in cache
CTYPES = {"float32": "float", "float64": "double", "int64": "int64_t"}
ITEMSIZE = {"float32": 4, "float64": 8, "int64": 8}
SUFFIX = {"float32": "", "float64": "_f64"}
# what the forest kernel's argument words hold (codegen.ARGS), as C expressions of pg_forest's
# parameters
FOREST_ARGS = {"X": "(int64_t)(intptr_t)x", "stride": "stride", "rb": "0", "re": "rows",
               "tb": "0", "te": "n_trees", "desc": "(int64_t)(intptr_t)desc",
               "out": "(int64_t)(intptr_t)out", "fin": "1", "out_stride": "out_stride",
               "epilogue": "(int64_t)(intptr_t)program"}
ERRORS = (("OK", 0, "success"),
          ("ERR_ARGUMENT", 1, "X or out is NULL"),
          ("ERR_NONFINITE", 2, "the input holds a NaN or an infinity the source model rejects"),
          ("ERR_MEMORY", 3, "scratch memory could not be allocated"))


def public_names(low: Lowered, prefix: str) -> list[str]:
    names = [f"{prefix}_{p.method}{SUFFIX[p.x_dtype]}" for p in low.programs]
    return names + [f"{prefix}_{n}" for n in ("n_features", "n_outputs", "n_classes",
                                              "class_label")]


def header(low: Lowered, prefix: str, version: str) -> str:
    guard = f"{prefix.upper()}_H"
    P = prefix.upper()
    lines = [f"/* {prefix}.h: {low.source} compiled by Peregrine {version} for {low.target} "
             f"(CPU {low.cpu}).",
             " *",
             f" * X holds rows x {low.n_features} values, row-major. Each function writes rows x",
             f" * {prefix}_n_outputs(method) values to out and returns {P}_OK (0) or an error.",
             " * The float form computes what the model computes on float32 rows, the _f64",
             " * form on float64 rows (LightGBM, HistGradientBoosting compare in float64).",
             " * Calls run on the calling thread and share no state: threads may call at once.",
             *([" *", " * Columns:"] + [f" *   {_comment(c)}" for c in low.columns]
               if low.columns else []),
             " */",
             f"#ifndef {guard}", f"#define {guard}", "", "#include <stddef.h>", "",
             "#ifdef __cplusplus", 'extern "C" {', "#endif", ""]
    for name, value, what in ERRORS:
        lines.append(f"#define {P}_{name} {value}  /* {what} */")
    lines.append("")
    for p in low.programs:
        ctype = "float" if p.x_dtype == "float32" else "double"
        if p.x_dtype == "float32":
            lines.append(f"/* {p.method}: {_describe(low, p.method)} */")
        lines.append(f"int {prefix}_{p.method}{SUFFIX[p.x_dtype]}(const {ctype} *X, "
                     "size_t rows, double *out);")
    lines += ["", f"size_t {prefix}_n_features(void);",
              "/* values per row the method writes (0: no such method) */",
              f"size_t {prefix}_n_outputs(const char *method);",
              "/* classes of a classifier (0 otherwise); predict writes class indices */",
              f"size_t {prefix}_n_classes(void);",
              "/* the label of class index i as text (NULL past the last class) */",
              f"const char *{prefix}_class_label(size_t i);",
              "", "#ifdef __cplusplus", "}", "#endif", "", f"#endif  /* {guard} */", ""]
    return "\n".join(lines)


def _comment(text: str) -> str:
    """Text safe inside a C block comment, on one line."""
    return text.replace("*/", "* /").replace("\n", " ")


def _describe(low: Lowered, method: str) -> str:
    width = low.widths[method]
    if method == "predict" and low.labels:
        return "class indices, one per row (class_label names them)"
    return f"{width} value{'s' if width != 1 else ''} per row"


def version_script(low: Lowered, prefix: str) -> str:
    names = "".join(f" {n};" for n in public_names(low, prefix))
    return f"{{ global:{names} local: *; }};\n"


def source(low: Lowered, prefix: str) -> str:
    """The runtime in C for the lowered program."""
    P = prefix.upper()
    out = [f"/* Runtime of {low.source} for {low.target} (CPU {low.cpu}), generated by "
           "Peregrine. */",
           "#include <math.h>", "#include <stddef.h>", "#include <stdint.h>",
           "#include <stdlib.h>", "#include <string.h>", "",
           '#define PG_HIDDEN __attribute__((visibility("hidden")))',
           '#define PG_PUBLIC __attribute__((visibility("default")))',
           f"#define PG_BLOCK {BLOCK_ROWS}",
           f"#define PG_N_FEATURES {low.n_features}"]
    out += [f"#define {P}_{name} {value}" for name, value, _ in ERRORS]
    out += ["", "typedef void (*pg_forest_fn)(const int64_t *args);", ""]
    for symbol in sorted(low.kernels):
        if symbol.startswith("peregrine_forest_"):
            out.append(f"PG_HIDDEN void {symbol}(const int64_t *args);")
        else:
            out.append(f"PG_HIDDEN void {symbol}(const void *x, int64_t rb, int64_t re, "
                       "const double *params, void *const *outs, double *flag);")
    out += [f"PG_HIDDEN extern const unsigned char {name}[];" for name in sorted(low.data)]
    for dtype, round32 in sorted({(p.result.dtype, p.round32) for p in low.programs}):
        out.append(f"PG_HIDDEN void {store_symbol(dtype, round32)}(const void *v, int64_t stride, "
                   "int64_t width, int64_t rows, double *out);")
    out += ["", *_forest_helper(), *_check_helpers()]
    descs: dict[tuple, str] = {}
    programs: dict[tuple, str] = {}
    for p in low.programs:
        for call in p.calls:
            if isinstance(call, ForestCall):
                for k in (call.batch, call.few):
                    if k is not None and k.desc not in descs:
                        descs[k.desc] = f"pg_desc_{len(descs)}"
                        out += _desc_function(descs[k.desc], k.desc)
                if call.program not in programs:
                    programs[call.program] = f"pg_epilogue_{len(programs)}"
                    values = ", ".join(float(v).hex() for v in call.program)
                    out.append(f"static const double {programs[call.program]}[] = "
                               f"{{{values}}};")
    out.append("")
    for p in low.programs:
        out += _method(low, p, prefix, descs, programs)
    out += _queries(low, prefix)
    return "\n".join(out) + "\n"


def _forest_helper() -> list[str]:
    unknown = [a for a in ARGS if a not in FOREST_ARGS]
    if unknown:  # the kernel's interface changed: say so rather than pass garbage
        raise UnsupportedModelError(f"AOT runtime does not know forest kernel arguments "
                                    f"{unknown}")
    body = [f"    a[{i}] = {FOREST_ARGS[name]};  /* {name} */" for i, name in enumerate(ARGS)]
    return ["/* one forest kernel call over rows [0, rows) of x: every tree, finalized */",
            "static void pg_forest(pg_forest_fn fn, const int64_t *desc, const void *x,",
            "                      int64_t stride, int64_t rows, int64_t n_trees, double *out,",
            "                      int64_t out_stride, const double *program) {",
            f"    int64_t a[{len(ARGS)}];", *body, "    fn(a);", "}", ""]


def _check_helpers() -> list[str]:
    out = []
    for dt in ("float32", "float64"):
        out += [f"static int pg_rejects_{dt}(const {CTYPES[dt]} *X, size_t n, int nan, "
                "int inf) {",
                "    for (size_t i = 0; i < n; i++)",
                "        if ((nan && isnan(X[i])) || (inf && isinf(X[i]))) return 1;",
                "    return 0;", "}", ""]
    return out


def _desc_function(name: str, desc: tuple) -> list[str]:
    if [slot for slot, _ in desc] != list(DESC):
        raise UnsupportedModelError("AOT descriptor does not match the forest kernel's")
    lines = [f"static void {name}(int64_t *d) {{"]
    for i, (slot, (kind, value)) in enumerate(desc):
        expr = f"(int64_t)(intptr_t){value}" if kind == "data" else f"{int(value)}"
        lines.append(f"    d[{i}] = {expr};  /* {slot} */")
    return lines + ["}", ""]


def _method(low: Lowered, p: MethodProgram, prefix: str, descs: dict, programs: dict
            ) -> list[str]:
    P = prefix.upper()
    ctype = CTYPES[p.x_dtype]
    buffers: dict[str, Buffer] = {}
    for call in p.calls:
        for b in (call.dst,) if isinstance(call, ForestCall) else call.dsts:
            buffers[b.name] = b
    offsets, row_bytes = {}, 0
    for name, b in buffers.items():
        offsets[name] = row_bytes
        row_bytes += -(-b.stride * ITEMSIZE[b.dtype] // 8) * 8
    check = [f"    if (pg_rejects_{p.x_dtype}(X, rows * PG_N_FEATURES, {int(low.check_nan)}, "
             f"{int(low.check_inf)})) return {P}_ERR_NONFINITE;"] if (
        low.check_nan or low.check_inf) else []
    lines = [f"PG_PUBLIC int {prefix}_{p.method}{SUFFIX[p.x_dtype]}(const {ctype} *X, "
             "size_t rows, double *out) {",
             f"    if (rows == 0) return {P}_OK;",
             f"    if (X == NULL || out == NULL) return {P}_ERR_ARGUMENT;", *check,
             "    const size_t block = rows < PG_BLOCK ? rows : PG_BLOCK;",
             f"    unsigned char *scratch = malloc(block * {max(row_bytes, 8)});",
             f"    if (scratch == NULL) return {P}_ERR_MEMORY;"]
    local: dict[tuple, str] = {}  # descriptor -> the local array holding it
    for call in p.calls:
        if isinstance(call, ForestCall):
            for k in (call.batch, call.few):
                if k is not None and k.desc not in local:
                    local[k.desc] = f"desc{len(local)}"
                    lines += [f"    int64_t {local[k.desc]}[{len(DESC)}];",
                              f"    {descs[k.desc]}({local[k.desc]});"]
    lines += ["    for (size_t r0 = 0; r0 < rows; r0 += block) {",
              "        const int64_t n = (int64_t)(rows - r0 < block ? rows - r0 : block);",
              f"        const {ctype} *x = X + r0 * PG_N_FEATURES;"]
    for name, b in buffers.items():
        lines.append(f"        {CTYPES[b.dtype]} *{name} = ({CTYPES[b.dtype]} *)"
                     f"(scratch + {offsets[name]} * block);")
    for call in p.calls:
        src = "x" if call.src.name == "X" else call.src.name
        if isinstance(call, ForestCall):
            def forest(k, indent, call=call, src=src):
                return (f"{indent}pg_forest({k.symbol}, {local[k.desc]}, {src}, "
                        f"{call.src.stride}, n, {call.n_trees}, {call.dst.name}, "
                        f"{call.dst.stride}, {programs[call.program]});")

            if call.few is None:
                lines.append(forest(call.batch, " " * 8))
            else:  # a few rows: trees in the lanes (latency), as the process does
                lines += [f"        if (n <= {call.few_rows})", forest(call.few, " " * 12),
                          "        else", forest(call.batch, " " * 12)]
        else:
            outs = ", ".join(b.name for b in call.dsts)
            lines += ["        {",
                      f"            void *outs[] = {{{outs}}};",
                      "            double flag;",
                      f"            {call.kernel}({src}, 0, n, (const double *){call.params}, "
                      "outs, &flag);",
                      "        }"]
    r = p.result
    width = low.widths[p.method]
    if r.width != width:
        raise UnsupportedModelError(f"{low.source}.{p.method}: {r.width} columns computed, "
                                    f"{width} returned")
    lines += [f"        {store_symbol(r.dtype, p.round32)}({r.name}, {r.stride}, {width}, n, "
              f"out + r0 * {width});",
              "    }", "    free(scratch);", f"    return {P}_OK;", "}", ""]
    return lines


def _queries(low: Lowered, prefix: str) -> list[str]:
    lines = [f"PG_PUBLIC size_t {prefix}_n_features(void) {{ return PG_N_FEATURES; }}", "",
             f"PG_PUBLIC size_t {prefix}_n_outputs(const char *method) {{",
             "    if (method == NULL) return 0;"]
    for m, w in low.widths.items():
        lines.append(f'    if (strcmp(method, "{m}") == 0) return {w};')
    lines += ["    return 0;", "}", ""]
    labels = ", ".join(_c_string(s) for s in low.labels) or "NULL"
    lines += [f"static const char *const pg_labels[] = {{{labels}}};",
              f"PG_PUBLIC size_t {prefix}_n_classes(void) {{ return {len(low.labels)}; }}",
              f"PG_PUBLIC const char *{prefix}_class_label(size_t i) {{",
              f"    return i < {len(low.labels)} ? pg_labels[i] : NULL;", "}"]
    return lines


def _c_string(text: str) -> str:
    """A C string literal of ``text`` in UTF-8 (octal escapes: never merge with a digit)."""
    out = []
    for byte in text.encode("utf-8"):
        ch = chr(byte)
        out.append(ch if 32 <= byte < 127 and ch not in '"\\?' else f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


# ------------------------------------------------------------------------------ link --
def link(c_text: str, objects: list[bytes], version_map: str, out_path: Path, cc: str,
         soname: str) -> None:
    """``cc -shared`` the runtime and the kernels' objects into ``out_path``. Only libc and
    libm are linked (libm as needed: exp, log, pow)."""
    if shutil.which(cc) is None:
        raise UnsupportedModelError(
            f"building the library needs the C compiler {cc!r}, which is not installed "
            "(Debian: apt-get install gcc, or gcc-aarch64-linux-gnu libc6-dev-arm64-cross "
            "for aarch64)")
    with tempfile.TemporaryDirectory(prefix="peregrine-aot-") as tmp:
        d = Path(tmp)
        (d / "runtime.c").write_text(c_text)
        names = []
        for i, obj in enumerate(objects):
            names.append(str(d / f"kernels{i}.o"))
            Path(names[-1]).write_bytes(obj)
        (d / "exports.map").write_text(version_map)
        cmd = [cc, "-shared", "-fPIC", "-O2", "-std=c11", "-ffp-contract=off",
               "-fno-fast-math", "-fvisibility=hidden", "-o", str(out_path),
               str(d / "runtime.c"), *names,
               f"-Wl,--version-script={d / 'exports.map'}", f"-Wl,-soname,{soname}",
               "-Wl,-z,noexecstack", "-Wl,--no-undefined", "-Wl,--as-needed", "-lm"]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise RuntimeError(f"linking the library failed ({' '.join(cmd)}):\n{res.stderr}")
