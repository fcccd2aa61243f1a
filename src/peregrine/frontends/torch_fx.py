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
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import fx, nn

from peregrine.errors import UnsupportedModelError
from peregrine.ir import GraphBuilder, Op
from peregrine.ir.semantics.nn import GELU_APPROXIMATIONS
from peregrine.registry import TypeRegistry
from peregrine.torch_step import module_dtype

DTYPES = {torch.float32: "float32", torch.float64: "float64"}
# torch.nn.SELU's constants (torch/csrc/api/include/torch/nn/functional/activation.h, ATen)
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


@dataclass(frozen=True)
class Value:
    """A tensor of the traced program: IR node, columns, and whether the module sees it as
    (n,) (rank 1; held (n, 1) in the IR) or (n, width)."""

    node: str
    width: int
    rank: int = 2


@dataclass(frozen=True)
class Const:
    """A parameter or buffer read by the traced program (float64 copy of its values)."""

    value: np.ndarray
    dtype: str


@dataclass(frozen=True)
class Shape:
    """``x.shape`` / ``x.size()`` of a Value."""

    of: Value


BATCH = "<batch>"  # x.shape[0] / x.size(0): the row count, unknown until run time


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


def bind(tr: Translator, args: tuple, kwargs: dict, names: str, **defaults: Any) -> dict:
    """Arguments by name (space-separated ``names``, in signature order) with defaults; an
    argument without a default must be given; an unknown keyword is refused."""
    order = names.split()
    out = dict(zip(order, args))
    for k, v in kwargs.items():
        if k not in order or k in out:
            raise tr.refuse(f"argument {k}=")
        out[k] = v
    for k in order:
        if k not in out:
            if k not in defaults:
                raise tr.refuse(f"a call without {k}")
            out[k] = defaults[k]
    return out


# ---------------------------------------------------------------------------- tables --
Handler = Callable[..., Any]
MODULES: TypeRegistry[Handler] = TypeRegistry("torch module")
FUNCTIONS: dict[Any, Handler] = {}
METHODS: dict[str, Handler] = {}


def module(*classes: type) -> Callable[[Handler], Handler]:
    return MODULES.register(*classes)


def functions(*fns: Any, methods: str = "") -> Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        for f in fns:
            FUNCTIONS[f] = fn
        for m in methods.split():
            METHODS[m] = fn
        return fn

    return deco


def _simple(kind: str, names: str = "input", **fixed: float) -> Handler:
    def handle(tr: Translator, args: tuple, kwargs: dict) -> Value:
        a = bind(tr, args, kwargs, names, inplace=False)
        return tr.act(a["input"], kind, **fixed)

    return handle


for _fns, _methods, _kind in (
        ((torch.relu, F.relu), "relu", "relu"),
        ((torch.tanh, F.tanh), "tanh", "tanh"),
        ((torch.sigmoid, F.sigmoid), "sigmoid", "sigmoid"),
        ((F.silu,), "", "silu"),
        ((F.mish,), "", "mish")):
    functions(*_fns, methods=_methods)(_simple(_kind, "input inplace"))
functions(F.relu6)(_simple("hardtanh", "input inplace", low=0.0, high=6.0))
functions(F.selu)(_simple("elu", "input inplace", alpha=SELU_ALPHA, scale=SELU_SCALE))


@functions(F.hardtanh)
def _hardtanh(tr: Translator, args: tuple, kwargs: dict) -> Value:
    a = bind(tr, args, kwargs, "input min_val max_val inplace", min_val=-1.0, max_val=1.0,
             inplace=False)
    return tr.act(a["input"], "hardtanh", low=a["min_val"], high=a["max_val"])


@functions(torch.clamp, torch.clip, methods="clamp clip")
def _clamp(tr: Translator, args: tuple, kwargs: dict) -> Value:
    a = bind(tr, args, kwargs, "input min max", min=None, max=None)
    if not all(v is None or isinstance(v, (int, float)) for v in (a["min"], a["max"])):
        raise tr.refuse("clamp to tensor bounds")
    low = -np.inf if a["min"] is None else a["min"]
    high = np.inf if a["max"] is None else a["max"]
    if low > high:
        raise tr.refuse(f"clamp with min {low} > max {high}")
    return tr.act(a["input"], "hardtanh", low=low, high=high)


@functions(F.leaky_relu)
def _leaky_relu(tr: Translator, args: tuple, kwargs: dict) -> Value:
    a = bind(tr, args, kwargs, "input negative_slope inplace", negative_slope=0.01,
             inplace=False)
    return tr.act(a["input"], "leaky_relu", alpha=a["negative_slope"])


@functions(F.elu)
def _elu(tr: Translator, args: tuple, kwargs: dict) -> Value:
    a = bind(tr, args, kwargs, "input alpha inplace", alpha=1.0, inplace=False)
    return tr.act(a["input"], "elu", alpha=a["alpha"])


@functions(F.celu)
def _celu(tr: Translator, args: tuple, kwargs: dict) -> Value:
    a = bind(tr, args, kwargs, "input alpha inplace", alpha=1.0, inplace=False)
    return tr.act(a["input"], "elu", alpha=a["alpha"], input_scale=1.0 / a["alpha"])


@functions(F.gelu)
def _gelu(tr: Translator, args: tuple, kwargs: dict) -> Value:
    a = bind(tr, args, kwargs, "input approximate", approximate="none")
    return _gelu_of(tr, a["input"], a["approximate"])


def _gelu_of(tr: Translator, v: Any, approximate: Any) -> Value:
    if approximate not in GELU_APPROXIMATIONS:
        raise tr.refuse(f"gelu(approximate={approximate!r})")
    return tr.act(v, "gelu", approximate=str(approximate))


@functions(F.softplus)
def _softplus(tr: Translator, args: tuple, kwargs: dict) -> Value:
    a = bind(tr, args, kwargs, "input beta threshold", beta=1.0, threshold=20.0)
    return tr.act(a["input"], "softplus", beta=a["beta"], threshold=a["threshold"])


def _softmax_like(kind: str) -> Handler:
    def handle(tr: Translator, args: tuple, kwargs: dict) -> Value:
        a = bind(tr, args, kwargs, "input dim _stacklevel dtype", dim=None, _stacklevel=3,
                 dtype=None)
        if a["dtype"] is not None:
            raise tr.refuse(f"{kind}(dtype={a['dtype']})")
        return tr.row_wise(a["input"], kind, a["dim"])

    return handle


functions(torch.softmax, F.softmax, methods="softmax")(_softmax_like("softmax"))
functions(torch.log_softmax, F.log_softmax, methods="log_softmax")(_softmax_like("log_softmax"))


@functions(F.dropout, F.alpha_dropout, F.feature_alpha_dropout, torch.dropout)
def _dropout(tr: Translator, args: tuple, kwargs: dict) -> Value:
    a = bind(tr, args, kwargs, "input p training inplace", p=0.5, training=True, inplace=False)
    if a["training"] is not False:
        raise tr.refuse("dropout with training=True (random at prediction time; pass "
                        "training=self.training)")
    return tr.tensor(a["input"])


@functions(F.linear)
def _linear(tr: Translator, args: tuple, kwargs: dict) -> Value:
    a = bind(tr, args, kwargs, "input weight bias", bias=None)
    w, b = a["weight"], a["bias"]
    if not isinstance(w, Const) or not (b is None or isinstance(b, Const)):
        raise tr.refuse("F.linear with computed weights")
    return tr.dense(a["input"], tr.own_dtype(w).T, None if b is None else tr.own_dtype(b))


@functions(operator.matmul, torch.matmul, torch.mm, methods="matmul mm")
def _matmul(tr: Translator, args: tuple, kwargs: dict) -> Value:
    a = bind(tr, args, kwargs, "input other")
    if not isinstance(a["other"], Const):
        raise tr.refuse("a product with a computed matrix")
    return tr.dense(a["input"], tr.own_dtype(a["other"]), None)


@functions(torch.cat, torch.concat, torch.concatenate)
def _cat(tr: Translator, args: tuple, kwargs: dict) -> Value:
    a = bind(tr, args, kwargs, "tensors dim", dim=0)
    parts = [tr.tensor(v) for v in a["tensors"]]
    if any(p.rank != 2 for p in parts) or tr.dim(a["dim"], 2) != 1:
        raise tr.refuse(f"torch.cat along dim {a['dim']} (supported: the columns of 2-D "
                        "tensors)")
    if len(parts) == 1:
        return parts[0]
    width = sum(p.width for p in parts)
    node = tr.g.add(Op.CONCAT, tuple(p.node for p in parts), width=width,
                    float32=tr.dtype == "float32")
    return Value(node, width)


@functions(torch.flatten, methods="flatten")
def _flatten(tr: Translator, args: tuple, kwargs: dict) -> Value:
    a = bind(tr, args, kwargs, "input start_dim end_dim", start_dim=0, end_dim=-1)
    v = tr.tensor(a["input"])
    start, end = tr.dim(a["start_dim"], v.rank), tr.dim(a["end_dim"], v.rank)
    if start == 0 and end == v.rank - 1:
        return tr.reshape(v, [-1])
    return v  # flattening dims [1, 1] of a 2-D tensor, or a rank-1 tensor: unchanged


@functions(torch.reshape, methods="view reshape")
def _view(tr: Translator, args: tuple, kwargs: dict) -> Value:
    if kwargs:
        raise tr.refuse("view/reshape with keyword arguments")
    shape = list(args[1:])
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = list(shape[0])
    return tr.reshape(args[0], shape)


@functions(torch.squeeze, methods="squeeze")
def _squeeze(tr: Translator, args: tuple, kwargs: dict) -> Value:
    a = bind(tr, args, kwargs, "input dim", dim=None)
    v = tr.tensor(a["input"])
    if a["dim"] is None or (v.rank == 2 and tr.dim(a["dim"], 2) == 1):
        return Value(v.node, v.width, 1) if v.width == 1 and v.rank == 2 else v
    raise tr.refuse(f"squeeze(dim={a['dim']}) of the batch dimension")


@functions(torch.unsqueeze, methods="unsqueeze")
def _unsqueeze(tr: Translator, args: tuple, kwargs: dict) -> Value:
    a = bind(tr, args, kwargs, "input dim")
    v = tr.tensor(a["input"])
    if v.rank == 1 and tr.dim(a["dim"], 2) == 1:
        return Value(v.node, 1, 2)
    raise tr.refuse(f"unsqueeze(dim={a['dim']}) of a rank-{v.rank} tensor")


@functions(methods="contiguous")
def _same(tr: Translator, args: tuple, kwargs: dict) -> Value:
    return tr.tensor(args[0])


@functions(methods="float double")
def _to_float(tr: Translator, args: tuple, kwargs: dict) -> Value:
    want = "float32" if tr.node is not None and tr.node.target == "float" else "float64"
    if want != tr.dtype:
        raise tr.refuse(f"a cast to {want} inside a {tr.dtype} network")
    return tr.tensor(args[0])


@functions(getattr)
def _getattr(tr: Translator, args: tuple, kwargs: dict) -> Any:
    if args[1] != "shape":
        raise tr.refuse(f"attribute .{args[1]}")
    return Shape(tr.tensor(args[0]))


@functions(methods="size")
def _size(tr: Translator, args: tuple, kwargs: dict) -> Any:
    a = bind(tr, args, kwargs, "input dim", dim=None)
    shape = Shape(tr.tensor(a["input"]))
    return shape if a["dim"] is None else _shape_item(tr, shape, a["dim"])


def _shape_item(tr: Translator, shape: Shape, i: Any) -> Any:
    d = tr.dim(i, shape.of.rank)
    return BATCH if d == 0 else shape.of.width


@functions(operator.getitem)
def _getitem(tr: Translator, args: tuple, kwargs: dict) -> Any:
    obj, idx = args
    if isinstance(obj, Shape):
        return _shape_item(tr, obj, idx)
    if isinstance(obj, (tuple, list)):
        return obj[idx]
    v = tr.tensor(obj)
    if not isinstance(idx, tuple):
        idx = (idx,)
    if idx and idx[0] is Ellipsis:
        idx = (slice(None),) * (v.rank - len(idx) + 1) + idx[1:]
    if v.rank != 2 or len(idx) != 2 or idx[0] != slice(None):
        raise tr.refuse(f"indexing {idx!r} (supported: x[:, columns])")
    cols = list(range(v.width))
    if isinstance(idx[1], slice):
        return tr.select(v, cols[idx[1]])
    if isinstance(idx[1], int) and -v.width <= idx[1] < v.width:
        return tr.select(v, [cols[idx[1]]], rank=1)
    if isinstance(idx[1], (list, tuple)) and all(isinstance(i, int) for i in idx[1]):
        return tr.select(v, [cols[i] for i in idx[1]])
    raise tr.refuse(f"indexing columns by {idx[1]!r}")


# ---------------------------------------------------------------------- arithmetic --
def _scalar_or_columns(tr: Translator, c: Any, v: Value) -> Any:
    """A constant operand as AFFINE takes it: a number, or one value per column."""
    if isinstance(c, bool) or not isinstance(c, (int, float, Const)):
        raise tr.refuse(f"arithmetic with {type(c).__name__}")
    if not isinstance(c, Const):
        return float(c)
    arr = tr.own_dtype(c)
    if arr.size == 1 and arr.ndim <= (1 if v.rank == 1 else 2):
        return float(arr.reshape(-1)[0])
    if v.rank == 2 and arr.shape[-1:] == (v.width,) and arr.size == v.width:
        return arr.reshape(-1)
    raise tr.refuse(f"arithmetic with a constant of shape {arr.shape} on a width-{v.width} "
                    "tensor")


def _affine(tr: Translator, v: Value, scale: Any, shift: Any) -> Value:
    node = tr.g.add(Op.AFFINE, (v.node,), width=v.width, scale=scale, shift=shift,
                    float32=tr.f32())
    return Value(node, v.width, v.rank)


def _combine(tr: Translator, a: Value, b: Value, op: str) -> Value:
    a, b = tr.broadcast(a, b)
    if op == "mul":  # the product of two float32 numbers is exact in float64, then rounded
        both = tr.g.add(Op.CONCAT, (a.node, b.node), width=2 * a.width)
        eye = np.eye(a.width, dtype=np.int64)
        node = tr.g.add(Op.POLYNOMIAL, (both,), width=a.width, powers=np.hstack([eye, eye]))
    else:  # a sum or difference of two floats, exact in float64 (one rounding in the cast)
        node = tr.g.add(Op.WEIGHTED_SUM, (a.node, b.node), width=a.width,
                        weights=np.array([1.0, 1.0 if op == "add" else -1.0]))
    if tr.dtype == "float64":
        return Value(node, a.width, a.rank)
    return tr.cast(Value(node, a.width, a.rank))


def _arith(op: str) -> Handler:
    def handle(tr: Translator, args: tuple, kwargs: dict) -> Value:
        a = bind(tr, args, kwargs, "input other alpha", alpha=1)
        x, y = a["input"], a["other"]
        if a["alpha"] != 1:
            raise tr.refuse(f"{op}(alpha={a['alpha']})")
        if isinstance(x, Value) and isinstance(y, Value):
            if op == "div":
                raise tr.refuse("division of two tensors")
            return _combine(tr, x, y, op)
        if isinstance(x, Value):
            c = _scalar_or_columns(tr, y, x)
            if op == "add":
                return _affine(tr, x, 1.0, c)
            if op == "sub":
                return _affine(tr, x, 1.0, -np.asarray(c) if np.ndim(c) else -c)
            if op == "mul":
                return _affine(tr, x, c, 0.0)
            node = tr.g.add(Op.CENTER_SCALE, (x.node,), width=x.width, center=0.0, scale=c,
                            float32=tr.f32())  # (x - 0) / c: one rounded division
            return Value(node, x.width, x.rank)
        v = tr.tensor(y)
        c = _scalar_or_columns(tr, x, v)
        if op == "add":
            return _affine(tr, v, 1.0, c)
        if op == "sub":
            return _affine(tr, v, -1.0, c)  # -x is exact, then + c rounds once
        if op == "mul":
            return _affine(tr, v, c, 0.0)
        raise tr.refuse("division of a constant by a tensor")

    return handle


functions(operator.add, torch.add, methods="add")(_arith("add"))
functions(operator.sub, torch.sub, methods="sub")(_arith("sub"))
functions(operator.mul, torch.mul, methods="mul")(_arith("mul"))
functions(operator.truediv, torch.div, methods="div")(_arith("div"))


@functions(operator.neg, torch.neg, methods="neg")
def _neg(tr: Translator, args: tuple, kwargs: dict) -> Value:
    return _affine(tr, tr.tensor(args[0]), -1.0, 0.0)


# ------------------------------------------------------------------------- modules --
@module(nn.Linear)
def _m_linear(tr: Translator, m: nn.Linear, args: tuple, kwargs: dict) -> Value:
    w = tr.own_dtype(tr_const(m.weight))
    b = None if m.bias is None else tr.own_dtype(tr_const(m.bias))
    return tr.dense(args[0], w.T, b)


def tr_const(t: torch.Tensor) -> Const:
    return Const(t.detach().cpu().to(torch.float64).numpy().copy(),
                 DTYPES.get(t.dtype, str(t.dtype)))


def _m_act(kind: str, **read: str) -> Handler:
    """A module applying activation ``kind``; ``read``: parameter <- module attribute."""

    def handle(tr: Translator, m: nn.Module, args: tuple, kwargs: dict) -> Value:
        return tr.act(args[0], kind, **{k: getattr(m, attr) for k, attr in read.items()})

    return handle


module(nn.ReLU)(_m_act("relu"))
module(nn.Tanh)(_m_act("tanh"))
module(nn.Sigmoid)(_m_act("sigmoid"))
module(nn.SiLU)(_m_act("silu"))
module(nn.Mish)(_m_act("mish"))
module(nn.Hardtanh)(_m_act("hardtanh", low="min_val", high="max_val"))  # ReLU6 too
module(nn.LeakyReLU)(_m_act("leaky_relu", alpha="negative_slope"))
module(nn.ELU)(_m_act("elu", alpha="alpha"))
module(nn.Softplus)(_m_act("softplus", beta="beta", threshold="threshold"))


@module(nn.SELU)
def _m_selu(tr: Translator, m: nn.Module, args: tuple, kwargs: dict) -> Value:
    return tr.act(args[0], "elu", alpha=SELU_ALPHA, scale=SELU_SCALE)


@module(nn.CELU)
def _m_celu(tr: Translator, m: nn.CELU, args: tuple, kwargs: dict) -> Value:
    return tr.act(args[0], "elu", alpha=m.alpha, input_scale=1.0 / m.alpha)


@module(nn.GELU)
def _m_gelu(tr: Translator, m: nn.GELU, args: tuple, kwargs: dict) -> Value:
    return _gelu_of(tr, args[0], m.approximate)


@module(nn.Softmax)
def _m_softmax(tr: Translator, m: nn.Softmax, args: tuple, kwargs: dict) -> Value:
    return tr.row_wise(args[0], "softmax", m.dim)


@module(nn.LogSoftmax)
def _m_log_softmax(tr: Translator, m: nn.LogSoftmax, args: tuple, kwargs: dict) -> Value:
    return tr.row_wise(args[0], "log_softmax", m.dim)


@module(nn.Identity, nn.Dropout, nn.AlphaDropout, nn.FeatureAlphaDropout)
def _m_identity(tr: Translator, m: nn.Module, args: tuple, kwargs: dict) -> Value:
    return tr.tensor(args[0])  # dropout is the identity in eval mode (the copy traced)


@module(nn.Flatten)
def _m_flatten(tr: Translator, m: nn.Flatten, args: tuple, kwargs: dict) -> Value:
    return _flatten(tr, (args[0], m.start_dim, m.end_dim), {})


@module(nn.BatchNorm1d)
def _m_batch_norm(tr: Translator, m: nn.BatchNorm1d, args: tuple, kwargs: dict) -> Value:
    v = tr.tensor(args[0])
    if m.running_mean is None or m.running_var is None:
        raise tr.refuse("BatchNorm1d(track_running_stats=False) (normalises by the batch's "
                        "own statistics in eval mode)")
    if v.rank != 2 or v.width != m.num_features:
        raise tr.refuse(f"BatchNorm1d({m.num_features}) on a rank-{v.rank} tensor of width "
                        f"{v.width}")
    dt = np.dtype(tr.dtype)
    ones, zeros = np.ones(v.width, dt), np.zeros(v.width, dt)

    def values(t: Any, default: np.ndarray) -> np.ndarray:
        return default if t is None else t.detach().cpu().numpy().astype(dt)

    node = tr.g.add(Op.BATCH_NORM, (v.node,), width=v.width, net_dtype=tr.dtype,
                    mean=values(m.running_mean, zeros).astype(np.float64),
                    var=values(m.running_var, ones).astype(np.float64),
                    weight=values(m.weight, ones).astype(np.float64),
                    bias=values(m.bias, zeros).astype(np.float64), eps=float(m.eps))
    return Value(node, v.width)


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


__all__ = ["Const", "Translator", "Value", "input_width", "module_dtype", "translate"]
