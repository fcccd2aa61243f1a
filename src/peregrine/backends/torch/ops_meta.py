"""Torch lowerings of the meta pipeline ops (see ops.py for the lowering table)."""

from __future__ import annotations
