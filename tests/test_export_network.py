"""ONNX export of a PyTorch network's layers (DENSE, ACTIVATION, BATCH_NORM: TorchStep,
skorch; ``export/onnx_nn.py``): every activation kind's lowering alone in ONNX Runtime against
its NumPy rule (``ir/semantics/nn.py``) on edge values (NaN, +-inf, zeros, the kinks and
thresholds, large magnitudes, float64 values that round to float32 on the way in), float32
and float64 networks; DENSE bit-equal to the rule (NumPy's float32 sums); erf against scipy; and
TorchStep pipelines against torch through the exported file, the network's float32 outputs
read by a forest."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

from peregrine import config  # noqa: E402
from peregrine.export.onnx import session  # noqa: E402
from peregrine.export.onnx_graph import Emitter  # noqa: E402
from peregrine.ir.ops import Op  # noqa: E402
from peregrine.ir.semantics.nn import Activation, BatchNorm, Dense  # noqa: E402
from peregrine.options import CompileOptions  # noqa: E402
from tests.onnx_lowering import run_lowering  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6

# The float32 DENSE lowering reproduces OpenBLAS's FMA sgemm kernel (AVX2 and up). At a forced
# x86-64-v2 level (tools/cpu_level: OPENBLAS_CORETYPE=Nehalem) the rule's own float32 sums round
# each product first, so the two agree within float32 rounding, not bit for bit.
_LEVEL = config.cpu_level()
NO_FMA = _LEVEL is not None and "+fma" not in _LEVEL.llvm_features


class _Node:
    def __init__(self, op, attrs):
        self.op, self.attrs, self.name = op, attrs, "layer"


def _run(node, X):
    return run_lowering(node, X, "peregrine.export.onnx_nn")


def _edge_rows():
    rng = np.random.default_rng(0)
    special = np.asarray([0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, -1.0, 6.0, -6.0, 20.0,
                          20.000001, 19.99999, 1e-30, -1e-30, 88.0, -88.0, 89.0, -104.0, 1e6,
                          -1e6, 0.1 + 1e-12, np.pi])
    values = np.concatenate([special, rng.normal(size=1200) * 3, rng.uniform(-30, 30, 600),
                             rng.normal(size=400) * 1e-4])
    return np.resize(values, (len(values) // 6 + 1) * 6).reshape(-1, 6)


KINDS = [
    ("identity", {}), ("relu", {}), ("hardtanh", {"low": 0.0, "high": 6.0}),
    ("leaky_relu", {"alpha": 0.01}), ("elu", {"alpha": 1.0}),
    ("elu", {"alpha": 1.6732632423543772, "scale": 1.0507009873554805}),  # SELU
    ("elu", {"alpha": 0.7, "input_scale": 1 / 0.7}),  # CELU
    ("gelu", {}), ("gelu", {"approximate": "tanh"}), ("tanh", {}), ("sigmoid", {}),
    ("softplus", {"beta": 2.0, "threshold": 20.0}), ("silu", {}), ("mish", {}),
    ("softmax", {}), ("log_softmax", {}),
]


@pytest.mark.parametrize("net_dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind,params", KINDS, ids=[f"{k}-{i}" for i, (k, _) in
                                                     enumerate(KINDS)])
def test_activation_lowering_against_rule(kind, params, net_dtype):
    node = _Node(Op.ACTIVATION, Activation(kind=kind, net_dtype=net_dtype, **params))
    X = _edge_rows()
    got = _run(node, X)
    with np.errstate(all="ignore"):
        want = node.attrs.rule(node, [X], CompileOptions()).astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    if net_dtype == "float32":
        # the rule's double value rounded once to float32; ONNX Runtime's exp/log/tanh are
        # within an ulp or two of NumPy's, which changes the float32 result only where the
        # double value lies that close to a rounding boundary: at most one float32 ulp
        # (atol: 1 + tanh, log_softmax's shifted - log(sum) cancel to values far below their
        # operands, which carry that ulp of the operands: 2.2e-16 at most here)
        np.testing.assert_allclose(got, want, rtol=2.5e-7, atol=4e-16)
        assert np.mean(got != want) < 0.01
    else:
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=4e-15)


@pytest.mark.parametrize("net_dtype", ["float32", "float64"])
def test_dense_and_batch_norm_lowerings_against_rule(net_dtype):
    rng = np.random.default_rng(1)
    dt = np.dtype(net_dtype)
    w = rng.normal(size=(6, 4)).astype(dt).astype(np.float64)
    b = rng.normal(size=4).astype(dt).astype(np.float64)
    X = _edge_rows()
    X = X[np.isfinite(X).all(axis=1) & (np.abs(X) < 1e5).all(axis=1)]
    dense = _Node(Op.DENSE, Dense(weight=w, bias=b, net_dtype=net_dtype))
    got, want = _run(dense, X), dense.attrs.rule(dense, [X], CompileOptions())
    if net_dtype == "float32" and not NO_FMA:  # the FMA chain: OpenBLAS's sgemm order
        np.testing.assert_array_equal(got, want)
    elif net_dtype == "float32":  # SSE sgemm (forced x86-64-v2): products rounded first
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    else:  # one double MatMul: the runtime's order
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
    stats = {k: rng.uniform(0.5, 2.0, 6).astype(dt).astype(np.float64)
             for k in ("mean", "var", "weight", "bias")}
    bn = _Node(Op.BATCH_NORM, BatchNorm(net_dtype=net_dtype, **stats))
    X = _edge_rows()
    got, want = _run(bn, X), bn.attrs.rule(bn, [X], CompileOptions()).astype(np.float64)
    np.testing.assert_array_equal(got, want)  # exact product, one double sum, one rounding


def test_erf_against_scipy():
    from scipy.special import erf

    from peregrine.export.onnx_nn import _erf

    e = Emitter("test", "auto")
    out = _erf(e, "X")
    e.nodes.append(helper.make_node("Identity", [out], ["Y"]))
    g = helper.make_graph(e.nodes, "g", [helper.make_tensor_value_info(
        "X", TensorProto.DOUBLE, ["N"])], [helper.make_tensor_value_info(
            "Y", TensorProto.DOUBLE, ["N"])], e.initializers)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.normal(size=100_000) * 2, rng.uniform(-7, 7, 50_000),
                        [0.0, -0.0, 1.0, -1.0, 6.0, -6.0, 8.0, 30.0, np.inf, -np.inf, np.nan]])
    got = session(m).run(["Y"], {"X": x})[0]
    want = erf(x)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=4e-16, atol=1e-300)


@pytest.mark.skipif(NO_FMA, reason="at x86-64-v2 the rules' float32 sums are OpenBLAS's SSE "
                    "kernel (no FMA), not the FMA chain the file reproduces: a forest after the "
                    "network may then split differently (docs/export.md)")
def test_torchstep_pipelines_against_torch(tmp_path):
    torch = pytest.importorskip("torch")
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    import peregrine
    from peregrine import TorchStep

    nn = torch.nn
    rng = np.random.default_rng(3)
    X = rng.normal(size=(600, 6)).astype(np.float32)
    y = ((X[:, 0] + X[:, 1] ** 2) > 1).astype(int)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.GELU(), nn.Linear(16, 12),
                        nn.SiLU(), nn.Linear(12, 10), nn.ELU(), nn.Linear(10, 8), nn.Mish(),
                        nn.Linear(8, 8), nn.Softplus(), nn.Linear(8, 6), nn.Hardtanh(),
                        nn.Linear(6, 5), nn.LeakyReLU(), nn.Linear(5, 4), nn.Softmax(dim=1))
    with torch.no_grad():  # running statistics away from the defaults
        net[1].running_mean.uniform_(-0.5, 0.5)
        net[1].running_var.uniform_(0.5, 2.0)
    net.eval()
    Xt = rng.normal(size=(400, 6)) * 2
    for head in (LogisticRegression(), RandomForestClassifier(20, max_depth=5,
                                                              random_state=0)):
        model = make_pipeline(StandardScaler(), TorchStep(net), head).fit(X[:400], y[:400])
        path = tmp_path / "net.onnx"
        # the default backend runs torch's kernels: the export validates against the rules
        # (the reference backend's program), which the file reproduces
        peregrine.compile(model).export_onnx(path)
        compiled = peregrine.compile(model, backend="reference")
        label, proba = session(path).run(["label", "probabilities"], {"X": Xt})
        # the compiled model's rules: the same float32 network numbers, so the same splits
        # (the forest's probabilities are rounded once to float32 by its one-traversal form)
        assert np.array_equal(label, compiled.predict(Xt))
        np.testing.assert_allclose(proba, compiled.predict_proba(Xt), rtol=1e-7, atol=1e-12)
        # torch: the same within the contract, but where torch's float32 sums (MKL's order)
        # put a network output on the other side of a split than the rules' (OpenBLAS's):
        # rows where the compiled model itself differs from torch (one of the 400 here)
        want = model.predict_proba(Xt)
        same = np.isclose(compiled.predict_proba(Xt), want, rtol=RTOL, atol=ATOL).all(axis=1)
        assert same.mean() > 0.99
        assert np.array_equal(label[same], model.predict(Xt)[same])
        np.testing.assert_allclose(proba[same], want[same], rtol=RTOL, atol=ATOL)
