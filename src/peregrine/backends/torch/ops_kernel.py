"""Torch lowerings of the kernel-method and neighbour ops (SVMs, KNN, KernelPCA), one per Op,
mirroring their NumPy rules in ``ir/semantics`` operation for operation in float64
(libsvm's k_function, its probability coupling iteration, sklearn's neighbour weights).
Scriptable: loops run over Python ints, options are plain attributes."""


import numpy as np
import torch
from torch import Tensor, nn

from peregrine.backends.torch.ops import Lowered, f64, lowering
from peregrine.ir import Node, Op
from peregrine.ir.ops import class_pairs
from peregrine.ir.semantics.neighbours import EPS, ERROR_BOUND, EXTRA_CANDIDATES
from peregrine.options import CompileOptions


def _pairs(k: int) -> list[list[int]]:
    """ops.class_pairs as lists (TorchScript types a list attribute, not tuples)."""
    return [list(p) for p in class_pairs(k)]


def _chunk_rows(n_vectors: int, n_features: int) -> int:
    """Rows per chunk keeping (rows, m, d) difference temporaries near 4M doubles."""
    return max(1, (1 << 22) // max(n_vectors * n_features, 1))


def _l2_rows(x: Tensor) -> Tensor:
    # sklearn.preprocessing.normalize: zero norms divide by 1
    n = torch.sqrt((x * x).sum(dim=1))
    return x / torch.where(n == 0.0, torch.ones_like(n), n).unsqueeze(1)


class OvrDecision(nn.Module):
    pairs: list[list[int]]

    def __init__(self, n_classes: int) -> None:
        super().__init__()
        self.k = n_classes
        self.pairs = _pairs(n_classes)

    def forward(self, xs: list[Tensor]) -> Tensor:
        pred, conf = xs[0].to(torch.float64), xs[1].to(torch.float64)
        n = pred.shape[0]
        votes = torch.zeros((n, self.k), dtype=torch.float64, device=pred.device)
        sums = torch.zeros((n, self.k), dtype=torch.float64, device=pred.device)
        for p, ij in enumerate(self.pairs):
            i, j = ij[0], ij[1]
            sums[:, i] -= conf[:, p]
            sums[:, j] += conf[:, p]
            votes[:, i] += (pred[:, p] == 0).to(torch.float64)
            votes[:, j] += (pred[:, p] == 1).to(torch.float64)
        return votes + sums / (3 * (sums.abs() + 1))


class Kernel(nn.Module):
    """``low`` (Precision.BFLOAT16 / FLOAT16, backends/torch/lowp.py): the row-by-vector
    products run in that dtype (one low GEMM), the rest of the kernel in float64."""

    def __init__(self, node: Node, low: torch.dtype | None = None) -> None:
        super().__init__()
        a = node.attrs
        self.low = low is not None
        self.register_buffer("low_like", torch.zeros(0, dtype=low or torch.float64))
        self.kind = str(a.kind)
        self.libsvm = a.form == "libsvm"
        self.gamma = float(a.gamma)
        self.coef0 = float(a.coef0)
        self.degree = float(a.degree)
        self.center = a.center_rows is not None
        v = np.asarray(a.vectors, dtype=np.float64)
        self.register_buffer("vectors", f64(v))
        self.register_buffer("vv", f64(np.einsum("ij,ij->i", v, v)))
        self.register_buffer("center_rows", f64(a.center_rows if self.center else np.zeros(len(v))))
        self.center_all = float(a.center_all) if self.center else 0.0

    def _powi(self, base: Tensor) -> Tensor:
        tmp, ret, t = base, torch.ones_like(base), int(self.degree)
        while t > 0:
            if t % 2 == 1:
                ret = ret * tmp
            tmp = tmp * tmp
            t = t // 2
        return ret

    def _mm(self, a: Tensor, b: Tensor) -> Tensor:
        if self.low:
            dt = self.low_like.dtype
            return (a.to(dt) @ b.to(dt).T).to(torch.float64)
        return a @ b.T

    def forward(self, xs: list[Tensor]) -> Tensor:
        x = xs[0].to(torch.float64)
        v = self.vectors
        if self.kind == "rbf":
            # sklearn's euclidean_distances(squared=True): |x|^2 - 2 x.v + |v|^2, clamped at 0.
            # For libsvm's form too: its k_function sums squared differences (the reference
            # rule does), which here would be an (n, m, d) temporary; one GEMM is ~10x faster
            # and differs by rounding only (~1e-16 (|x|^2 + |v|^2) in the distance, inside the
            # 1e-5 contract, as the conformance cases check)
            xx = (x * x).sum(dim=1)
            d = -2 * (x @ v.T)
            d += xx.unsqueeze(1)
            d += self.vv.unsqueeze(0)
            k = torch.exp(torch.clamp(d, min=0.0) * -self.gamma)
            far = torch.isinf(xx)
            if self.libsvm and bool(far.any()):
                # |x|^2 overflowed (a feature past ~1.3e154): inf - inf above, where libsvm's
                # differences give a kernel value of 0; those rows pair by pair, as the rule
                rows = far.nonzero().squeeze(1)
                diff = x.index_select(0, rows).unsqueeze(1) - v.unsqueeze(0)
                k = k.index_copy(0, rows, torch.exp((diff * diff).sum(dim=2) * -self.gamma))
        elif self.kind == "cosine":
            k = self._mm(_l2_rows(x), _l2_rows(v))
        else:
            k = self._mm(x, v)
            if self.kind == "poly":
                k = self.gamma * k + self.coef0
                k = self._powi(k) if self.libsvm else torch.pow(k, self.degree)
            elif self.kind == "sigmoid":
                k = torch.tanh(self.gamma * k + self.coef0)
        if self.center:  # KernelCenterer.transform
            cols = k.sum(dim=1) / k.shape[1]
            k = k - self.center_rows
            k = k - cols.unsqueeze(1)
            k = k + self.center_all
        return k


class SvmProba(nn.Module):
    """libsvm's svm_predict_probability: Platt per pair, then multiclass_probability with
    each row stopping at its own iteration (rows that converged are frozen)."""

    pairs: list[list[int]]

    def __init__(self, node: Node) -> None:
        super().__init__()
        self.k = int(node.attrs.n_classes)
        self.pairs = _pairs(self.k)
        self.register_buffer("prob_a", f64(node.attrs.prob_a))
        self.register_buffer("prob_b", f64(node.attrs.prob_b))

    def forward(self, xs: list[Tensor]) -> Tensor:
        dec = xs[0].to(torch.float64)
        k = self.k
        n = dec.shape[0]
        f = dec * self.prob_a + self.prob_b
        e = torch.exp(-f.abs())
        pair = torch.where(f >= 0, e / (1.0 + e), 1.0 / (1 + torch.exp(torch.clamp(f, max=0.0))))
        pair = torch.clamp(torch.clamp(pair, min=1e-7), max=1 - 1e-7)
        r = torch.zeros((n, k, k), dtype=torch.float64, device=dec.device)
        for c, ij in enumerate(self.pairs):
            r[:, ij[0], ij[1]] = pair[:, c]
            r[:, ij[1], ij[0]] = 1 - pair[:, c]
        q = torch.zeros((n, k, k), dtype=torch.float64, device=dec.device)
        for t in range(k):
            for j in range(k):
                if j != t:
                    q[:, t, t] += r[:, j, t] * r[:, j, t]
            for j in range(t + 1, k):
                q[:, t, j] = -r[:, j, t] * r[:, t, j]
                q[:, j, t] = q[:, t, j]
        p = torch.full((n, k), 1.0 / k, dtype=torch.float64, device=dec.device)
        active = torch.ones(n, dtype=torch.bool, device=dec.device)
        for _ in range(max(100, k)):
            qp = torch.zeros((n, k), dtype=torch.float64, device=dec.device)
            pqp = torch.zeros(n, dtype=torch.float64, device=dec.device)
            for t in range(k):
                for j in range(k):
                    qp[:, t] += q[:, t, j] * p[:, j]
                pqp += p[:, t] * qp[:, t]
            err = (qp - pqp.unsqueeze(1)).abs().max(dim=1)[0]
            active = active & ~(err < 0.005 / k)
            if not bool(active.any()):
                break
            new_p = p.clone()
            for t in range(k):
                qtt = q[:, t, t]
                diff = (-qp[:, t] + pqp) / qtt
                new_p[:, t] += diff
                pqp = (pqp + diff * (diff * qtt + 2 * qp[:, t])) / (1 + diff) / (1 + diff)
                qp = (qp + diff.unsqueeze(1) * q[:, t, :]) / (1 + diff).unsqueeze(1)
                new_p = new_p / (1 + diff).unsqueeze(1)
            p = torch.where(active.unsqueeze(1), new_p, p)
        return p


class Knn(nn.Module):
    """Op.KNN as ir.semantics.neighbours.nearest computes it: euclidean candidates by the expanded
    form (one GEMM and a top-k), exact distances from differences for the candidates only, a
    per-row check that no other fitted row can be as near, the specification's full way for
    rows that fail it; other metrics from all the differences and a k-th-value partition.

    On the CPU, run eagerly with ``fused_kernels`` (the default) and llvmlite installed, the
    rows go to the LLVM kernels instead (``kernels/knn.py``: the same search, or every distance
    computed in SIMD lanes; the reference backend's bits): torch's top-k, sorts and (rows,
    fitted rows, features) differences made this module 3x (euclidean) to 20x (manhattan)
    slower than scikit-learn on 20K rows against 5K fitted rows (docs/native.md). A scripted
    module (the torchscript backend) and other devices run the torch code below."""

    cpu_kernel: bool

    def __init__(self, node: Node, cpu_kernel: bool = False) -> None:
        super().__init__()
        a = node.attrs
        self.cpu_kernel = cpu_kernel and _knn_kernels() is not None
        self._attrs = a  # (for the kernels: not part of a scripted module)
        self.metric = str(a.metric)
        self.p = float(a.p)
        self.k = int(a.k)
        self.distance = a.weights == "distance"
        self.normalize = bool(a.normalize)
        v = np.asarray(a.vectors, dtype=np.float64)
        vv = np.einsum("ij,ij->i", v, v)
        self.register_buffer("vectors", f64(v))
        self.register_buffer("vv", f64(vv))
        self.register_buffer("values", f64(a.values))
        m, d = v.shape
        self.vv_max = float(vv.max()) if m else 0.0
        self.n_cand = min(m, 2 * self.k + EXTRA_CANDIDATES)
        self.expanded = (self.metric == "euclidean" or (self.metric == "minkowski"
                                                        and self.p == 2.0)) and self.n_cand < m
        self.slack = ERROR_BOUND * (d + 4) * EPS
        self.root_slack = 1.0 + 8.0 * EPS
        self.step = _chunk_rows(m, d)
        self.gemm_step = _chunk_rows(m, 1)

    def forward(self, xs: list[Tensor]) -> Tensor:
        if not torch.jit.is_scripting():
            if self.cpu_kernel and xs[0].device.type == "cpu":
                out = self._on_cpu(xs[0])
                if out is not None:
                    return out
        near, idx = self._nearest(xs[0].to(torch.float64))
        n = idx.shape[0]
        if self.distance:  # neighbors._base._get_weights
            w = 1.0 / near
            inf = torch.isinf(w)
            w = torch.where(inf.any(dim=1, keepdim=True), inf.to(torch.float64), w)
        else:
            w = torch.ones_like(near)
        vals = self.values.index_select(0, idx.reshape(-1)).reshape(n, self.k, -1)
        out = torch.zeros((n, vals.shape[2]), dtype=torch.float64, device=near.device)
        for i in range(self.k):  # neighbour order, as sklearn accumulates
            out = out + w[:, i : i + 1] * vals[:, i, :]
        if self.normalize:
            total = out.sum(dim=1, keepdim=True)
            return out / torch.where(total == 0.0, torch.ones_like(total), total)
        return out / w.sum(dim=1, keepdim=True)

    @torch.jit.unused
    def _on_cpu(self, x: Tensor) -> Tensor | None:
        """The kernels' answer, or None where they leave the metric to this module."""
        knn = _knn_kernels()
        run = knn.runner(self._attrs, torch.get_num_threads()) if knn is not None else None
        if run is None:
            return None
        rows = x.detach().to(torch.float64).contiguous().numpy()
        return torch.from_numpy(np.ascontiguousarray(run(rows)))

    def _reduce(self, d: Tensor) -> Tensor:
        """Per-pair differences (rows, m, d) -> distances, as the reference."""
        if self.metric == "euclidean":
            return torch.sqrt((d * d).sum(dim=2))
        if self.metric == "manhattan":
            return d.abs().sum(dim=2)
        if self.metric == "chebyshev":
            return d.abs().max(dim=2)[0]
        return torch.pow(torch.pow(d.abs(), self.p).sum(dim=2), 1.0 / self.p)

    def _distances(self, x: Tensor) -> Tensor:
        """Every row's distance to every vector, the specification's way."""
        v = self.vectors
        if self.metric == "cosine":
            return torch.clamp(1.0 - _l2_rows(x) @ _l2_rows(v).T, 0.0, 2.0)
        # torch.cdist reduces each pair's differences as _reduce does, without the (rows, m,
        # d) temporary (its matrix-product form for euclidean distances is not taken)
        p = self.p
        if self.metric == "euclidean":
            p = 2.0
        elif self.metric == "manhattan":
            p = 1.0
        elif self.metric == "chebyshev":
            p = float("inf")
        return torch.cdist(x, v, p=p, compute_mode="donot_use_mm_for_euclid_dist")

    def _smallest(self, dist: Tensor) -> Tensor:
        """A stable sort's first k columns, by the k-th value (ir.semantics.neighbours.smallest)."""
        n, m, k = dist.shape[0], dist.shape[1], self.k
        if k >= m or n == 0:
            return torch.sort(dist, dim=1, stable=True)[1][:, :k]
        kth = torch.kthvalue(dist, k, dim=1, keepdim=True)[0]
        if bool(torch.isnan(kth).any()):
            return torch.sort(dist, dim=1, stable=True)[1][:, :k]
        less, tie = dist < kth, dist == kth
        room = k - less.sum(dim=1, keepdim=True)
        take = less | (tie & (torch.cumsum(tie.to(torch.int64), dim=1) <= room))
        cols = torch.nonzero(take)[:, 1].reshape(n, k)  # row-major: ascending within a row
        order = torch.sort(dist.gather(1, cols), dim=1, stable=True)[1]
        return cols.gather(1, order)

    def _nearest(self, x: Tensor) -> tuple[Tensor, Tensor]:
        if not self.expanded:
            dist = self._distances(x)
            idx = self._smallest(dist)
            return dist.gather(1, idx), idx
        v, k = self.vectors, self.k
        nears: list[Tensor] = [x.new_zeros((0, k))]
        idxs: list[Tensor] = [torch.zeros((0, k), dtype=torch.int64, device=x.device)]
        for s in range(0, x.shape[0], self.gemm_step):
            xb = x[s : s + self.gemm_step]
            xx = (xb * xb).sum(dim=1)
            approx = -2.0 * (xb @ v.T) + xx.unsqueeze(1) + self.vv.unsqueeze(0)
            cand = torch.topk(approx, self.n_cand, dim=1, largest=False, sorted=False)[1]
            bound = approx.gather(1, cand).max(dim=1)[0]
            cand = torch.sort(cand, dim=1)[0]  # index order: the stable sort breaks ties by it
            cv = v.index_select(0, cand.reshape(-1)).reshape(cand.shape[0], self.n_cand, -1)
            srt, order = torch.sort(self._reduce(xb.unsqueeze(1) - cv), dim=1, stable=True)
            near, nidx = srt[:, :k], cand.gather(1, order[:, :k])
            # as the reference: no non-candidate can be as near as the k-th
            margin = self.slack * (xx + self.vv_max)
            safe = (bound - margin) > near[:, k - 1] * near[:, k - 1] * self.root_slack
            safe = safe & torch.isfinite(approx).all(dim=1)
            if not bool(safe.all()):
                redo = torch.nonzero(~safe)[:, 0]
                dist = self._distances(xb.index_select(0, redo))
                ridx = self._smallest(dist)
                near = near.index_copy(0, redo, dist.gather(1, ridx))
                nidx = nidx.index_copy(0, redo, ridx)
            nears.append(near)
            idxs.append(nidx)
        return torch.cat(nears, dim=0), torch.cat(idxs, dim=0)


@lowering(Op.OVR_DECISION)
def lower_ovr_decision(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(OvrDecision(int(node.attrs.n_classes)))


@lowering(Op.KERNEL)
def lower_kernel(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(Kernel(node))


@lowering(Op.SVM_PROBA)
def lower_svm_proba(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(SvmProba(node))


@lowering(Op.KNN)
def lower_knn(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(Knn(node, cpu_kernel=bool(options.fused_kernels)))


def _knn_kernels():  # type: ignore[no-untyped-def]
    """``peregrine.kernels.knn``, or None without llvmlite (the native extra)."""
    try:
        from peregrine.kernels import knn
    except ImportError:
        return None
    return knn
