"""A trained PyTorch module -> IR ops (issue #15 item 4), for ``peregrine.TorchStep``
(``torch_nn.py``) and skorch's nets (``skorch.py``).

The module is translated, never embedded: an artifact holds only IR attributes (arrays and
numbers) and loads without unpickling code. An eval-mode copy is traced with ``torch.fx``
(``symbolic_trace``: torch.nn's own modules stay leaves, a user's modules are traced through),
and every node of the traced graph becomes IR ops that compute in the module's dtype
(``ir/semantics/nn.py``):

* nn.Linear / F.linear / ``x @ W`` -> DENSE; the activations (modules, functions and tensor
  methods; SELU and CELU as ELU, ReLU6 and clamp as hardtanh) -> ACTIVATION; Dropout in eval
  mode, Identity, Flatten of a 2-D batch, view/reshape/squeeze/unsqueeze that keep one row per
  sample -> nothing;
* nn.BatchNorm1d in eval mode (running statistics) -> BATCH_NORM;
* arithmetic with a constant (a Python number rounds to the dtype, as torch does) -> AFFINE or,
  for ``x / c``, CENTER_SCALE (one correctly rounded division), both in their float32 mode;
  sum, difference or product of two tensors -> WEIGHTED_SUM or POLYNOMIAL (exact in float64)
  then a cast to the dtype: one rounding, as torch's float32 operation;
* torch.cat along the columns -> CONCAT; ``x[:, a:b]``, ``x[:, k]`` -> SELECT.

The input is cast to the module's dtype first (what TorchStep and skorch feed it). Anything
else (another layer, a function, a batch-mixing operation, a forward hook, dropout in training
mode) raises UnsupportedModelError naming the module or function and its fx node.

This module traces and walks the graph (the :class:`Translator`, which also emits the IR ops
in the network's dtype); what each module, function and method becomes is the tables of
``torch_fx_ops.py``.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from torch import fx, nn

from peregrine.errors import UnsupportedModelError
from peregrine.frontends.torch_fx_ops import (  # importing it fills the tables
    BATCH,
    DTYPES,
    FUNCTIONS,
    METHODS,
    MODULES,
    Const,
    Shape,
    Value,
)
from peregrine.ir import GraphBuilder, Op
from peregrine.torch_step import module_dtype


class Translator:
    def __init__(self, g: GraphBuilder, module: nn.Module, owner: str) -> None:
        self.g, self.owner = g, owner
        torch_dtype = module_dtype(module)
        if torch_dtype not in DTYPES:
            raise UnsupportedModelError(f"{owner}: a module in {torch_dtype} (supported: "
                                        "float32, float64)")
        self.dtype = DTYPES[torch_dtype]
        self.module = copy.deepcopy(module).cpu().eval()  # the user's module is left alone
        _refuse_hooks(self.module, owner)
        try:
            self.gm = fx.symbolic_trace(self.module)
        except Exception as exc:  # torch.fx raises many kinds (TraceError, TypeError...)
            raise UnsupportedModelError(
                f"{owner}: torch.fx cannot trace {type(module).__name__} ({exc}); Peregrine "
                "translates modules whose forward torch.fx.symbolic_trace can follow") from exc
        self.node: fx.Node | None = None

    # ---------------------------------------------------------------- entry point --
    def run(self, x: str, width: int) -> Any:
        """The module's output (a Value, or a tuple/list of them) on input node ``x``."""
        env: dict[fx.Node, Any] = {}
        inputs = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        if len(inputs) != 1:
            raise self.refuse(f"a forward taking {len(inputs)} inputs (supported: one tensor)")
        for node in self.gm.graph.nodes:
            self.node = node
            if node.op == "placeholder":
                env[node] = self.cast(Value(x, width))
            elif node.op == "output":
                return fx.node.map_arg(node.args[0], lambda n: env[n])
            elif node.op == "get_attr":
                env[node] = self.constant(node.target)
            else:
                args = fx.node.map_arg(node.args, lambda n: env[n])
                kwargs = fx.node.map_arg(node.kwargs, lambda n: env[n])
                env[node] = self.call(node, args, kwargs)
        raise self.refuse("a traced graph without an output")

    def call(self, node: fx.Node, args: tuple, kwargs: dict) -> Any:
        if node.op == "call_module":
            sub = self.gm.get_submodule(node.target)
            entry = MODULES.lookup(type(sub))
            if entry is None:
                raise self.refuse(f"module {type(sub).__module__}.{type(sub).__qualname__}")
            return entry.fn(self, sub, args, kwargs)
        if node.op == "call_method":
            fn = METHODS.get(node.target)
            if fn is None:
                raise self.refuse(f"tensor method .{node.target}()")
            return fn(self, args, kwargs)
        fn = FUNCTIONS.get(node.target)
        if fn is None:
            name = getattr(node.target, "__qualname__", None) or str(node.target)
            raise self.refuse(f"function {getattr(node.target, '__module__', '')}.{name}")
        return fn(self, args, kwargs)

    # ------------------------------------------------------------------- helpers --
    def refuse(self, what: str) -> UnsupportedModelError:
        where = ""
        if self.node is not None:
            where = f" (torch.fx node {self.node.name!r}: {self.node.op} {self.node.target})"
        return UnsupportedModelError(f"{self.owner}: {what} is not supported in a network"
                                     f"{where}; see docs/hybrid.md for what translates")

    def constant(self, target: str) -> Const:
        obj: Any = self.gm
        for part in target.split("."):
            obj = getattr(obj, part)
        if not isinstance(obj, torch.Tensor) or not obj.is_floating_point():
            raise self.refuse(f"attribute {target} ({type(obj).__name__})")
        return Const(obj.detach().cpu().to(torch.float64).numpy().copy(),
                     DTYPES.get(obj.dtype, str(obj.dtype)))

    def tensor(self, v: Any, what: str = "input") -> Value:
        if not isinstance(v, Value):
            raise self.refuse(f"{what} {type(v).__name__} where a batch tensor goes")
        return v

    def f32(self) -> str:
        """The float32 mode of AFFINE/CENTER_SCALE: on a float32 value, round as torch does."""
        return "cast" if self.dtype == "float32" else "never"

    def cast(self, v: Value) -> Value:
        return self.act(v, "identity")

    def act(self, v: Any, kind: str, **params: Any) -> Value:
        v = self.tensor(v)
        params = {k: p if isinstance(p, str) else float(p) for k, p in params.items()}
        node = self.g.add(Op.ACTIVATION, (v.node,), width=v.width, kind=kind, net_dtype=self.dtype,
                          **params)
        return Value(node, v.width, v.rank)

    def row_wise(self, v: Any, kind: str, dim: Any) -> Value:
        v = self.tensor(v)
        if dim is None:  # torch's legacy implicit dim: 1 for a 2-D tensor, 0 (the batch) for 1-D
            dim = 1 if v.rank == 2 else 0
        if v.rank != 2 or dim not in (1, -1):
            raise self.refuse(f"{kind} over dim {dim} of a rank-{v.rank} tensor (supported: "
                              "the last dim of a 2-D batch)")
        return self.act(v, kind)

    def dense(self, v: Any, weight: np.ndarray, bias: np.ndarray | None) -> Value:
        """x @ weight + bias, weight (in, out) in the network's dtype."""
        v = self.tensor(v)
        if v.rank != 2 or weight.ndim != 2 or weight.shape[0] != v.width:
            raise self.refuse(f"a product of a rank-{v.rank} tensor of width {v.width} with "
                              f"weights of shape {weight.shape[::-1]}")
        bias = np.zeros(weight.shape[1]) if bias is None else np.asarray(bias).reshape(-1)
        node = self.g.add(Op.DENSE, (v.node,), width=weight.shape[1], weight=weight,
                          bias=bias, net_dtype=self.dtype)
        return Value(node, weight.shape[1])

    def own_dtype(self, c: Const) -> np.ndarray:
        if c.dtype != self.dtype and c.value.ndim:
            raise self.refuse(f"a {c.dtype} parameter in a {self.dtype} network (torch would "
                              "promote the result)")
        return c.value

    def select(self, v: Value, cols: list[int], rank: int = 2) -> Value:
        node = self.g.add(Op.SELECT, (v.node,), width=len(cols), columns=np.asarray(cols))
        return Value(node, len(cols), rank)

    def broadcast(self, a: Value, b: Value) -> tuple[Value, Value]:
        """Two tensors of one shape, a single column repeated to the other's width."""
        if a.width != b.width:
            if a.width == 1 and a.rank == 2:
                a = self.select(a, [0] * b.width)
            elif b.width == 1 and b.rank == 2:
                b = self.select(b, [0] * a.width)
        if a.width != b.width or a.rank != b.rank:
            raise self.refuse(f"arithmetic between tensors of widths {a.width} and {b.width}")
        return a, b

    def reshape(self, v: Any, shape: list) -> Value:
        """view/reshape to ``shape`` when it keeps one row per sample."""
        v = self.tensor(v)
        dims = [BATCH if (d is BATCH or (isinstance(d, int) and d == -1 and i == 0))
                else d for i, d in enumerate(shape)]
        if len(dims) == 1 and dims[0] in (BATCH, -1) and v.width == 1:
            return Value(v.node, 1, rank=1)
        if len(dims) == 2 and dims[0] is BATCH and dims[1] in (v.width, -1):
            return Value(v.node, v.width, rank=2)
        raise self.refuse(f"reshaping a ({'n' if v.rank == 1 else f'n, {v.width}'}) tensor to "
                          f"{tuple('n' if d is BATCH else d for d in shape)}")

    def dim(self, d: Any, rank: int) -> int:
        if not isinstance(d, int) or not -rank <= d < rank:
            raise self.refuse(f"dim {d!r} of a rank-{rank} tensor")
        return d % rank


def _refuse_hooks(module: nn.Module, owner: str) -> None:
    # torch.fx traces forward() only: hooks would run in the source and not here
    for name, sub in module.named_modules():
        for kind in ("_forward_hooks", "_forward_pre_hooks"):
            if getattr(sub, kind, None):
                raise UnsupportedModelError(f"{owner}: module {name or type(sub).__name__!r} "
                                            f"has {kind.strip('_').replace('_', ' ')}, which "
                                            "torch.fx does not trace")


def translate(g: GraphBuilder, module_: nn.Module, x: str, width: int, owner: str
              ) -> tuple[Any, str]:
    """Add ``module_``'s forward on input node ``x`` (``width`` columns) to ``g``; returns its
    output (a Value, or a tuple/list) and the network's dtype ("float32" or "float64")."""
    tr = Translator(g, module_, owner)
    return tr.run(x, width), tr.dtype


def input_width(module_: nn.Module) -> int | None:
    """The feature count of the module's first nn.Linear / BatchNorm1d (None: not found): the
    input width of a network given alone (a TorchStep never fitted, a skorch net)."""
    for sub in module_.modules():
        if isinstance(sub, nn.Linear):
            return int(sub.in_features)
        if isinstance(sub, nn.BatchNorm1d):
            return int(sub.num_features)
    return None


__all__ = ["Const", "Shape", "Translator", "Value", "input_width", "module_dtype", "translate"]
