"""Torch lowerings of the kernel pipeline ops (see ops.py for the lowering table)."""

from __future__ import annotations
