"""Tabular data in and out of the CLI: CSV (pandas) and Parquet (pyarrow), read in chunks so memory
stays bounded by the chunk size rather than the file size, and checked cell by cell so a bad value
is reported with its row and column instead of a pandas traceback."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from peregrine.cli._common import CLIError, check_input_file, require
from peregrine.errors import InputError

PARQUET_EXTENSIONS = (".parquet", ".pq", ".parq")


def data_format(path: str) -> str:
    """'parquet' or 'csv', from the extension or, failing that, Parquet's 'PAR1' magic."""
    if path.lower().endswith(PARQUET_EXTENSIONS):
        return "parquet"
    if os.path.isfile(path):
        with open(path, "rb") as f:
            if f.read(4) == b"PAR1":
                return "parquet"
    return "csv"


@dataclass(frozen=True)
class Schema:
    """What the model reads: column names (if it has them), width, categorical columns."""

    n_features: int
    feature_names: tuple[str, ...] | None = None
    category_maps: dict[int, tuple[Any, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, spec: Any) -> Schema:
        return cls(spec.n_features, spec.feature_names, dict(spec.category_maps))


@dataclass
class DataReader:
    """Chunked reader. ``chunks()`` yields (first row number, DataFrame); row numbers count data
    rows from 1, not counting the header."""

    path: str
    chunk_rows: int = 65536
    header: bool = True
    format: str = field(init=False)

    def __post_init__(self) -> None:
        check_input_file(self.path, "data file")
        self.format = data_format(self.path)

    @property
    def total_rows(self) -> int | None:
        if self.format != "parquet":
            return None  # unknown without reading the whole file
        return int(self._parquet_file().metadata.num_rows)

    def chunks(self) -> Iterator[tuple[int, Any]]:
        reader = self._parquet_chunks() if self.format == "parquet" else self._csv_chunks()
        for start, df in reader:
            if len(df):  # a header-only CSV still yields one empty frame; nothing to score
                yield start, df

    def _parquet_file(self) -> Any:
        pq = require("pyarrow.parquet", "reading Parquet files")
        try:
            return pq.ParquetFile(self.path)
        except Exception as exc:  # pyarrow raises ArrowInvalid/OSError for non-Parquet bytes
            raise InputError(
                f"{self.path}: not a readable Parquet file ({_one_line(exc)})"
            ) from exc

    def _parquet_chunks(self) -> Iterator[tuple[int, Any]]:
        pf = self._parquet_file()
        start = 1
        try:
            for batch in pf.iter_batches(batch_size=self.chunk_rows):
                df = batch.to_pandas()
                yield start, df
                start += len(df)
        except InputError:
            raise
        except Exception as exc:
            if isinstance(exc, (GeneratorExit, KeyboardInterrupt)):
                raise
            raise InputError(
                f"{self.path}: cannot read Parquet data near row {start} ({_one_line(exc)})"
            ) from exc

    def _csv_chunks(self) -> Iterator[tuple[int, Any]]:
        import pandas as pd

        start = 1
        try:
            reader = pd.read_csv(
                self.path, chunksize=self.chunk_rows, header=0 if self.header else None
            )
            with reader:
                for df in reader:
                    yield start, df
                    start += len(df)
        except pd.errors.EmptyDataError:
            raise InputError(f"{self.path}: the file is empty (no header, no rows)") from None
        except pd.errors.ParserError as exc:
            # pandas' message names the line ("Expected 4 fields in line 7, saw 5")
            raise InputError(f"{self.path}: malformed CSV: {_one_line(exc)}") from exc
        except UnicodeDecodeError as exc:
            raise InputError(
                f"{self.path}: not a text CSV file ({exc.reason} at byte {exc.start})"
            ) from exc

    def read_all(self, schema: Schema, *, ignore_extra: bool = False) -> Any:
        """The whole file as one model-ready DataFrame (for samples and benchmarks)."""
        import pandas as pd

        frames = [
            to_model_frame(
                df, start, schema, self.path, ignore_extra=ignore_extra, header=self.header
            )
            for start, df in self.chunks()
        ]
        if not frames:
            raise InputError(f"{self.path}: has a header but no data rows")
        return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


def to_model_frame(
    df: Any,
    start_row: int,
    schema: Schema,
    path: str,
    *,
    ignore_extra: bool = False,
    header: bool = True,
) -> Any:
    """Select and order the model's columns and make every cell numeric (or categorical, for the
    model's category columns). A cell that is neither is an InputError naming row and column."""
    import pandas as pd

    df = _select_columns(df, schema, path, ignore_extra, header)
    out = {}
    for j, name in enumerate(df.columns):
        col = df.iloc[:, j]
        if j in schema.category_maps:
            out[name] = _as_category(col, schema.category_maps[j])
            continue
        if col.dtype.kind in "fiub" or isinstance(col.dtype, pd.CategoricalDtype):
            out[name] = col
            continue
        num = pd.to_numeric(col, errors="coerce")
        bad = (num.isna() & col.notna()).to_numpy()
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            row = start_row + i
            where = f"row {row}" + (f" (line {row + 1})" if header and path_is_csv(path) else "")
            raise InputError(
                f"{path}: {where}, column {name!r}: cannot parse {col.iloc[i]!r} as a number"
            )
        out[name] = num.astype(np.float64)
    return pd.DataFrame(out, index=df.index, columns=list(df.columns))


def path_is_csv(path: str) -> bool:
    return data_format(path) == "csv"


def _select_columns(df: Any, schema: Schema, path: str, ignore_extra: bool, header: bool) -> Any:
    names = schema.feature_names
    if names is None or not header:
        # No names to match by: columns are taken by position, so the count must match.
        if df.shape[1] != schema.n_features:
            raise InputError(
                f"{path}: has {df.shape[1]} columns, but the model expects "
                f"{schema.n_features} features"
            )
        if names is not None:
            df = df.set_axis(list(names), axis=1)
        return df
    cols = [str(c) for c in df.columns]
    df = df.set_axis(cols, axis=1)
    dupes = sorted({c for c in cols if cols.count(c) > 1})
    if dupes:
        raise InputError(f"{path}: duplicate column names {dupes}")
    missing = [c for c in names if c not in set(cols)]
    extra = [c for c in cols if c not in set(names)]
    if missing or (extra and not ignore_extra):
        parts = []
        if missing:
            parts.append(f"missing columns {_clip(missing)}")
        if extra and not ignore_extra:
            parts.append(
                f"unknown columns {_clip(extra)} (pass --ignore-extra-columns to drop them)"
            )
        raise InputError(f"{path}: columns do not match the model's features: " + "; ".join(parts))
    return df[list(names)]


def _as_category(col: Any, categories: tuple[Any, ...]) -> Any:
    """Text cells become the model's categories by their printed form ('3' matches 3), so a CSV
    round trip of an integer- or string-coded category column lands on the fit-time codes."""
    import pandas as pd

    # a null category (a scikit-learn pipeline's string vocabulary holds NaN and None) is not
    # text: a cell matching its printed form ('nan', 'None') stays that string
    by_text = {str(c): c for c in categories if not _is_null(c)}
    values = [v if pd.isna(v) else by_text.get(str(v), v) for v in col.to_numpy(dtype=object)]
    if any(_is_null(c) for c in categories):
        # a pandas Categorical refuses null categories; the runtime looks an object column up
        # against the map itself, and an empty cell (NaN, as scikit-learn reads the file)
        # finds the NaN category, an unseen string none
        return pd.Series(values, index=col.index, dtype=object)
    return pd.Series(pd.Categorical(values, categories=list(categories)), index=col.index)


def _is_null(c: Any) -> bool:
    return c is None or (isinstance(c, (float, np.floating)) and c != c)


def _clip(items: list[str], n: int = 8) -> str:
    return str(items[:n])[:-1] + (f", ... {len(items) - n} more]" if len(items) > n else "]")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# ------------------------------------------------------------------------------ writing --


def output_frame(method: str, values: np.ndarray, classes: np.ndarray | None) -> Any:
    """Predictions as a DataFrame: one column for 1-D outputs; for 2-D outputs one column per
    class (``proba_<label>``, ``log_proba_<label>``) or per output (``<method>_<j>``)."""
    import pandas as pd

    if isinstance(values, pd.DataFrame):  # set_output(transform="pandas"): its own names
        return values.reset_index(drop=True)
    if values.ndim == 1:
        return pd.DataFrame({method: values})
    width = values.shape[1]
    if method == "predict_proba" and classes is not None and len(classes) == width:
        names = [f"proba_{c}" for c in classes]
    elif method == "predict_log_proba" and classes is not None and len(classes) == width:
        names = [f"log_proba_{c}" for c in classes]
    else:
        names = [f"{method}_{j}" for j in range(width)]
    return pd.DataFrame(values, columns=names)


class TableWriter:
    """Appends frames to a CSV or Parquet file (by the extension), or CSV on stdout for None."""

    def __init__(self, path: str | None, target: str | None = None) -> None:
        self.path = path
        self.target = target or path  # the temp file actually written
        self.format = "csv" if path is None else data_format_for_output(path)
        self._parquet = None
        self._file: Any = None
        self._first = True

    def write(self, df: Any) -> None:
        if self.format == "parquet":
            self._write_parquet(df)
            return
        if self._file is None:
            self._file = (
                sys.stdout
                if self.target is None
                else open(  # noqa: SIM115
                    self.target, "w", newline="", encoding="utf-8"
                )
            )
        df.to_csv(self._file, header=self._first, index=False)
        self._first = False

    def _write_parquet(self, df: Any) -> None:
        pa = require("pyarrow", "writing Parquet files")
        pq = require("pyarrow.parquet", "writing Parquet files")
        if self._parquet is None:
            table = pa.Table.from_pandas(df, preserve_index=False)
            self._parquet = pq.ParquetWriter(self.target, table.schema)
        else:
            table = pa.Table.from_pandas(df, schema=self._parquet.schema, preserve_index=False)
        self._parquet.write_table(table)

    def close(self) -> None:
        if self._parquet is not None:
            self._parquet.close()
        if self._file is not None and self._file is not sys.stdout:
            self._file.close()
        elif self._file is sys.stdout:
            with contextlib.suppress(BrokenPipeError):
                sys.stdout.flush()


def data_format_for_output(path: str) -> str:
    lower = path.lower()
    if lower.endswith(PARQUET_EXTENSIONS):
        return "parquet"
    if lower.endswith((".csv", ".txt")) or "." not in os.path.basename(lower):
        return "csv"
    raise CLIError(f"cannot tell the output format of {path}; use a .csv or .parquet extension")
