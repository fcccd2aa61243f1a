"""The reference backend: runs the graph by the ops' NumPy rules (``ir/semantics``), the
oracle for the other backends in tests and the fallback when nothing faster is installed."""

from __future__ import annotations

from typing import Any

import numpy as np

from peregrine.backends.base import Backend, Executable
from peregrine.ir.ops import Op
from peregrine.ir.semantics import evaluate
from peregrine.ir.spec import ModelSpec
from peregrine.options import CompileOptions


class ReferenceExecutable(Executable):
    def __init__(self, spec: ModelSpec, options: CompileOptions) -> None:
        self.spec = spec
        self.options = options

    def run(self, X: Any, outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
        if not isinstance(X, np.ndarray):
            X = X.detach().cpu().numpy()
        return evaluate(self.spec.graph, X, outputs, self.options)

    def explain(self) -> dict[str, Any]:
        return {"backend": "reference", "why": "NumPy evaluator of the IR (the test oracle)"}


class ReferenceBackend(Backend):
    name = "reference"
    description = "NumPy evaluator of the IR; the oracle and fallback"

    @classmethod
    def lowered(cls) -> frozenset[Op]:
        return frozenset(op for op in Op if op is not Op.INPUT)  # the rules are its code

    @classmethod
    def compile(cls, spec: ModelSpec, options: CompileOptions, device: str) -> Executable:
        return ReferenceExecutable(spec, options)
