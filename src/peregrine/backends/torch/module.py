"""The torch backend: the IR graph lowered node by node (``ops.LOWERINGS``) into one
``nn.Module`` per requested set of outputs, and the Executable the runtime calls.

Threads. ``torch.set_num_threads`` is process-global. When ``CompileOptions.n_threads`` is set,
each call runs under that intra-op thread count: the count is set for the duration of the call and
restored afterwards, under one process-wide lock, so calls that pin threads run one at a time
(each already uses the threads it asked for) and never see another call's setting. Other torch
code running in the process during such a call sees the pinned count too. With ``n_threads=None``
torch's current setting is used and nothing is locked.

Concurrency. Modules are immutable after compilation (``forward`` allocates everything it writes),
programs are built under a lock and then only read, so one executable serves many Python threads.
``to(device)`` is not meant to race with calls.
"""

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from peregrine.backends.base import Backend, Executable
from peregrine.backends.torch.lowp import low_dtype, lower_low, plan
from peregrine.backends.torch.ops import LOWERINGS, Lowered, lower_node
from peregrine.backends.torch.ops_onehot import OneHotLinear
from peregrine.errors import UnsupportedModelError
from peregrine.ir import Graph, Op
from peregrine.ir.spec import ModelSpec
from peregrine.kernels import rowwise_onehot
from peregrine.options import CompileOptions


class GraphProgram(nn.Module):
    """Runs lowered nodes in topological order. ``srcs[i]`` indexes the values list (0 = X)
    for step i's inputs; ``outs`` picks the returned values.

    Row blocks: every IR op is row-wise (output row r depends on input row r only: a model
    scores each sample on its own), so a large batch is run ``chunk_rows`` rows at a time. Each
    op then reads and writes a block that stays in cache instead of making a full pass over
    main memory per op (a float32 batch cast to float64, centred, scaled, multiplied... is one
    trip through memory instead of one per op), and the results are copied into the outputs.
    ``chunk_rows`` 0: one block (GPUs, where one large kernel per op is what is fast).

    ``narrow[k]``: output k is returned in the input's dtype (the runtime would cast it there
    anyway: ``MethodSpec.dtype == "input"``, sklearn's transformers keep float32); the cast then
    happens in the copy out of the block, not as an extra pass. Same values as casting later."""

    srcs: list[list[int]]
    outs: list[int]
    narrow: list[bool]
    chunk_rows: int
    cast_input: bool

    def __init__(self, steps: list[nn.Module], srcs: list[list[int]], outs: list[int],
                 narrow: list[bool] | None = None, chunk_rows: int = 0,
                 cast_input: bool = False) -> None:
        super().__init__()
        self.steps = nn.ModuleList(steps)
        self.srcs = srcs
        self.outs = outs
        self.narrow = narrow if narrow is not None else [False] * len(outs)
        self.chunk_rows = chunk_rows
        self.cast_input = cast_input

    def _run(self, x: Tensor) -> list[Tensor]:
        values: list[Tensor] = [x]
        for i, step in enumerate(self.steps):
            ins: list[Tensor] = []
            for j in self.srcs[i]:
                ins.append(values[j])
            values.append(step(ins))
        return [values[j] for j in self.outs]

    def _out_dtype(self, k: int, value: Tensor, x: Tensor) -> torch.dtype:
        if self.narrow[k] and value.is_floating_point() and x.is_floating_point():
            return x.dtype
        if value.dtype == torch.bfloat16 or value.dtype == torch.float16:
            return torch.float64  # a low-precision program's output: the method's usual dtype
        return value.dtype

    def forward(self, x: Tensor) -> list[Tensor]:
        n = x.shape[0]
        step = self.chunk_rows
        if step <= 0 or n < 2 * step:
            res = self._run(x)
            return [v.to(self._out_dtype(k, v, x)) for k, v in enumerate(res)]
        # a float32 batch is cast block by block into one reused float64 buffer: every
        # pipeline op reads float64 (its ``.to`` is then a no-op) and a copy into warm memory
        # costs half of a cast that allocates fresh pages each block. No op writes into its
        # input, and each block's outputs are copied out before the next block overwrites it.
        cast = x.dtype == torch.float32 and self.cast_input
        buf = torch.empty((step, x.shape[1]), dtype=torch.float64, device=x.device)
        first = self._run(buf.copy_(x[:step]) if cast else x[:step])
        outs: list[Tensor] = []
        for k, v in enumerate(first):
            shape = list(v.shape)
            shape[0] = n
            out = torch.empty(shape, dtype=self._out_dtype(k, v, x), device=v.device)
            out[:step].copy_(v)
            outs.append(out)
        for start in range(step, n, step):
            block = x[start:start + step]
            if cast:
                block = buf[:block.shape[0]].copy_(block)
            res = self._run(block)
            for k, v in enumerate(res):
                outs[k][start:start + step].copy_(v)
        return outs


class FusedProgram(nn.Module):
    """CPU: a program whose ops are all row-wise pipeline ops, run as one native kernel
    (``kernels.fused.RowKernel``, code from ``kernels/rowwise.py``: each row read once,
    every intermediate value kept in registers, the outputs written once in their final dtype)
    instead of one torch op per IR node. Same values as the op-by-op program up to the order of a few float64 sums
    (docs/pipelines.md). Inputs the kernel does not take (not a 2-D float32/float64 CPU
    tensor) run the op-by-op ``fallback``."""

    def __init__(self, kernel: Any, fallback: GraphProgram, n_threads: int | None) -> None:
        super().__init__()
        self.kernel = kernel
        self.fallback = fallback
        self.n_threads = n_threads
        # input dtypes the kernel takes (a float32 form it does not reproduce: op by op)
        self.dtypes = tuple(d for d in (torch.float32, torch.float64)
                            if kernel.supports(str(d).replace("torch.", "")))

    def threads(self) -> int:
        return self.n_threads or torch.get_num_threads()

    def forward(self, x: Tensor) -> list[Tensor]:
        if x.device.type != "cpu" or x.dtype not in self.dtypes or (
                x.dim() != 2 or x.shape[0] == 0):
            return self.fallback(x)
        arr = x.detach().contiguous().numpy()
        return [torch.from_numpy(o) for o in self.kernel.run(arr, self.threads())]


# Ops whose lowering starts by casting its input to float64 (backends/torch/ops_pipeline.py): a
# float32 input may reach them already cast (GraphProgram.cast_input).
CASTING_OPS = frozenset({Op.LINEAR, Op.CENTER_SCALE, Op.CLIP, Op.NORMALIZE, Op.BINARIZE,
                         Op.IMPUTE, Op.CONCAT, Op.UFUNC})

# Bytes of intermediate values per row block: a block's values stay within the per-core L2
# cache (measured on the 2-core benchmark machine: 1-2 MiB blocks ran elementwise chains and
# float32->float64 linear models 2-4x faster than whole-batch passes; smaller blocks lose to
# Python's per-op dispatch cost, about 10 us per op per block).
BLOCK_BYTES = 1 << 21
MIN_BLOCK_ROWS = 4096


def block_rows(graph: Graph, needed: set, device: torch.device) -> int:
    """Rows per block for a program over ``needed`` nodes (0 = no blocking; see GraphProgram)."""
    if device.type != "cpu":
        return 0
    row_bytes = 8 * sum(max(1, int(graph.by_name[n].width)) for n in needed)
    return max(MIN_BLOCK_ROWS, BLOCK_BYTES // max(1, row_bytes))


def needed_nodes(graph: Graph, wanted: list[str]) -> set:
    return graph.needed(wanted)


_THREADS_LOCK = threading.Lock()


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run under ``n`` intra-op threads (see the module docstring); ``None``: leave as is."""
    if n is None:
        yield
        return
    with _THREADS_LOCK:
        previous = torch.get_num_threads()
        if previous != n:
            torch.set_num_threads(n)
        try:
            yield
        finally:
            if previous != n:
                torch.set_num_threads(previous)


def parse_device(device: str) -> torch.device:
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise UnsupportedModelError(f"torch backend: bad device {device!r} ({exc})") from exc
    if dev.type not in TorchBackend.devices:
        raise UnsupportedModelError(
            f"torch backend runs on {', '.join(TorchBackend.devices)}, not on {device!r}"
        )
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UnsupportedModelError(f"device {device!r} requested but CUDA is not available")
    return dev


class TorchExecutable(Executable):
    accepts_tensors = True  # the runtime hands torch tensors over as they are (no numpy trip)
    backend_name = "torch"

    def __init__(self, spec: ModelSpec, options: CompileOptions, device: str = "cpu") -> None:
        self.spec = spec
        self.options = options
        self._device = parse_device(device)
        graph = spec.graph
        reachable = needed_nodes(graph, list(graph.outputs.values()))
        # Precision.BFLOAT16 / FLOAT16: the arithmetic nodes no exact reader sees (lowp.py)
        low = low_dtype(options.precision)
        low_set, self._folds = plan(graph, low) if low is not None else (set(), {})
        self._low = sorted(low_set & reachable)
        self._lowered: dict[str, Lowered] = {}
        for node in graph.toposort():  # lowering order is fixed: rebuilds are deterministic
            if node.name in reachable and node.op is not Op.INPUT:
                self._lowered[node.name] = (Lowered(lower_low(node, low, graph, self._folds))
                                            if node.name in self._low
                                            else lower_node(node, options))
        for low in self._lowered.values():
            low.module.eval().to(self._device)
        self._lock = threading.Lock()
        self._programs: dict[tuple[str, ...], nn.Module] = {}
        # Build (and script) what the runtime will ask for up front, so errors surface at compile
        # time; other output sets are built on first use.
        methods = sorted({m.output for m in spec.methods.values()}) or sorted(graph.outputs)
        with _compiling_together(options):  # the methods' fused kernels at once
            for name in methods:
                self._program((name,))

    # ------------------------------------------------------------------------- programs --
    def _finalize(self, program: GraphProgram, outputs: tuple[str, ...]) -> nn.Module:
        if self._device.type != "cpu" or not self.options.fused_kernels or self._low:
            return program  # (the fused row kernel computes in float64)
        try:
            from peregrine.kernels.fused import row_kernel  # needs llvmlite
        except ImportError:  # without the native extra: the op-by-op program
            return program
        graph = self.spec.graph
        kernel = row_kernel(graph, [graph.outputs[o] for o in outputs], program.narrow)
        if kernel is None:
            return program
        kernel.prepare()  # compile now: errors at compile time, no first-call latency
        return FusedProgram(kernel, program, self.options.n_threads)

    def _program(self, outputs: tuple[str, ...]) -> nn.Module:
        program = self._programs.get(outputs)
        if program is not None:
            return program
        with self._lock:
            if outputs not in self._programs:
                self._programs[outputs] = self._finalize(self._build(outputs), outputs)
            return self._programs[outputs]

    def _build(self, outputs: tuple[str, ...]) -> GraphProgram:
        graph = self.spec.graph
        wanted = [graph.outputs[o] for o in outputs]
        needed = needed_nodes(graph, wanted)
        index: dict[str, int] = {n.name: 0 for n in graph.nodes if n.op is Op.INPUT}
        steps: list[nn.Module] = []
        srcs: list[list[int]] = []
        order = graph.steps(wanted)
        # a LINEAR reading one-hot indicators picks its weight rows instead (ops_onehot.py)
        linears, absorbed = rowwise_onehot.absorbed(
            [n for n in order if n.name not in self._low], set(wanted),
            rowwise_onehot.value_readers(graph), graph.by_name, {})
        for node in order:
            if node.name in absorbed:
                continue
            index[node.name] = len(steps) + 1
            if node.name in linears:
                parts = linears[node.name]
                src = graph.node(node.inputs[0])
                # built here, per program, so it goes to the device here (the lowered
                # modules above went there in __init__ / to())
                steps.append(OneHotLinear(node, parts, src.op is Op.CONCAT
                                          and bool(src.attrs.float32)).eval().to(self._device))
                srcs.append([index[p.inputs[0] if p.op is Op.ONE_HOT else p.name]
                             for p in parts])
                continue
            steps.append(self._lowered[node.name].module)
            srcs.append([index[i] for i in node.inputs])
        # outputs the runtime casts to the input's dtype (see GraphProgram.narrow)
        dtypes: dict[str, set] = {}
        for m in self.spec.methods.values():
            dtypes.setdefault(m.output, set()).add(m.dtype)
        narrow = [dtypes.get(o) == {"input"} for o in outputs]
        # the input may be handed over in float64 only when every op reading it casts it to
        # float64 first (trees compare in the input's own precision; selections pass it on)
        # (nor when an op keeps a float32 input float32, as scikit-learn's scalers do)
        readers = [n for n in graph.nodes if n.name in needed
                   and any(graph.node(i).op is Op.INPUT for i in n.inputs)]
        cast_input = bool(readers) and all(
            n.op in CASTING_OPS and n.name not in self._low and getattr(n.attrs, "float32", False) in ("never", False)
            for n in readers)
        return GraphProgram(steps, srcs, [index[w] for w in wanted], narrow,
                            block_rows(graph, needed, self._device), cast_input)

    # ----------------------------------------------------------------------------- calls --
    def _as_tensor(self, X: Any) -> Tensor:
        if not isinstance(X, torch.Tensor):
            arr = np.ascontiguousarray(X)  # also drops negative strides torch cannot view
            if not arr.flags.writeable:  # torch.from_numpy warns on read-only memory
                arr = arr.copy()
            X = torch.from_numpy(arr)
        return X.to(self._device)  # no copy when already there

    def run(self, X: Any, outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
        program = self._program(tuple(outputs))
        x = self._as_tensor(X)
        with torch_threads(self.options.n_threads), torch.inference_mode():
            values = program(x)
        return {o: v.cpu().numpy() for o, v in zip(outputs, values)}

    def runner(self, output: str) -> Any:
        """Fused programs: the kernel straight on numpy (no tensors, no thread pinning)."""
        program = self._program((output,))
        if not isinstance(program, FusedProgram) or len(program.dtypes) < 2:
            return None
        from peregrine.kernels.fused import checked_runner

        return checked_runner(program.kernel, self.spec, self.options, program.threads)

    def forward_tensors(self, X: Tensor, outputs: tuple[str, ...]) -> list[Tensor]:
        """Outputs as tensors on the executable's device (no host copy)."""
        with torch_threads(self.options.n_threads), torch.inference_mode():
            return self._program(tuple(outputs))(self._as_tensor(X))

    # ------------------------------------------------------------------------ metadata --
    @property
    def device(self) -> str:
        return str(self._device)

    def to(self, device: str) -> "TorchExecutable":
        dev = parse_device(device)
        with self._lock:
            for low in self._lowered.values():
                low.module.to(dev)
            self._device = dev
            # Scripted programs hold their own handles on the buffers: rebuild them.
            self._programs = {k: self._finalize(self._build(k), k) for k in self._programs}
        return self

    def tree_info(self) -> list[dict]:
        return [low.info for low in self._lowered.values() if low.info is not None]

    def explain(self) -> dict[str, Any]:
        trees = self.tree_info()
        info: dict[str, Any] = {
            "backend": self.backend_name,
            "device": str(self._device),
            "n_threads": self.options.n_threads or f"torch default ({torch.get_num_threads()})",
        }
        fused = {",".join(k): p.kernel.symbols for k, p in self._programs.items()
                 if isinstance(p, FusedProgram)}
        if fused:
            info["fused_kernels"] = fused
        low = low_dtype(self.options.precision)
        if low is not None:
            kept = sorted(n.name for n in self.spec.graph.nodes if n.name in self._lowered
                          and n.name not in self._low)
            info["precision"] = (
                f"{self.options.precision.value}: {len(self._low)} arithmetic node(s) compute "
                f"in {self.options.precision.value} ({', '.join(self._low) or 'none'}); "
                + (f"scaler(s) folded into the product reading them: "
                   f"{', '.join(f'{v} into {k}' for k, v in sorted(self._folds.items()))}; "
                   if self._folds else "") +
                f"{len(kept)} exact (trees, what a tree or bin index reads, other ops)")
        if len(trees) == 1:  # the common case: one ensemble, its choices at the top level
            info.update({k: v for k, v in trees[0].items() if k != "node"})
        elif trees:
            info["forests"] = trees
        return info

    def artifact_state(self) -> dict[str, Any]:
        """Recorded for inspection only: loading recompiles from the stored IR and options, and
        the strategy choice is a pure function of both, so the rebuilt module is the same."""
        return {
            "torch_version": torch.__version__,
            "tree_strategies": {t["node"]: t["strategy"] for t in self.tree_info()},
        }


class TorchBackend(Backend):
    name = "torch"
    description = "PyTorch tensor program (GEMM / tree traversal / perfect tree traversal)"
    devices = ("cpu", "cuda")
    executable = TorchExecutable

    @classmethod
    def lowered(cls) -> frozenset[Op]:
        return frozenset(LOWERINGS)  # filled by the ops_* modules the package imports

    @classmethod
    def compile(cls, spec: ModelSpec, options: CompileOptions, device: str) -> Executable:
        return cls.executable(spec, options, device)


def _compiling_together(options: CompileOptions) -> Any:
    """``jit.together`` (the fused row kernels made while building the methods' programs are
    compiled at once, in several processes), or nothing without llvmlite."""
    try:
        from peregrine.kernels import jit  # needs llvmlite
    except ImportError:
        return contextlib.nullcontext()
    return jit.together(jit.compile_jobs(options.n_threads or None))
