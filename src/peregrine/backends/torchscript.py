"""TorchScript backend: the torch backend's program compiled with ``torch.jit.script`` (not
traced: the program branches on input dtype and batch size, which tracing would freeze). The
scripted module runs the same ops on the same buffers, so its answers equal the torch backend's.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from peregrine.backends.torch.module import GraphProgram, TorchBackend, TorchExecutable


class TorchScriptExecutable(TorchExecutable):
    backend_name = "torchscript"

    def _finalize(self, program: GraphProgram, outputs: tuple[str, ...]) -> nn.Module:
        # always the op-by-op program: a scripted module runs without Python (no fused kernel)
        with warnings.catch_warnings():
            # torch >= 2.10 marks torch.jit deprecated in favour of torch.compile/export; scripting
            # still works and is what this backend promises (a serialisable, Python-free program).
            warnings.filterwarnings("ignore", message=".*torch.jit.script.*deprecated",
                                    category=DeprecationWarning)
            return torch.jit.script(program)


class TorchScriptBackend(TorchBackend):
    name = "torchscript"
    description = "The torch backend's program compiled by TorchScript (torch.jit.script)"
    executable = TorchScriptExecutable
