"""The op mapping of ``torch_fx.py``: what each torch.nn module, torch function and tensor
method of a traced forward becomes in the IR (issue #15 item 4).

Three tables, filled as this module is imported: ``MODULES`` (by module type, subclasses
included), ``FUNCTIONS`` (by the function object fx records) and ``METHODS`` (by tensor-method
name). A handler receives the :class:`~peregrine.frontends.torch_fx.Translator` (which emits
IR ops in the network's dtype and refuses, naming the fx node) and the call's arguments, with
tensors already mapped to :class:`Value`, parameters to :class:`Const` and ``x.shape`` to
:class:`Shape`. ``torch_fx.py`` traces the module and walks its graph through these tables.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from peregrine.ir import Op
from peregrine.ir.semantics.nn import GELU_APPROXIMATIONS
from peregrine.registry import TypeRegistry

if TYPE_CHECKING:  # the handlers' first argument; torch_fx imports this module
    from peregrine.frontends.torch_fx import Translator

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
