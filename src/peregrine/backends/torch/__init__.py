"""PyTorch backend: the IR lowered to one ``torch.nn.Module`` (see ``module.py``), one rule per
op (``ops.py``), tree ensembles by the three Hummingbird strategies (``trees.py``, tables from
``layout.py``). Importing this package imports torch; the registry reports the backend missing
when torch is not installed."""

# each module registers its ops in the lowering table
from peregrine.backends.torch import (  # noqa: F401
    ops_ctr,
    ops_kernel,
    ops_meta,
    ops_nn,
    ops_pipeline,
    ops_transformers,
)
from peregrine.backends.torch.module import GraphProgram, TorchBackend, TorchExecutable
from peregrine.backends.torch.ops import LINKS, LOWERINGS, lower_node
from peregrine.backends.torch.trees import STRATEGY_MODULES

__all__ = [
    "LINKS", "LOWERINGS", "STRATEGY_MODULES", "GraphProgram", "TorchBackend", "TorchExecutable",
    "lower_node",
]  # fmt: skip
