"""Error bounds for results that pass through a BLAS/oneDNN matrix product.

Peregrine promises bit-identity only where its own code fixes the arithmetic (native kernels,
the vector exp, the NumPy rules on one machine). A GEMM run by MKL, oneDNN or OpenBLAS sums each
dot product in an order the library picks from the CPU vendor and ISA, the operand shapes (so
the rows in a block), the thread count and the alignment. Any order of summation of
``sum_i a_i * b_i`` (with or without FMA) is within ``gamma_k * sum_i |a_i * b_i|`` of the exact
sum, ``gamma_k = k*u / (1 - k*u)``, ``u`` the unit roundoff (Higham, *Accuracy and Stability of
Numerical Algorithms*, 2nd ed., section 3.1). Two such results differ by at most twice that.

Tests comparing two evaluations of the same program that differ only in such a call assert this
bound (propagated through the row-wise ops that follow it) instead of bit-identity, and say so.
"""

import numpy as np


def gamma(k: int, dtype=np.float64) -> float:
    u = np.finfo(dtype).eps / 2
    return k * u / (1 - k * u)


def gemm_gap(a: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """Largest difference, elementwise, between two BLAS evaluations of ``a @ w (+ bias)``
    (a bias added inside the GEMM, as ``addmm`` does, is one more term of each sum)."""
    mags = np.abs(a) @ np.abs(w)
    k = a.shape[1]
    if bias is not None:
        mags = mags + np.abs(bias)
        k += 1
    # the product of the magnitudes is itself computed in floating point: one more gamma_k
    return 2 * gamma(k + 1) * mags


def ulps(x: np.ndarray, n: float = 1) -> np.ndarray:
    """``n`` units in the last place of each value: rounding of the row-wise ops after the
    product, whose inputs differ by the GEMM gap."""
    return n * np.spacing(np.abs(x).astype(np.float64))


def assert_within(got: np.ndarray, want: np.ndarray, bound: np.ndarray, what: str) -> None:
    gap = np.abs(got.astype(np.float64) - want.astype(np.float64))
    bad = gap > bound
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, gap - bound, -np.inf)), gap.shape)
        raise AssertionError(f"{what}: {int(bad.sum())} values outside the BLAS bound; worst at "
                             f"{i}: {got[i]!r} vs {want[i]!r}, gap {gap[i]:.3g} > bound "
                             f"{bound[i]:.3g}")
