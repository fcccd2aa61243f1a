"""Which model classes the ONNX export writes (``supported_models()``'s ``onnx-export``
field): every class whose programs use only ops with an ONNX lowering. The classes below
build programs with ops that have none (``onnx_graph.LOWERINGS``), always or in one
configuration; their export raises ``UnsupportedModelError`` naming the op. The table follows
the conformance suite through the exported file (tests/conformance/test_exported_onnx.py's
REFUSED list, which ``test_support_table_matches_refusals`` checks it against). Plain data:
importing it loads no ONNX package."""

from __future__ import annotations

# class name -> (op without an ONNX lowering, when: "" = always, else the configuration)
NOT_EXPORTED: dict[str, tuple[str, str]] = {
    "KNNImputer": ("knn_impute", ""),
    "CatBoost": ("category_map", "categorical features (hashed at the input)"),
    "CatBoostClassifier": ("category_map", "categorical features (hashed at the input)"),
    "CatBoostRegressor": ("category_map", "categorical features (hashed at the input)"),
    "CatBoostRanker": ("category_map", "categorical features (hashed at the input)"),
    # the text boundary (runtime/text.py: scikit-learn's tokenizer, n-grams and vocabulary
    # lookup) is no graph op and has no exact ONNX form; export.onnx.build_onnx refuses it
    "CountVectorizer": ("text_boundary", ""),
    "TfidfVectorizer": ("text_boundary", ""),
    "HashingVectorizer": ("text_boundary", ""),
}


def onnx_export_support(model_name: str) -> str:
    """"yes", "partial: ..." (not in one configuration) or "no: op ..." for a class."""
    entry = NOT_EXPORTED.get(model_name)
    if entry is None:
        return "yes"
    op, when = entry
    return f"partial: not with {when} (op {op})" if when else f"no: op {op}"
