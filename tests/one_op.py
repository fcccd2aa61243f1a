"""A compiled model whose one method is one IR op on the input: what the per-op kernel tests
(tests/test_tvm_map.py, tests/test_tvm_nn.py) compare backend against backend."""

from __future__ import annotations

from peregrine.ir import GraphBuilder, Op
from peregrine.ir.spec import MethodSpec, ModelSpec
from peregrine.options import CompileOptions
from peregrine.runtime.compiled import build


def one_op_model(op: Op, width: int, n_in: int, backend: str, **attrs):
    """``transform`` = ``op`` (``attrs``) of the ``n_in`` input columns, ``width`` wide."""
    g = GraphBuilder()
    node = g.add(op, (g.input(n_in),), width=width, **attrs)
    spec = ModelSpec(graph=g.build({"transform": node}),
                     methods={"transform": MethodSpec("transform")}, n_features=n_in,
                     source=f"test.{op.name}")
    return build(spec, backend, CompileOptions(), "cpu")
