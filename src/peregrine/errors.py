"""Typed errors. Every failure a user can cause maps to one of these, with a message that says
what went wrong and where (estimator, parameter, column, file)."""

from __future__ import annotations


class PeregrineError(Exception):
    """Base class of every error Peregrine raises on purpose."""


class UnsupportedModelError(PeregrineError, TypeError):
    """The estimator, one of its parameters, or a backend/option combination is not supported.

    The message names the estimator (and parameter) and lists what is supported instead.
    """


class InputError(PeregrineError, ValueError):
    """Input data does not match what the compiled model expects (shape, rank, dtype, columns)."""


class ArtifactError(PeregrineError):
    """A saved artifact is corrupt, tampered with, truncated or from an incompatible version."""


class NotFittedError(UnsupportedModelError):
    """The model handed to :func:`peregrine.compile` has not been fitted."""


class ValidationError(PeregrineError):
    """Compile-time validation (``CompileOptions(validate=True)``) found the compiled program
    answering differently from the source library on the sample rows.

    The message names the method, the worst sample row and column, both values and the
    tolerance; the same facts are attributes (``None`` where they do not apply, e.g. a shape
    or dtype mismatch, or a 1-D output's column).
    """

    def __init__(
        self,
        message: str,
        *,
        method: str | None = None,
        row: int | None = None,
        column: int | tuple[int, ...] | None = None,
        compiled: object = None,
        source: object = None,
        rtol: float | None = None,
        atol: float | None = None,
    ) -> None:
        super().__init__(message)
        self.method = method
        self.row = row
        self.column = column
        self.compiled = compiled
        self.source = source
        self.rtol = rtol
        self.atol = atol


class NonFiniteInput(Exception):  # noqa: N818  (a signal inside the library, never raised out)
    """Raised by a runner that checks its input itself (``runner(...).checks_finite``) when the
    input holds a NaN or an infinity the model rejects: the caller then takes its checking path,
    which says where. Internal: users get the InputError that path raises."""
