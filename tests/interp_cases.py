"""Tables and rows that test a lowering of INTERP (``np.interp`` per column) bit for bit: the
ONNX export's (tests/test_export_interp.py) and the TVM kernel's (tests/test_tvm_columns.py)."""

from __future__ import annotations

import numpy as np

TABLES = [
    ([0.0, 1.0, 2.0, 5.0], [0.0, 0.5, 0.5, 1.0]),  # a flat segment
    ([-1.0, 0.0, 0.0, 0.0, 3.0], [1.0, 2.0, 3.0, 4.0, 4.5]),  # repeated xp
    ([0.25], [7.0]),  # one point
    ([0.0, 1e-300, 1.0, 1e300], [1.0, 1.0, -2.0, 3.0]),
    ([-3.0, 3.0], [5.0, 5.0]),  # flat everywhere: inf x takes NumPy's fallbacks
]


def rows(tables, rng: np.random.Generator, n: int, hits: list[float]) -> np.ndarray:
    """(n, len(tables)): per column its table's entries, their neighbours, +-inf, NaN, +-0.0,
    1e308 and values around the table; some rows all NaN, then row 0 = ``hits``."""
    cols = []
    for xp, _ in tables:
        xp = np.asarray(xp)
        special = np.concatenate([xp, np.nextafter(xp, -np.inf), np.nextafter(xp, np.inf),
                                  [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e308]])
        pool = np.concatenate([special, rng.uniform(xp.min() - 2, xp.max() + 2, 200)])
        cols.append(rng.choice(pool, n))
    X = np.stack(cols, axis=1)
    X[:len(tables[0][0]) * 3 + 6] = np.nan  # whole NaN rows too
    X[0, :] = hits  # exact hits
    return X


def assert_numpys(got: np.ndarray, X: np.ndarray, tables, left, right) -> None:
    """Each column of ``got`` is np.interp of that column of ``X``, bit for bit."""
    for j, (xp, fp) in enumerate(tables):
        with np.errstate(invalid="ignore"):
            want = np.interp(X[:, j], xp, fp, left=left[j], right=right[j])
        np.testing.assert_array_equal(got[:, j], want, err_msg=f"column {j}")
