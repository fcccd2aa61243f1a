"""``peregrine.TorchStep``: a trained PyTorch module as a scikit-learn transformer, so a network
can sit inside a ``Pipeline`` (``StandardScaler -> TorchStep(embedding net) -> LightGBM``) for
users without skorch, and Peregrine can compile the whole pipeline (docs/hybrid.md).

It imports nothing of Peregrine (a leaf beside ``errors``/``options``): the frontend that
translates it (``frontends/torch_nn.py``) recognises the class by type, and importing
``peregrine`` does not import torch until ``peregrine.TorchStep`` is used.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin

try:
    from sklearn.utils.validation import validate_data
except ImportError:  # scikit-learn < 1.6: the estimator's own method

    def validate_data(est: Any, X: Any, **kwargs: Any) -> Any:
        return est._validate_data(X, **kwargs)


def module_dtype(module: Any) -> Any:
    """The floating dtype of the module's parameters and buffers (torch.float32 when it has
    none): what its layers compute in, and what ``TorchStep`` hands it."""
    import torch

    for t in list(module.parameters()) + list(module.buffers()):
        if t.is_floating_point():
            return t.dtype
    return torch.float32


class TorchStep(TransformerMixin, BaseEstimator):
    """A trained ``torch.nn.Module`` as a scikit-learn transformer.

    ``transform(X)`` validates X as scikit-learn transformers do (2-D, numeric, finite, the
    feature count seen by ``fit``), converts it to the module's dtype (float32 unless the module
    was converted), and returns ``module(X)`` as a NumPy array, computed in eval mode under
    ``torch.no_grad`` on the module's device; a 1-D output becomes one column. ``fit`` trains
    nothing: it records ``n_features_in_`` (and ``feature_names_in_``) and is optional, the
    module is used as it is.

    Parameters
    ----------
    module : torch.nn.Module
        The trained network: (n_samples, n_features) -> (n_samples, n_outputs).
    """

    def __init__(self, module: Any) -> None:
        self.module = module

    def __sklearn_is_fitted__(self) -> bool:
        return True  # stateless: the module is trained already

    def _np_dtype(self) -> np.dtype:
        return np.dtype(str(module_dtype(self.module)).replace("torch.", ""))

    def fit(self, X: Any, y: Any = None) -> TorchStep:
        validate_data(self, X, reset=True, dtype=self._np_dtype())
        return self

    def transform(self, X: Any) -> np.ndarray:
        import torch

        X = validate_data(self, X, reset=False, dtype=self._np_dtype())
        module = self.module
        device = next((p.device for p in module.parameters()), torch.device("cpu"))
        was_training = module.training
        module.eval()
        try:
            with torch.no_grad():
                out = module(torch.from_numpy(np.ascontiguousarray(X)).to(device))
        finally:
            module.train(was_training)
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"TorchStep: the module returned {type(out).__name__}, not a tensor")
        out = out.detach().cpu().numpy()
        if out.ndim == 1:
            out = out.reshape(-1, 1)
        if out.ndim != 2 or out.shape[0] != X.shape[0]:
            raise ValueError(f"TorchStep: the module returned shape {out.shape} for "
                             f"{X.shape[0]} rows; expected (rows, outputs)")
        return out


__all__ = ["TorchStep", "module_dtype"]
