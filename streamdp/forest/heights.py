"""Default heights and leaf budgets of a forest: rules on the schema and the tree count alone (public, drawn
before any data).

Why: a default must stay small enough to draw fast and store whole, and tall enough for the records to
fill (the decisions and their evidence: docs/decisions/009-default-height-leaf-budget.md and
docs/decisions/014-budgeted-draw.md).
"""

from __future__ import annotations

import numpy as np

from streamdp.forest.draw import max_possible_leaves
from streamdp.forest.limits import DEFAULT_MAX_CELLS, MAX_HEIGHT
from streamdp.records.schema import Schema
from streamdp.validation import check_integer

__all__ = [
    "default_height",
    "MIN_DEFAULT_HEIGHT",
    "fitting_height",
    "ceiling_height",
    "deepest_height",
    "leaf_budget",
    "DEFAULT_LEAF_BUDGET",
    "DEFAULT_CELL_BUDGET",
    "CEILING_MAX_HEIGHT",
    "CEILING_MAX_LEAVES",
]

#: The least default height of a categorical schema with that many attributes (:func:`default_height`).
MIN_DEFAULT_HEIGHT = 3
#: A default forest's random trees hold at most this many leaves together (each branch stops where its share is spent).
DEFAULT_LEAF_BUDGET = 2**18
#: ... and at most this many leaf cells (leaves x classes, one prior stump included): 4 MiB of int64 counts.
DEFAULT_CELL_BUDGET = 2**19


def default_height(n_attributes: int) -> int:
    """How deep a categorical schema's default draw may go (the leaf budget may stop a branch earlier,
    :func:`leaf_budget`): Fan et al.'s half of the attributes, and at least :data:`MIN_DEFAULT_HEIGHT` (or
    every attribute, where there are fewer).

    Why the floor: half of 2 to 5 attributes is a stump or two levels, which cannot hold a concept of two
    attributes, such as STAGGER's, even with exact counts; the fit prunes what the records do not fill
    (docs/decisions/023-small-schema-height.md).

    >>> [default_height(m) for m in (1, 2, 3, 5, 8, 17)]
    [1, 2, 3, 3, 4, 8]
    """
    return max(min(n_attributes, MIN_DEFAULT_HEIGHT), n_attributes // 2)


def leaf_budget(schema: Schema, n_trees: int) -> int:
    """Leaves one tree of a default forest may have: :data:`DEFAULT_LEAF_BUDGET` shared by the ``n_trees``
    trees, and no more than :data:`DEFAULT_CELL_BUDGET` cells with a prior stump; at least 2.

    A default tree is drawn within it branch by branch (:meth:`streamdp.forest.structure.ForestStructure.draw`):
    a function of the schema and of the tree count (both public), so the draw, the blob and the fit's
    work stay small for every schema, where half the attributes gave numeric schemas trees of 2**15-2**19
    leaves that the fit then pruned away.

    >>> from streamdp.records.datasets import load_schema
    >>> leaf_budget(load_schema("nursery"), 10), leaf_budget(load_schema("adult"), 10)
    (9532, 23831)
    """
    check_integer(n_trees, "n_trees")
    return max(2, min(DEFAULT_LEAF_BUDGET // n_trees, DEFAULT_CELL_BUDGET // (schema.n_classes * (n_trees + 1))))


def fitting_height(schema: Schema, height: int, n_trees: int, max_cells: int = DEFAULT_MAX_CELLS) -> int:
    """``height`` lowered to the tallest at which no tree over ``schema`` can exceed the leaf guard of
    ``n_trees`` trees within ``max_cells`` (every node splitting on the widest attribute left).

    Lowers a growing model's default ceiling where the server accepts fewer cells (the service's
    registry); an explicit height is the user's and is refused, not lowered. The bound is the worst case,
    many times what draws reach (``benchmarks/results/default_height.log``).

    >>> from streamdp.records.datasets import load_schema
    >>> fitting_height(load_schema("mushroom"), 11, 10), fitting_height(load_schema("nursery"), 4, 10)
    (6, 4)
    """
    limit = max_cells // (schema.n_classes * n_trees)
    while height > 1 and max_possible_leaves(schema, height) > limit:
        height -= 1
    return height


#: :func:`ceiling_height`: at most this tall, and trees of at most ``CEILING_MAX_LEAVES`` leaves.
CEILING_MAX_HEIGHT = 8
CEILING_MAX_LEAVES = 2048


def ceiling_height(schema: Schema, n_trees: int = 10) -> int:
    """The default height of a forest whose height is a ceiling (it grows, or estimates fall back toward the root).

    The tallest height, up to ``CEILING_MAX_HEIGHT``, at which a tree over ``schema`` has at most
    ``CEILING_MAX_LEAVES`` leaves (and within :func:`leaf_budget` of ``n_trees`` trees); from the schema alone (public). Numeric attributes may split again
    below themselves, so numeric schemas get 8 (256 leaves); categorical attributes of many values
    stop earlier, and never past the depth their paths can reach (each categorical attribute once). Used by the river classifier and by the service's growing
    models (``benchmarks/results/grow_ceiling.log``).

    >>> from streamdp.records.datasets import load_schema
    >>> [ceiling_height(load_schema(n)) for n in ("nursery", "mushroom", "congressional-voting", "adult")]
    [5, 3, 6, 2]
    >>> from streamdp.river.schemas import stagger_schema  # 3 categorical attributes
    >>> ceiling_height(stagger_schema())
    3
    """
    h, top = 1, min(CEILING_MAX_HEIGHT, deepest_height(schema))
    most = min(CEILING_MAX_LEAVES, leaf_budget(schema, n_trees))  # many classes or trees: the cell budget too
    while h < top and max_possible_leaves(schema, h + 1) <= most:
        h += 1
    return h


def deepest_height(schema: Schema) -> int:
    """The deepest a tree over ``schema`` can be: a path tests each categorical attribute once, a numeric one
    may split again below itself (then only :data:`MAX_HEIGHT` bounds it).

    >>> from streamdp.records.datasets import load_schema
    >>> deepest_height(load_schema("congressional-voting")), deepest_height(load_schema("adult"))
    (16, 64)
    """
    return schema.n_attributes if bool(np.all(schema.is_categorical)) else MAX_HEIGHT
