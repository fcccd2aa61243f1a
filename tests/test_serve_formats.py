"""JSON bodies of `peregrine serve`: the fast parser and writer give exactly what the standard
library gives (the same float64 values in, the same numbers out), and what only the standard
library reads still reads."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from peregrine.deploy import formats

orjson = pytest.importorskip("orjson")


def _edge_numbers() -> list[str]:
    """Number texts where a parser's rounding goes wrong: shortest and 17/25-digit forms of
    random doubles, subnormals, the halfway points between adjacent doubles, long mantissas."""
    from decimal import Decimal, getcontext

    getcontext().prec = 60
    rng = np.random.default_rng(7)
    doubles = rng.integers(0, 2**63 - 2**52, size=3000, dtype=np.int64).view(np.float64)
    texts = []
    for d in doubles.tolist():
        texts += [repr(d), repr(-d), f"{d:.17g}", f"{d:.25e}"]
        upper = float(np.nextafter(d, np.inf))
        if np.isfinite(upper):
            texts.append(format((Decimal(d) + Decimal(upper)) / 2, "e"))
    for _ in range(3000):
        digits = "".join(str(int(x)) for x in rng.integers(0, 10, size=int(rng.integers(2, 40))))
        texts.append(f"{digits[0]}.{digits[1:]}e{int(rng.integers(-330, 300))}")
    texts += [
        "2.2250738585072011e-308", "2.2250738585072012e-308", "4.9406564584124654e-324",
        "2.4703282292062327e-324", "2.4703282292062328e-324", "1.7976931348623157e308",
        "0.1", "1e23", "9007199254740993", "9007199254740993.0", "0." + "0" * 300 + "1",
        "-0.0", "-0", "0e0",
    ]  # fmt: skip
    return texts


def _bits(a: np.ndarray) -> list[int]:
    return a.astype(np.float64).view(np.uint64).tolist()


def test_json_rows_parse_to_the_same_doubles_as_json_loads():
    texts = _edge_numbers()
    body = ('{"rows": [[' + ", ".join(texts) + "]]}").encode()
    orjson.loads(body)  # the fast parser reads it all itself: no fallback hides a difference
    payload = formats.decode(body, formats.JSON, None)
    expected = np.array(json.loads(body)["rows"], dtype=np.float64)
    assert payload.data.dtype == np.float64 and payload.data.shape == (1, len(texts))
    assert _bits(payload.data) == _bits(expected)  # bit for bit, signed zeros included


@pytest.mark.parametrize(
    "text",
    [
        '{"rows": [[NaN, 1.5, Infinity, -Infinity]]}',  # json.loads's extensions
        '{"rows": [[1e400, 2.0, 3.0, 4.0]]}',  # overflows to inf in json.loads
        '{"rows": [[123456789012345678901234567890, 0, 1, 2]]}',  # beyond 64 bits
    ],
)
def test_what_only_json_loads_reads_still_reads(text):
    payload = formats.decode(text.encode(), formats.JSON, None)
    expected = np.array(json.loads(text)["rows"], dtype=np.float64)
    np.testing.assert_array_equal(payload.data, expected)


def test_utf16_bodies_and_malformed_json():
    text = '{"rows": [[1.0, 2.5]]}'
    payload = formats.decode(text.encode("utf-16"), formats.JSON, None)
    assert payload.data.tolist() == [[1.0, 2.5]]
    with pytest.raises(formats.BodyError, match="not valid JSON.*char"):
        formats.decode(b'{"rows": [[1.0, 2.5]', formats.JSON, None)


@pytest.mark.parametrize(
    "out",
    [
        np.array([[0.3, 0.7], [1e-5, 1 - 1e-5]], dtype=np.float32),
        np.array([1.5, np.nan, np.inf, -np.inf, -0.0, 5e-324, 1e16, 0.1]),
        np.arange(5, dtype=np.int64),
        np.array([True, False]),
        np.array(["yes", "no"], dtype=object),
        np.ones((3, 4))[:, ::2],  # not contiguous
    ],
)
def test_json_answers_read_back_as_the_standard_writer_s(out, monkeypatch):
    classes = np.array([0, 1]) if out.ndim == 2 else None
    fast = formats.encode_json(out, classes)
    monkeypatch.setattr(formats, "orjson", None)
    plain = formats.encode_json(out, classes)
    a, b = json.loads(fast), json.loads(plain)
    assert a.keys() == b.keys() and a.get("classes") == b.get("classes")
    flat_a, flat_b = (
        np.array(a["predictions"], dtype=object),
        np.array(b["predictions"], dtype=object),
    )
    assert flat_a.shape == flat_b.shape
    for x, y in zip(flat_a.ravel().tolist(), flat_b.ravel().tolist()):
        assert type(x) is type(y)
        if isinstance(x, float):
            assert struct.pack("<d", x) == struct.pack("<d", y)
        else:
            assert x == y  # null for NaN/inf in both
