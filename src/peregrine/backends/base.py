"""The backend interface. A backend turns a ModelSpec into an Executable; adding a backend is one
new module that subclasses Backend and registers it (see backends/__init__.py)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from peregrine.ir.ops import Op
from peregrine.ir.spec import ModelSpec
from peregrine.options import CompileOptions


class Executable(ABC):
    """A compiled program: computes named graph outputs for a validated 2-D input."""

    @abstractmethod
    def run(self, X: Any, outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
        """X is a 2-D numpy array (float32/float64) or, for tensor backends, a torch tensor."""

    @abstractmethod
    def explain(self) -> dict[str, Any]:
        """What was chosen (strategy, schedule, dtypes) and why."""

    def runner(self, output: str) -> Callable[[np.ndarray], np.ndarray] | None:
        """Optional fast path: ``X -> value of output`` for a validated 2-D float32/float64
        numpy array, with no per-call planning. None (the default) when the backend has none
        for this output; ``CompiledModel`` then calls :meth:`run`. A runner whose attribute
        ``checks_finite`` is true checks the source's NaN/inf policy as it runs and raises
        :class:`NonFiniteInput` instead of returning (no separate pass over the input)."""
        return None

    def to(self, device: str) -> Executable:
        raise NotImplementedError(f"{type(self).__name__} cannot move to device {device!r}")

    @property
    def device(self) -> str:
        return "cpu"


class Backend(ABC):
    name: ClassVar[str]
    description: ClassVar[str] = ""
    devices: ClassVar[tuple[str, ...]] = ("cpu",)

    @classmethod
    def available(cls) -> bool:
        """True when the backend's dependencies import on this machine."""
        return True

    # How the backend computes each op (INPUT aside): the ops it lowers to its own code, and
    # those it runs by their NumPy rule (``ir/semantics``), its declared fallbacks. Every op is
    # in exactly one of the two (tests/test_op_coverage.py); fallbacks are listed in the docs.
    @classmethod
    def lowered(cls) -> frozenset[Op]:
        return frozenset()

    @classmethod
    def prefetch(cls) -> None:
        """Start loading what :meth:`build` will need (a code generator's library) while the
        frontend converts the model; optional, and it must return at once."""
        return None

    @classmethod
    def fallback(cls) -> frozenset[Op]:
        return frozenset(op for op in Op if op is not Op.INPUT) - cls.lowered()

    @classmethod
    @abstractmethod
    def compile(cls, spec: ModelSpec, options: CompileOptions, device: str) -> Executable: ...

    @classmethod
    def build(cls, spec: ModelSpec, options: CompileOptions, device: str, *,
              sample: np.ndarray | None = None,
              saved: dict[str, Any] | None = None) -> Executable:
        """``compile`` with what the runtime may know besides the model: ``sample``, rows at
        the model's input (validated, 2-D) to tune on; ``saved``, the backend state a loaded
        artifact recorded (its ``artifact_state()``) to rebuild the same program. Backends
        that use neither keep this default."""
        return cls.compile(spec, options, device)
