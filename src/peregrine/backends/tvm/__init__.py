"""TVM backend: the IR lowered op by op to a Relax program (``ops.py``; column featurizers in
``ops_columns.py``, one-vs-one votes in ``ops_votes.py``, CatBoost's CTRs in ``ops_ctr.py``,
kernel matrices in ``ops_kernel.py``, nearest neighbours in ``ops_neighbours.py``, a network's
layers in ``ops_nn.py``). Scheduled TIR for the product, polynomial terms, interpolation, CTRs
and element-wise columns is in ``kernels.py``, for kernel matrices in ``kernel_matrix.py``,
for nearest neighbours in ``knn.py``, for float32 layers in ``kernels_nn.py``; tree ensembles
are compiled TIR walks (``trees.py``). Built for the host CPU and cached on disk by the
program's hash (``build.py``); ``module.py`` holds the Executable. Importing this package
imports tvm (the ``peregrine-ml[tvm]`` extra); the registry reports the backend missing
without it."""

# each ops_* module registers its lowerings in the table (before anything reads it)
from peregrine.backends.tvm import (  # noqa: F401
    ops_columns,
    ops_ctr,
    ops_kernel,
    ops_neighbours,
    ops_nn,
    ops_votes,
)
from peregrine.backends.tvm.module import TvmBackend, TvmExecutable
from peregrine.backends.tvm.ops import LOWERINGS, fallback_ops

__all__ = ["LOWERINGS", "TvmBackend", "TvmExecutable", "fallback_ops"]
