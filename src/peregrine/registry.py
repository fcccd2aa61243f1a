"""Registries keyed by type. Registration sits next to the code it registers (a decorator);
``lookup`` walks the class's MRO so user subclasses of a supported estimator are found, and
asks the registry's ``guard`` whether such a subclass may use its parent's entry."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Entry(Generic[F]):
    key: type
    fn: F
    info: dict[str, Any] = field(default_factory=dict)


# guard(cls, registered): raises when ``cls`` must not use the entry of its parent ``registered``
Guard = Callable[[type, type], None]


class TypeRegistry(Generic[F]):
    def __init__(self, what: str, guard: Guard | None = None) -> None:
        self.what = what
        self.guard = guard
        self._table: dict[type, Entry[F]] = {}

    def register(self, *keys: type, **info: Any) -> Callable[[F], F]:
        def deco(fn: F) -> F:
            for key in keys:
                if key in self._table:
                    raise RuntimeError(f"{self.what}: {key!r} registered twice")
                self._table[key] = Entry(key, fn, dict(info))
            return fn

        return deco

    def exact(self, cls: type) -> Entry[F] | None:
        """The entry registered for ``cls`` itself (what ``lookup`` finds first)."""
        return self._table.get(cls)

    def lookup(self, cls: type) -> Entry[F] | None:
        for base in cls.__mro__:
            entry = self._table.get(base)
            if entry is not None:
                if base is not cls and self.guard is not None:
                    self.guard(cls, base)
                return entry
        return None

    def __iter__(self) -> Iterator[Entry[F]]:
        return iter(self._table.values())

    def __len__(self) -> int:
        return len(self._table)
