"""Torch lowerings of the transformers-area ops (INTERP, QUANTILE, POWER, DIGITIZE, RANGE_CHECK,
BSPLINE, KNN_IMPUTE), one per Op, mirroring their NumPy rules in ``ir/semantics``
operation for operation. Per-column tables of different lengths are padded to one
(columns, width) tensor so a batched ``torch.searchsorted`` serves every column; the padding
never decides a result (lengths are kept beside the table). Every module is scriptable."""

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from peregrine.backends.torch.ops import Lowered, f64, lowering
from peregrine.ir import Node, Op
from peregrine.ir.semantics.transformers import QUANTILE_BOUNDS, quantile_clip
from peregrine.options import CompileOptions


def _padded(tables: Any, fill: float, min_width: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(columns, width) float64 table of 1-D arrays padded with ``fill``, and their lengths."""
    arrays = [np.asarray(t, dtype=np.float64).reshape(-1) for t in tables]
    width = max([len(a) for a in arrays] + [min_width])
    out = np.full((len(arrays), width), fill)
    for i, a in enumerate(arrays):
        out[i, : len(a)] = a
    return out, np.asarray([len(a) for a in arrays], dtype=np.int64)


def _own_dtype(x: Tensor) -> torch.dtype:
    return torch.float32 if x.dtype == torch.float32 else torch.float64


class Interp(nn.Module):
    """np.interp per column (numpy/_core/src/multiarray/compiled_base.c ``arr_interp``): i is
    the last index with xp[i] <= x (``searchsorted(side='right') - 1``, which is where numpy's
    guessed binary search lands on a non-decreasing table), then numpy's branches in order."""

    def __init__(self, xp: Any, fp: Any, left: Any, right: Any) -> None:
        super().__init__()
        xpt, lengths = _padded(xp, np.inf, 2)  # +inf padding: no finite x passes it
        fpt, _ = _padded(fp, 0.0, 2)
        rows = np.arange(len(lengths))
        self.register_buffer("xp", f64(xpt))
        self.register_buffer("fp", f64(fpt))
        self.register_buffer("last", torch.from_numpy(lengths - 1).unsqueeze(1))
        self.register_buffer("xp_last", f64(xpt[rows, lengths - 1]).unsqueeze(1))
        self.register_buffer("fp_first", f64(fpt[:, 0]).unsqueeze(1))
        self.register_buffer("single", torch.from_numpy(lengths == 1).unsqueeze(1))
        self.register_buffer("left", f64(np.asarray(left, dtype=np.float64)).unsqueeze(1))
        self.register_buffer("right", f64(np.asarray(right, dtype=np.float64)).unsqueeze(1))
        self.width = xpt.shape[1]
        # every table xp = 0..n-1 (CatBoost's CTR lookups): an integer x in [0, n) is read by
        # position, fp[x], which np.interp returns there exactly
        self.positional = all(
            len(t) >= 2 and np.array_equal(np.asarray(t, dtype=np.float64), np.arange(len(t)))
            for t in xp)

    def columns(self, x: Tensor) -> Tensor:
        """x: (columns, n) float64 -> (columns, n)."""
        if not self.positional:
            return self.searched(x)
        i = x.to(torch.int64)  # NaN and out-of-range values give junk, caught by hit
        hit = (i.to(x.dtype) == x) & (i >= 0) & (i <= self.last)
        got = self.fp.gather(1, torch.where(hit, i, torch.zeros_like(i)))
        if bool(hit.all()):
            return got
        return torch.where(hit, got, self.searched(x))

    def searched(self, x: Tensor) -> Tensor:
        """np.interp's search and branches for every x."""
        i = torch.searchsorted(self.xp, x.contiguous(), right=True) - 1
        at = i.clamp(0, self.width - 1)
        lo = i.clamp(0, self.width - 2)
        x0, x1 = self.xp.gather(1, lo), self.xp.gather(1, lo + 1)
        f0, f1 = self.fp.gather(1, lo), self.fp.gather(1, lo + 1)
        slope = (f1 - f0) / (x1 - x0)
        res = slope * (x - x0) + f0
        res = torch.where(torch.isnan(res), slope * (x - x1) + f1, res)  # numpy's retry
        res = torch.where(torch.isnan(res) & (f0 == f1), f0, res)
        hit = (i == self.last) | (self.xp.gather(1, at) == x)
        res = torch.where(hit, self.fp.gather(1, at), res)
        res = torch.where(i < 0, self.left.expand_as(res), res)
        res = torch.where(x > self.xp_last, self.right.expand_as(res), res)
        # NaN: NaN, except a one-point table, where numpy's comparisons fall through to fp[0]
        nan = torch.where(self.single, self.fp_first, torch.full_like(self.fp_first, np.nan))
        return torch.where(torch.isnan(x), nan.expand_as(res), res)

    def forward(self, xs: list[Tensor]) -> Tensor:
        return self.columns(xs[0].to(torch.float64).t()).t()


@lowering(Op.INTERP)
def lower_interp(node: Node, options: CompileOptions) -> Lowered:
    a = node.attrs
    return Lowered(Interp(a.xp, a.fp, a.left, a.right))


class Quantile(nn.Module):
    """QuantileTransformer: the mean of the ascending and the descending interpolation (repeated
    quantiles), the bounds, then ndtri and the clip for normal output (see Op.QUANTILE)."""

    def __init__(self, quantiles: Any, references: Any, output: str) -> None:
        super().__init__()
        q = [np.asarray(c, dtype=np.float64) for c in quantiles]
        r = np.asarray(references, dtype=np.float64)
        ones = np.ones(len(q))
        self.up = Interp(q, [r] * len(q), ones * r[0], ones * r[-1])
        self.down = Interp([-c[::-1] for c in q], [-r[::-1]] * len(q), -ones * r[-1],
                           -ones * r[0])
        self.register_buffer("q_first", f64([c[0] for c in q]))
        self.register_buffer("q_last", f64([c[-1] for c in q]))
        self.normal = output == "normal"
        self.clip_low, self.clip_high = quantile_clip() if self.normal else (0.0, 1.0)
        self.bound = QUANTILE_BOUNDS  # a module attribute: TorchScript cannot read globals

    def forward(self, xs: list[Tensor]) -> Tensor:
        x = xs[0]
        x = x.to(_own_dtype(x))
        col = x.to(torch.float64).t()
        u = (0.5 * (self.up.columns(col) - self.down.columns(-col))).t().to(x.dtype)
        if self.normal:  # x -+ 1e-7 in x's own dtype, as NumPy does for a float32 array
            lower = (x - self.bound) < self.q_first
            upper = (x + self.bound) > self.q_last
        else:
            lower = x == self.q_first
            upper = x == self.q_last
        u = torch.where(upper, torch.ones_like(u), u)
        u = torch.where(lower, torch.zeros_like(u), u)
        if not self.normal:
            return u
        z = torch.special.ndtri(u.to(torch.float64))
        return torch.clamp(z, self.clip_low, self.clip_high)  # NaN stays NaN


@lowering(Op.QUANTILE)
def lower_quantile(node: Node, options: CompileOptions) -> Lowered:
    a = node.attrs
    return Lowered(Quantile(a.quantiles, a.references, a.output))


class Power(nn.Module):
    """PowerTransformer's per-column formulas; each column's branch (a lambda near 0 or 2) is
    decided once here, as scipy decides it per call from the scalar lambda."""

    def __init__(self, method: str, lambdas: Any) -> None:
        super().__init__()
        lam = np.asarray(lambdas, dtype=np.float64).reshape(-1)
        eps = np.finfo(np.float64).eps
        self.yeo = method == "yeo-johnson"
        self.register_buffer("lam", f64(lam))
        self.register_buffer("two", f64(2 - lam))
        zero = np.abs(lam) < (eps if self.yeo else 1e-19)
        self.register_buffer("zero", torch.from_numpy(zero))
        self.register_buffer("near_two", torch.from_numpy(~(np.abs(lam - 2) > eps)))
        self.register_buffer("sign", f64(np.sign(lam)))
        self.register_buffer("log_abs", f64(np.log(np.abs(np.where(zero, 1.0, lam)))))

    def forward(self, xs: list[Tensor]) -> Tensor:
        x0 = xs[0]
        x = x0.to(torch.float64)
        if self.yeo:  # scipy.stats._morestats._yeojohnson_transform
            lp = torch.log1p(x)
            pos = torch.where(self.zero, lp, torch.expm1(self.lam * lp) / self.lam)
            ln = torch.log1p(-x)
            neg = torch.where(self.near_two, -ln, -torch.expm1(self.two * ln) / self.two)
            out = torch.where(x >= 0, pos, neg)
        else:  # scipy.special.boxcox
            lx = self.lam * torch.log(x)
            big = self.sign * torch.exp(lx - self.log_abs) - 1.0 / self.lam
            out = torch.where(lx < 709.78, torch.expm1(lx) / self.lam, big)
            out = torch.where(self.zero, torch.log(x), out)
        return out.to(_own_dtype(x0))


@lowering(Op.POWER)
def lower_power(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(Power(node.attrs.method, node.attrs.lambdas))


class Digitize(nn.Module):
    """np.searchsorted(edges, x, side='right') per column: a count capped at the column's own
    length (the +inf padding would count for x = +inf), NaN -> length as NumPy sorts it last."""

    def __init__(self, edges: Any) -> None:
        super().__init__()
        table, lengths = _padded(edges, np.inf)
        self.register_buffer("edges", f64(table))
        self.register_buffer("lengths", torch.from_numpy(lengths).unsqueeze(1))

    def forward(self, xs: list[Tensor]) -> Tensor:
        x = xs[0].to(torch.float64).t().contiguous()
        count = torch.minimum(torch.searchsorted(self.edges, x, right=True), self.lengths)
        count = torch.where(torch.isnan(x), self.lengths.expand_as(count), count)
        return count.t().to(torch.float64)


@lowering(Op.DIGITIZE)
def lower_digitize(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(Digitize(node.attrs.edges))


class RangeCheck(nn.Module):
    def __init__(self, low: Any, high: Any) -> None:
        super().__init__()
        self.register_buffer("low", f64(low))
        self.register_buffer("high", f64(high))

    def forward(self, xs: list[Tensor]) -> Tensor:
        x = xs[0].to(torch.float64)
        return ((x < self.low) | (x > self.high)).to(torch.float64)


@lowering(Op.RANGE_CHECK)
def lower_range_check(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(RangeCheck(node.attrs.low, node.attrs.high))


class BSpline(nn.Module):
    """SplineTransformer per column: scipy's interval search and de Boor recursion
    (``_deBoor_D``), the basis scattered to its columns and mapped by the 0/1 coefficient
    matrix, then sklearn's extrapolation rules (see ``ir.semantics.transformers.bspline_column``)."""

    def __init__(self, node: Node) -> None:
        super().__init__()
        a = node.attrs
        knots = np.asarray([np.asarray(t, dtype=np.float64) for t in a.knots])
        k = int(a.degree)
        self.k = k
        self.n = knots.shape[1] - k - 1
        self.mode = str(a.extrapolation)
        self.register_buffer("knots", f64(knots))
        self.register_buffer("coef", f64(np.asarray(a.coef, dtype=np.float64)[: self.n]))
        for e in ("f_min", "f_max", "fp_min", "fp_max", "low", "high"):
            self.register_buffer(e, f64(np.asarray(getattr(a, e), dtype=np.float64)))
        s = self.coef.shape[1]
        cols = np.arange(s)[None, :]
        reach = np.asarray(a.reach, dtype=np.int64)[:, None]  # per column (see Op.BSPLINE)
        self.register_buffer("first", torch.from_numpy(cols < reach))
        self.register_buffer("last", torch.from_numpy(cols >= s - reach))

    def column(self, x: Tensor, j: int) -> Tensor:
        t = self.knots[j]
        k, n = self.k, self.n
        lo, hi = t[k], t[n]
        xe = x
        if self.mode == "periodic":
            if bool(hi - lo > 0):
                xe = lo + torch.remainder(x - lo, hi - lo)
            else:
                xe = torch.zeros_like(x)
        safe = torch.where(torch.isnan(xe), lo, xe)
        ell = (torch.searchsorted(t, safe, right=True) - 1).clamp(k, n - 1)
        h: list[Tensor] = [torch.ones_like(safe)] + [torch.zeros_like(safe) for _ in range(k)]
        for j2 in range(1, k + 1):
            hh = [h[i] for i in range(j2)]
            h[0] = torch.zeros_like(safe)
            for m in range(1, j2 + 1):
                xb, xa = t[ell + m], t[ell + m - j2]
                same = xb == xa
                w = hh[m - 1] / (xb - xa)
                h[m - 1] = torch.where(same, h[m - 1], h[m - 1] + w * (xb - safe))
                h[m] = torch.where(same, torch.zeros_like(safe), w * (safe - xa))
        basis = torch.zeros((x.shape[0], n), dtype=torch.float64, device=x.device)
        for a in range(k + 1):
            basis = basis.scatter(1, (ell - k + a).unsqueeze(1), h[a].unsqueeze(1))
        out = basis @ self.coef
        if self.mode == "error":
            inside = ((lo <= x) & (x <= hi)).unsqueeze(1)
            out = torch.where(inside, out, torch.full_like(out, np.nan))
        elif self.mode == "constant" or self.mode == "linear":
            lo, hi = self.low[j], self.high[j]  # sklearn's xmin, xmax for this column
            inside = ((lo <= x) & (x <= hi)).unsqueeze(1)
            below, above = (x < lo).unsqueeze(1), (x > hi).unsqueeze(1)
            out = torch.where(inside, out, torch.zeros_like(out))
            f_min, f_max = self.f_min[j].unsqueeze(0), self.f_max[j].unsqueeze(0)
            if self.mode == "linear":
                f_min = f_min + (x - lo).unsqueeze(1) * self.fp_min[j].unsqueeze(0)
                f_max = f_max + (x - hi).unsqueeze(1) * self.fp_max[j].unsqueeze(0)
            out = torch.where(below & self.first[j], f_min.expand_as(out), out)
            out = torch.where(above & self.last[j], f_max.expand_as(out), out)
        return torch.where(torch.isnan(x).unsqueeze(1), torch.zeros_like(out), out)

    def forward(self, xs: list[Tensor]) -> Tensor:
        x = xs[0].to(torch.float64)
        return torch.cat([self.column(x[:, j], j) for j in range(x.shape[1])], dim=1)


@lowering(Op.BSPLINE)
def lower_bspline(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(BSpline(node))


class KnnImpute(nn.Module):
    """KNNImputer: nan_euclidean distances as ``reference.nan_euclidean``, then per filled
    column the k nearest donors by a stable sort of the distances (non-donors and NaN
    distances keyed +inf, weight 0), their weighted mean, the fill value where no donor has a
    distance (see Op.KNN_IMPUTE)."""

    def __init__(self, node: Node) -> None:
        super().__init__()
        a = node.attrs
        fit = np.asarray(a.fit_X, dtype=np.float64)
        miss = np.isnan(fit)
        fit0 = np.where(miss, 0.0, fit)
        self.register_buffer("fit0", f64(fit0))
        self.register_buffer("fit_sq", f64(fit0 * fit0))
        self.register_buffer("fit_norm", f64(np.einsum("ij,ij->i", fit0, fit0)))
        self.register_buffer("fit_missing", f64(miss))
        self.register_buffer("fit_present", f64(~miss))
        self.register_buffer("donor", torch.from_numpy(~miss))
        self.register_buffer("fill", f64(np.asarray(a.fill, dtype=np.float64)))
        self.columns = [int(c) for c in a.columns]
        self.register_buffer("cols", torch.tensor(self.columns, dtype=torch.int64))
        n_donors = (~miss).sum(axis=0)
        self.ks = [int(min(int(a.n_neighbors), n_donors[c])) for c in self.columns]
        self.uniform = a.weights == "uniform"

    def distances(self, x: Tensor) -> Tensor:
        mx = torch.isnan(x)
        x0 = torch.where(mx, torch.zeros_like(x), x)
        d = -2 * (x0 @ self.fit0.t())
        d = d + (x0 * x0).sum(dim=1, keepdim=True)
        d = d + self.fit_norm.unsqueeze(0)
        d = torch.clamp(d, min=0.0)
        d = d - (x0 * x0) @ self.fit_missing.t()
        d = d - mx.to(torch.float64) @ self.fit_sq.t()
        d = torch.clamp(d, min=0.0)
        present = (~mx).to(torch.float64) @ self.fit_present.t()
        d = torch.where(present == 0, torch.full_like(d, np.nan), d)
        d = d / torch.clamp(present, min=1.0) * float(x.shape[1])
        return torch.sqrt(d)

    def forward(self, xs: list[Tensor]) -> Tensor:
        # as the rule: only rows missing a listed column, and per column only the rows
        # missing it (a KNNImputer's rows are mostly complete: every row's sort of every
        # fitted row made this module 45x slower than scikit-learn's transform)
        x = xs[0].to(torch.float64)
        out = x.clone()
        if len(self.columns) == 0:
            return out
        rows = torch.nonzero(torch.isnan(x.index_select(1, self.cols)).any(dim=1))[:, 0]
        if rows.numel() == 0:
            return out
        xr = x.index_select(0, rows)
        dist = self.distances(xr)
        for i, c in enumerate(self.columns):
            k = self.ks[i]
            recv = torch.nonzero(torch.isnan(xr[:, c]))[:, 0]
            if recv.numel() == 0:
                continue
            sub = dist.index_select(0, recv)
            usable = self.donor[:, c].unsqueeze(0) & ~torch.isnan(sub)
            key = torch.where(usable, sub, torch.full_like(sub, np.inf))
            d, idx = torch.sort(key, dim=1, stable=True)
            d, idx = d[:, :k], idx[:, :k]
            if self.uniform:
                w = torch.where(torch.isinf(d), torch.zeros_like(d), torch.ones_like(d))
            else:
                w = 1.0 / d  # +inf key -> 0; zero distance -> inf: that row keeps only zeros
                zero = d == 0
                w = torch.where(zero.any(dim=1, keepdim=True), zero.to(torch.float64), w)
            values = self.fit0[:, c][idx]
            value = (values * w).sum(dim=1) / w.sum(dim=1)
            none = ~usable.any(dim=1)
            value = torch.where(none, self.fill[c].expand_as(value), value)
            out[rows.index_select(0, recv), c] = value
        return out


@lowering(Op.KNN_IMPUTE)
def lower_knn_impute(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(KnnImpute(node))
