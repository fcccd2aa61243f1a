"""The one options object. Frozen and typed so that a compiled model can record exactly what it
was built with, and so that nothing is threaded through functions as loose keyword flags."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any


class TreeStrategy(enum.Enum):
    """How tree ensembles are lowered to tensor programs (Hummingbird, OSDI'20, section 4)."""

    AUTO = "auto"
    GEMM = "gemm"  # three dense products per tree batch: good for shallow trees, small batches
    TREE_TRAVERSAL = "tree_traversal"  # gather per level over the node arrays: deep trees
    PERFECT_TREE_TRAVERSAL = "perfect_tree_traversal"  # trees padded to perfect shape


class Precision(enum.Enum):
    """Arithmetic precision of the compiled program.

    AUTO keeps results exact: comparisons run in the input's own precision (float32 input against
    thresholds rounded so that float32 comparisons give the double-precision answer; float64 input
    in float64 where the source library compares in float64), and leaf values accumulate in float64.
    FLOAT32 trades the last bits of the sum for speed: float64 input is rounded to float32 first,
    which is exact only for libraries that do the same (scikit-learn trees, XGBoost).
    FAST is AUTO's arithmetic plus the graph passes gated behind it (``passes/__init__.py``,
    docs/passes.md): rewrites that may move result bits within the conformance tolerance (rtol
    1e-5 / atol 1e-6, with the rounding bound written in docs/exactness.md) — linear chains
    folded into one product, a monotone map in front of ``predict``'s argmax or threshold
    dropped. A label an argmax or threshold decides may then change only where the exact answer
    is within rounding of a tie; nothing reaching a tree's comparison is ever rewritten. When a
    gated pass changed the graph, compile measures the optimized graph against the exact one
    and reports each output's largest error (``explain()``, saved with the artifact).
    BFLOAT16 / FLOAT16 (torch and TorchScript backends, CPU and CUDA): the arithmetic ops
    (linear models, scalers, affine maps, network layers) compute in that dtype, the input cast
    once, except where a tree's threshold comparison or a bin index reads the value: that stays
    exact, trees are lowered as at AUTO (splits never move, leaf sums in float64), and outputs
    come back in the method's usual dtype (``backends/torch/lowp.py``). Compile measures the
    program against the exact graph and reports each output's largest error and changed labels.
    Other backends run these levels as AUTO and say so in the report.
    """

    AUTO = "auto"
    FLOAT32 = "float32"
    FLOAT64 = "float64"
    FAST = "fast"
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"


TUNE_MODES = ("auto", "off", "exhaustive")


@dataclass(frozen=True)
class CompileOptions:
    """Everything that steers compilation. Pass one instance to :func:`peregrine.compile`.

    Attributes
    ----------
    tree_strategy:
        Tensor strategy for tree ensembles; AUTO lets the torch backend pick one (``backends/torch/strategy.py``).
    precision:
        See :class:`Precision`; ``"fast"`` also runs the gated graph passes and reports their
        measured error.
    n_threads:
        Threads the backend may use; ``None`` means all cores.
    batch_size:
        Expected rows per call; steers strategy choice (``None``: unknown, assume large batches).
    schedule:
        Backend-specific schedule object (native backend); ``None`` lets the backend choose.
    validate_input:
        Check NaN/inf policy of the source library on every call (cheap; keep on).
    fused_kernels:
        Torch backend on CPU, and native backend: outputs computed only by row-wise pipeline
        ops (scalers, linear models, links, normalizers...) run as one LLVM kernel that reads
        each row once (``kernels/rowwise.py``); False keeps the op-by-op program
        (torch ops; NumPy rules on the native backend).
    validate:
        At compile time, run every method on ``sample_input`` through the source library and the
        compiled program and raise :class:`peregrine.ValidationError` where they differ
        (``runtime/validate.py``); ``explain()`` then reports the largest deviation seen. Off by
        default (it calls the source model); needs ``sample_input``. Saved artifacts keep the
        report; ``peregrine.load`` has no source model and does not validate again.
    passes:
        Names of the graph passes to run (``peregrine.passes.PIPELINE``, in its order); None
        runs them all. Every pass is exact, so this changes speed, never answers; the passes
        gated behind ``Precision.FAST`` run only at that level.
    disable_passes:
        Names of passes not to run (e.g. to measure what one buys).
    tune:
        Native backend, how tree schedules are chosen: ``"auto"`` measures a handful of
        candidates around the heuristic when ``batch_size`` is known (``sample_input`` sets it)
        and takes the heuristic otherwise; ``"off"`` always takes the heuristic;
        ``"exhaustive"`` measures the whole pruned space (representation x vector width x
        interleave x row tile x loop order x tree tile; tens of seconds for a big forest) at
        ``batch_size`` (10,000 rows when not set). Measured decisions are cached per CPU. Every
        schedule is exact, so this changes speed, never answers.
    """

    tree_strategy: TreeStrategy = TreeStrategy.AUTO
    precision: Precision = Precision.AUTO
    n_threads: int | None = None
    batch_size: int | None = None
    schedule: Any = None
    validate_input: bool = True
    fused_kernels: bool = True
    validate: bool = False
    passes: tuple[str, ...] | None = None
    disable_passes: tuple[str, ...] = ()
    tune: str = "auto"

    def __post_init__(self) -> None:
        # Accept the enum's string value too, so CLI and JSON round-trips stay simple.
        if isinstance(self.tree_strategy, str):
            object.__setattr__(self, "tree_strategy", TreeStrategy(self.tree_strategy))
        if isinstance(self.precision, str):
            try:
                object.__setattr__(self, "precision", Precision(self.precision))
            except ValueError:
                raise ValueError(f"CompileOptions.precision must be one of "
                                 f"{', '.join(p.value for p in Precision)}, "
                                 f"got {self.precision!r}") from None
        if not isinstance(self.precision, Precision):
            raise ValueError(f"CompileOptions.precision must be a Precision, got "
                             f"{self.precision!r}")
        if self.n_threads is not None and self.n_threads < 1:
            raise ValueError(f"CompileOptions.n_threads must be >= 1, got {self.n_threads}")
        if not isinstance(self.fused_kernels, bool):  # "no" would be truthy
            raise ValueError(
                f"CompileOptions.fused_kernels must be True or False, got {self.fused_kernels!r}")
        if not isinstance(self.validate, bool):
            raise ValueError(
                f"CompileOptions.validate must be True or False, got {self.validate!r}"
            )
        for key in ("passes", "disable_passes"):
            names = getattr(self, key)
            if names is None:
                continue
            if isinstance(names, str) or not all(isinstance(n, str) for n in names):
                raise ValueError(f"CompileOptions.{key} must be a sequence of pass names, "
                                 f"got {names!r}")
            object.__setattr__(self, key, tuple(names))
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"CompileOptions.batch_size must be >= 1, got {self.batch_size}")
        if self.tune not in TUNE_MODES:
            raise ValueError(f"CompileOptions.tune must be one of {', '.join(TUNE_MODES)}, "
                             f"got {self.tune!r}")

    def replace(self, **changes: Any) -> CompileOptions:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        schedule = self.schedule
        if schedule is not None and hasattr(schedule, "to_json"):
            schedule = schedule.to_json()
        return {
            "tree_strategy": self.tree_strategy.value,
            "precision": self.precision.value,
            "n_threads": self.n_threads,
            "batch_size": self.batch_size,
            "schedule": schedule,
            "validate_input": self.validate_input,
            "fused_kernels": self.fused_kernels,
            "validate": self.validate,
            "passes": None if self.passes is None else list(self.passes),
            "disable_passes": list(self.disable_passes),
            "tune": self.tune,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CompileOptions:
        return cls(
            tree_strategy=TreeStrategy(data["tree_strategy"]),
            precision=data["precision"],  # a level this version lacks: ValueError
            n_threads=data.get("n_threads"),
            batch_size=data.get("batch_size"),
            schedule=data.get("schedule"),
            validate_input=bool(data.get("validate_input", True)),
            fused_kernels=bool(data.get("fused_kernels", True)),
            validate=bool(data.get("validate", False)),  # absent before validation existed
            passes=data.get("passes"),  # absent before the pass manager: the default
            disable_passes=tuple(data.get("disable_passes", ())),
            tune=data.get("tune", "auto"),  # absent before the option existed
        )
