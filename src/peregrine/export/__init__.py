"""Exports of a compiled program to runtimes outside Peregrine: ONNX (``onnx.py``, lowered per
op from the IR) and Triton model repositories around it (``triton.py``). docs/export.md."""

from peregrine.export.onnx import ExportReport, build_onnx, export_onnx
from peregrine.export.triton import write_triton_repository

__all__ = ["ExportReport", "build_onnx", "export_onnx", "write_triton_repository"]
