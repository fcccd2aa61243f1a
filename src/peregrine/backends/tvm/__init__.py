"""TVM backend: the IR lowered op by op to a Relax program (``ops.py``), tree ensembles as
compiled TIR walks (``trees.py``), built for the host CPU and cached on disk by the program's
hash (``build.py``); ``module.py`` holds the Executable. Importing this package imports tvm
(the ``peregrine-ml[tvm]`` extra); the registry reports the backend missing without it."""

from peregrine.backends.tvm.module import TvmBackend, TvmExecutable
from peregrine.backends.tvm.ops import FALLBACK, LOWERINGS

__all__ = ["FALLBACK", "LOWERINGS", "TvmBackend", "TvmExecutable"]
