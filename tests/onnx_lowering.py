"""Shared by the ONNX export tests: one op's lowering alone, run in ONNX Runtime."""

from __future__ import annotations

import importlib

import onnx
from onnx import TensorProto, helper

from peregrine.export.onnx import session
from peregrine.export.onnx_graph import LOWERINGS, Emitter


def run_lowering(node, X, module: str):
    """``node``'s lowering (registered by importing ``module``) alone on X (double, 2-D), the
    model checked with onnx.checker first."""
    importlib.import_module(module)
    e = Emitter("test", "auto")
    out = LOWERINGS[node.op](e, node, ["X"])
    e.nodes.append(helper.make_node("Identity", [out], ["Y"]))
    g = helper.make_graph(e.nodes, "g", [helper.make_tensor_value_info(
        "X", TensorProto.DOUBLE, ["N", X.shape[1]])], [helper.make_tensor_value_info(
            "Y", TensorProto.DOUBLE, ["N", None])], e.initializers)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    onnx.checker.check_model(m, full_check=True)
    return session(m).run(["Y"], {"X": X})[0]
