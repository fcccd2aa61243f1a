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
