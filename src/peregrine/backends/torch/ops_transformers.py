"""Torch lowerings of the transformers pipeline ops (see ops.py for the lowering table)."""

from __future__ import annotations
