"""The sparse linear path (docs/sparse.md): placeholder, filled in the next step."""

from __future__ import annotations

from typing import Any


def linear_call(model: Any, name: str, csr: Any) -> Any:
    return None
