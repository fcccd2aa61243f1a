"""Peregrine's intermediate representation: one node type, one graph, and the Forest."""

from peregrine.ir.forest import (
    Aggregation,
    Comparison,
    Forest,
    bitset_from_categories,
    concat_trees,
    make_forest,
)
from peregrine.ir.graph import Graph, GraphBuilder, Node, verify
from peregrine.ir.ops import Link, Op

__all__ = [
    "Aggregation", "Comparison", "Forest", "Graph", "GraphBuilder", "Link", "Node", "Op",
    "bitset_from_categories", "concat_trees", "make_forest", "verify",
]  # fmt: skip
