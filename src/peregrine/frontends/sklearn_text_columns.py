"""A text column inside a ColumnTransformer: ``Pipeline([ColumnTransformer([("txt",
TfidfVectorizer(), "review"), ("num", StandardScaler(), [...]), ("cat", OneHotEncoder(), [...])]),
head])`` on a DataFrame (docs/text.md, "A text column in a ColumnTransformer").

The vectorizer becomes the program's text boundary (``TextSpec.frame_width``: the input is a
table, the documents in one column), as in ``sklearn_text.py``; the other blocks are converted
as usual. The pipeline is converted on an input as wide as the table plus the vocabulary (the
text block a SELECT of those vocabulary columns), then ``_split_block`` takes the text block
out of the hstack the head reads:

* linear heads: ``hstack([S, N]) @ W + b`` is ``(S @ W_text + N @ W_rest) + b``. The boundary
  computes ``S @ W_text`` exactly as scipy's csr product does for the text columns, which come
  first in the row when the text block is the first block (the usual layout); the graph adds
  ``N @ W_rest``, then the bias. scikit-learn's csr_matvecs continues the same running sum over
  the numeric entries; the graph sums them apart and adds once, so the two differ only by the
  rounding of the numeric block's partial sum (docs/text.md states and tests the bound).
* tree heads: the vocabulary columns the splits read are gathered (exact), and the forests'
  feature indices renumbered around the narrower block.

The (rows x vocabulary) matrix is never dense. Anything else reading the hstack (a scaler, an
SVD, a kernel) would need it dense and is refused with UnsupportedModelError.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from sklearn import __version__ as sklearn_version
from sklearn.compose import ColumnTransformer
from sklearn.feature_extraction.text import TfidfTransformer
from sklearn.pipeline import Pipeline

from peregrine.errors import UnsupportedModelError
from peregrine.frontends.base import (
    qualified_name,
    require_fitted,
    sklearn_feature_names,
    unsupported,
)
from peregrine.frontends.sklearn_pipeline import (
    SOURCES,
    _pipeline_head,
    guard_name,
    model_spec,
)
from peregrine.frontends.sklearn_text import VECTORIZERS, text_spec
from peregrine.frontends.steps import (
    Context,
    Flow,
    concat,
    convert_head,
    convert_step,
    select,
    weighted,
)
from peregrine.ir import Graph, GraphBuilder, Node, Op, verify
from peregrine.ir.semantics import DEFS
from peregrine.ir.semantics.text import TextSpec
from peregrine.ir.spec import GUARD, INPUT_ERRORS, ModelSpec


def _text_transformer(trans: Any) -> tuple[Any, Any] | None:
    """(vectorizer, TfidfTransformer or None) when ``trans`` is a text block: a vectorizer, or
    a Pipeline of a vectorizer and a TfidfTransformer; None otherwise."""
    if isinstance(trans, VECTORIZERS):
        return trans, None
    if isinstance(trans, Pipeline):
        steps = [e for _, e in trans.steps if not (e is None or e == "passthrough")]
        if steps and isinstance(steps[0], VECTORIZERS):
            if len(steps) == 2 and isinstance(steps[1], TfidfTransformer):
                return steps[0], steps[1]
            if len(steps) > 1:
                raise unsupported(trans, "steps other than a TfidfTransformer after a text "
                                  "vectorizer inside a ColumnTransformer")
            return steps[0], None
    return None


def _text_blocks(ct: ColumnTransformer) -> list[tuple[str, TextSpec]]:
    """(name, TextSpec with its input column) of each text block of a fitted ``ct``."""
    require_fitted(ct, "transformers_", "n_features_in_")
    indices = ct._transformer_to_input_indices  # fitted name -> input column indices
    blocks = []
    for name, trans, columns in ct.transformers_:
        found = None if isinstance(trans, str) else _text_transformer(trans)
        if found is None:
            continue
        cols = list(indices.get(name, []))
        if not isinstance(columns, (str, int, np.integer)) or len(cols) != 1:
            raise unsupported(ct, f"text block {name!r} on columns {columns!r}",
                              "one column named by a str or an int (the vectorizer reads "
                              "1-D documents)")
        spec = text_spec(*found)
        blocks.append((name, dataclasses.replace(spec, column=int(cols[0]),
                                                 frame_width=int(ct.n_features_in_))))
    read = {int(c) for name, trans, _ in ct.transformers_
            if not (isinstance(trans, str) and trans == "drop") for c in indices.get(name, [])}
    unread = tuple(c for c in range(int(ct.n_features_in_)) if c not in read)
    return [(name, dataclasses.replace(spec, unread=unread)) for name, spec in blocks]


@SOURCES.register(ColumnTransformer, library="scikit-learn", methods=(), notes="")
def convert_column_pipeline(model: Pipeline) -> ModelSpec:
    """A Pipeline starting with a ColumnTransformer: the ordinary conversion unless a block is
    a text vectorizer."""
    ct = model.steps[0][1]
    blocks = _text_blocks(ct)
    if not blocks:
        return model_spec(model, lambda ctx, flow: _pipeline_head(model, ctx, flow))
    n_in = int(ct.n_features_in_)
    vocab = [t.n_features for _, t in blocks]
    g = GraphBuilder()
    x = g.input(n_in + sum(vocab))
    ctx = Context(g)
    flow = Flow(x, tuple(range(n_in)) + (None,) * sum(vocab))
    parts, nodes = [], {}
    indices = ct._transformer_to_input_indices
    weights = ct.transformer_weights or {}
    # each text block is a SELECT of its vocabulary's columns, after the table's and the
    # earlier blocks' (the boundary's dense columns come in the same order)
    first = dict(zip([n for n, _ in blocks], n_in + np.cumsum([0] + vocab[:-1])))
    width = dict(zip([n for n, _ in blocks], vocab))
    for tname, trans, _columns in ct.transformers_:
        if isinstance(trans, str) and trans == "drop":
            continue
        if tname in first:
            if weights.get(tname) is not None:
                raise unsupported(ct, f"a transformer weight on text block {tname!r}")
            part = select(ctx, flow, np.arange(first[tname], first[tname] + width[tname]))
            nodes[tname] = part.node
            parts.append(dataclasses.replace(part, nan=False, keeps_dtype=False))
            continue
        cols = np.asarray(indices.get(tname, []), dtype=np.int64)
        if cols.size == 0:  # sklearn skips empty selections
            continue
        part = convert_step(trans, ctx, select(ctx, flow, cols))
        parts.append(weighted(ct, ctx, part, weights.get(tname)))
    out = concat(ctx, parts)
    n_out = getattr(ct, "_n_features_out", None)
    if n_out is not None and int(n_out) != out.width:
        raise unsupported(ct, f"output width {n_out} (converted {out.width})")
    # a sparse hstack is read as such by the head (steps.Flow.sparse: scikit-learn's trees
    # refuse a NaN in it; XGBoost, which takes its zeros as missing, is refused: the
    # vocabulary's zeros are never materialised to be turned into NaN)
    out = dataclasses.replace(out, sparse="text" if getattr(ct, "sparse_output_", False) else "")
    steps = [e for _, e in model.steps[1:]]
    for est in steps[:-1]:
        out = convert_step(est, ctx, out)
    if not steps or steps[-1] is None or steps[-1] == "passthrough":
        raise unsupported(model, "a ColumnTransformer with a text column ending the pipeline",
                          "a model after it (its output would be a sparse hstack)")
    try:
        head = convert_head(steps[-1], ctx, out)
    except UnsupportedModelError:  # (a TypeError too: it says what is unsupported itself)
        raise
    except (TypeError, ValueError) as exc:  # fitted state kept sparse (KNN's _fit_X...)
        raise UnsupportedModelError(
            f"{qualified_name(steps[-1])} after a ColumnTransformer with a text column: its "
            f"fitted state could not be read as dense ({exc})") from exc
    outputs = dict(head.outputs)
    check = ctx.check_node()
    if check is not None:
        outputs[INPUT_ERRORS] = check
    # the guards (NaN or infinity an earlier step computes, re-validated by the model) and
    # the input columns whose NaN reaches no NaN-rejecting step, as model_spec has them; a
    # text column's NaN stays the text reader's to refuse
    if ctx.nan_refused is not None:
        ctx.nan_refused |= {int(c) for b, _ in blocks for c in indices.get(b, [])}
    ctx.accept_nan_columns(n_in)
    for (node, kind), key in ctx.guarded.items():
        name = key
        if "@" in key:  # input columns: the vocabulary's (n_in on) are finite, not guarded
            cols = [c for c in key.split("@")[1].split(",") if int(c) < n_in]
            if not cols:
                continue
            name = key.split("@")[0] + "@" + ",".join(cols)
        outputs[guard_name(name, kind, head.outputs, ctx.exempt.get((node, kind), ()))] = \
            node.split("@")[0]
    graph, texts = _split_blocks(g.build(outputs), [(nodes[n], t) for n, t in blocks], model)
    text = dataclasses.replace(texts[0], more=tuple(texts[1:]))
    return ModelSpec(
        graph=graph, methods=head.methods, n_features=n_in + sum(int(t.width) for t in texts),
        source=qualified_name(model), feature_names=sklearn_feature_names(model),
        allow_nan=ctx.allow_nan, allow_inf=False,
        category_maps={j: tuple(v.values) for j, v in sorted(ctx.vocabs.items())},
        category_unknown_error=frozenset(ctx.unknown_error),
        input_checks=tuple(w for _, ws in ctx.checks for w in ws), text=text,
        versions={"sklearn": sklearn_version})


def _split_blocks(graph: Graph, blocks: list[tuple[str, TextSpec]],
                  model: Any) -> tuple[Graph, list[TextSpec]]:
    """Take the text blocks (each a SELECT of its vocabulary's input columns) out of the
    matrix the head reads: the readers of the hstack (or of the block, when it is alone) must
    all be LINEAR layers (their text rows become the projections) or all tree ensembles (the
    columns they read are gathered). Returns the graph reading the table's columns then each
    block's dense columns, and the blocks' TextSpecs with their projection or columns."""
    nodes = dict(graph.by_name)
    n_in = blocks[0][1].frame_width
    names = [b for b, _ in blocks]
    readers = [n for n in graph.nodes if set(names) & set(n.inputs)]
    hstack = None
    if len(readers) == 1 and readers[0].op is Op.CONCAT:
        hstack = readers[0]
        readers = [n for n in graph.nodes if hstack.name in n.inputs]
    elif len(blocks) > 1 or any(n.op is Op.CONCAT for n in readers):
        raise unsupported(model, "text blocks read other than through the ColumnTransformer")
    matrix = hstack.name if hstack is not None else names[0]
    width = nodes[matrix].width
    results = [v for k, v in graph.outputs.items() if not k.startswith(GUARD)]
    if matrix in results or not readers:
        raise unsupported(model, "the text block's hstack as an output")
    parts = list(hstack.inputs) if hstack is not None else [names[0]]
    offsets = np.cumsum([0] + [nodes[i].width for i in parts])
    rows = {b: np.arange(offsets[parts.index(b)], offsets[parts.index(b)] + t.n_features)
            for b, t in blocks}
    texts = []
    rest: str | None = None  # the hstack's non-text part (linear readers)
    if all(n.op is Op.LINEAR for n in readers):
        rest_inputs = tuple(i for i in parts if i not in names)
        if len(rest_inputs) > 1:
            nodes[hstack.name] = _node(hstack.name, Op.CONCAT, rest_inputs,
                                       width - sum(t.n_features for _, t in blocks),
                                       float32=hstack.attrs.float32)
            rest = hstack.name
        else:
            rest = rest_inputs[0] if rest_inputs else None
            if hstack is not None:
                del nodes[hstack.name]
        k_all = sum(int(np.shape(n.attrs.weight)[1]) for n in readers)
        for b, t in blocks:
            weights = [np.asarray(n.attrs.weight, np.float64)[rows[b]] for n in readers]
            texts.append(dataclasses.replace(t, projection=np.hstack(weights)))
            nodes.pop(b)
        text_rows = np.concatenate([rows[b] for b in names])
        at = 0
        for n in readers:
            w = np.asarray(n.attrs.weight, np.float64)
            k = w.shape[1]
            terms = []
            for j in range(len(names)):  # block j's scores: after the earlier blocks'
                cols = f"{n.name}_text{j}"
                base = n_in + j * k_all + at
                nodes[cols] = _node(cols, Op.SELECT, ("X",), k,
                                    columns=np.arange(base, base + k, dtype=np.int64))
                terms.append(cols)
            at += k
            if rest is not None:
                part = f"{n.name}_rest"
                nodes[part] = _node(part, Op.LINEAR, (rest,), k,
                                    weight=np.delete(w, text_rows, axis=0), bias=np.zeros(k))
                terms.append(part)
            total = terms[0]
            if len(terms) > 1:
                # (S @ W_text + ... + N @ W_rest), then the bias, as sklearn's running sum
                total = f"{n.name}_sum"
                nodes[total] = _node(total, Op.WEIGHTED_SUM, tuple(terms), k,
                                     weights=np.ones(len(terms)))
            bias = np.broadcast_to(np.asarray(n.attrs.bias, np.float64), (k,)).copy()
            nodes[n.name] = _node(n.name, Op.AFFINE, (total,), k, scale=1.0, shift=bias)
        new_width = k_all * len(blocks)
    elif all(n.op is Op.TREE_ENSEMBLE for n in readers):
        feats = np.concatenate([n.attrs.forest.feature for n in readers])
        remap = np.full(width, -1, dtype=np.int64)  # hstack column -> new hstack column
        at, base = 0, n_in
        for i in parts:
            if i in names:
                t = blocks[names.index(i)][1]
                inside = feats[(feats >= rows[i][0]) & (feats <= rows[i][-1])] - rows[i][0] \
                    if t.n_features else feats[:0]
                used = np.unique(inside).astype(np.int64)
                cols = used if used.size else np.zeros(1, dtype=np.int64)
                remap[rows[i][0] + cols] = at + np.arange(cols.size)
                texts.append(dataclasses.replace(t, columns=cols))
                nodes[i] = _node(i, Op.SELECT, ("X",), int(cols.size),
                                 columns=np.arange(base, base + cols.size, dtype=np.int64))
                base += cols.size
                at += cols.size
            else:
                w = nodes[i].width
                remap[offsets[parts.index(i)]:offsets[parts.index(i)] + w] = \
                    at + np.arange(w)
                at += w
        if hstack is not None:
            nodes[hstack.name] = dataclasses.replace(hstack, width=at)
        for n in readers:
            f = n.attrs.forest
            feature = f.feature.copy()
            inner = feature >= 0
            feature[inner] = remap[feature[inner]]
            forest = dataclasses.replace(f, feature=feature.astype(f.feature.dtype),
                                         n_features=at)
            nodes[n.name] = dataclasses.replace(
                n, attrs=dataclasses.replace(n.attrs, forest=forest))
        new_width = base - n_in
    else:
        ops = sorted({n.op.name for n in readers})
        vocab = sum(t.n_features for _, t in blocks)
        raise UnsupportedModelError(
            f"{qualified_name(model)}: after a ColumnTransformer with a text column the "
            "hstacked matrix may be read only by linear layers or tree ensembles, not "
            f"{', '.join(ops)} (its {vocab} vocabulary columns would have to be dense)")
    old_x = next(n for n in graph.nodes if n.op is Op.INPUT)
    nodes.pop(old_x.name)
    # a guard re-validating the hstack checks what is left of it (the vocabulary's columns
    # are finite): the rest's concatenation, its one part, or nothing
    outputs = {k: ("X" if v == old_x.name else rest if hstack is not None
                   and v == hstack.name and hstack.name not in nodes else v)
               for k, v in graph.outputs.items()}
    outputs = {k: v for k, v in outputs.items() if v is not None}
    nodes = {k: (dataclasses.replace(v, inputs=tuple("X" if i == old_x.name else i
                                                     for i in v.inputs)))
             for k, v in nodes.items()}
    nodes["X"] = Node("X", Op.INPUT, (), {}, "float64", n_in + new_width)
    needed = Graph(tuple(nodes[k] for k in ["X"] + [k for k in nodes if k != "X"]), outputs)
    out = Graph(tuple(needed.toposort()), outputs)
    verify(out)
    return out, texts


def _node(name: str, op: Op, inputs: tuple[str, ...], width: int, **attrs: Any) -> Node:
    typed = DEFS[op].of(attrs)
    return Node(name, op, inputs, typed, typed.OUT_DTYPE, width)
