"""Default heights of a forest: rules on the schema and the tree count alone (public, drawn before any data).

Why: a default must stay small enough to draw fast and store whole, and tall enough for the records to
fill (the decision and its evidence: docs/decisions/009-default-height-leaf-budget.md).
"""

from __future__ import annotations

import numpy as np

from streamdp.forest.draw import max_possible_leaves
from streamdp.forest.limits import DEFAULT_MAX_CELLS, MAX_HEIGHT
from streamdp.records.schema import Schema
from streamdp.validation import check_integer

__all__ = [
    "default_height",
    "fitting_height",
    "ceiling_height",
    "deepest_height",
    "leaf_budget",
    "fewest_leaves",
    "DEFAULT_LEAF_BUDGET",
    "DEFAULT_CELL_BUDGET",
    "CEILING_MAX_HEIGHT",
    "CEILING_MAX_LEAVES",
]

#: A default forest's random trees hold at most this many leaves together (the draw stops a level earlier).
DEFAULT_LEAF_BUDGET = 2**17
#: ... and at most this many leaf cells (leaves x classes, one prior stump included): 4 MiB of int64 counts.
DEFAULT_CELL_BUDGET = 2**19


def default_height(n_attributes: int) -> int:
    """Fan et al.'s default: half the number of attributes, at least 1 (where a categorical schema's draw
    starts: the leaf budget lowers it, :func:`leaf_budget`)."""
    return max(1, n_attributes // 2)


def fewest_leaves(schema: Schema, height: int) -> int:
    """Fewest leaves a tree of ``height`` can have: every node splits on the narrowest attribute still allowed
    (a numeric one in two), while any is left.

    >>> from streamdp.records.datasets import load_schema
    >>> fewest_leaves(load_schema("congressional-voting"), 4), fewest_leaves(load_schema("adult"), 9)
    (81, 512)
    """
    arities = sorted(int(a) for a in schema.arities[schema.is_categorical])
    has_numeric = not bool(np.all(schema.is_categorical))
    leaves = 1
    for _ in range(height):
        if arities and (arities[0] <= 2 or not has_numeric):
            leaves *= arities.pop(0)
        elif has_numeric:
            leaves *= 2
        else:
            break
    return leaves


def leaf_budget(schema: Schema, n_trees: int) -> int:
    """Leaves one tree of a default forest may have: :data:`DEFAULT_LEAF_BUDGET` shared by the ``n_trees``
    trees, and no more than :data:`DEFAULT_CELL_BUDGET` cells with a prior stump; at least 2.

    A default is drawn at the tallest height (from :func:`default_height` down) whose drawn trees stay
    within it: a function of the schema and of the draw (both public), so the draw, the blob and the fit's
    work stay small for every schema, where half the attributes gave numeric schemas trees of 2**15-2**19
    leaves that the fit then pruned away.

    >>> from streamdp.records.datasets import load_schema
    >>> leaf_budget(load_schema("nursery"), 10), leaf_budget(load_schema("adult"), 10)
    (9532, 13107)
    """
    check_integer(n_trees, "n_trees")
    return max(2, min(DEFAULT_LEAF_BUDGET // n_trees, DEFAULT_CELL_BUDGET // (schema.n_classes * (n_trees + 1))))


def fitting_height(schema: Schema, height: int, n_trees: int, max_cells: int = DEFAULT_MAX_CELLS) -> int:
    """``height`` lowered to the tallest at which no tree over ``schema`` can exceed the leaf guard of
    ``n_trees`` trees within ``max_cells`` (every node splitting on the widest attribute left).

    Where a default height's draw is refused, the default becomes this, so that a default never fails;
    an explicit height is the user's and is refused, not lowered. The bound is the worst case, 7-46x
    what draws reach (``benchmarks/results/default_height.log``: Adult at height 7, 410,688 leaves in the
    largest of 10 drawn trees against 19.1 M possible; capping Adult's default at 5 would cost its fit
    0.017-0.024, 0.003-0.027 in an earlier run).

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
    stop earlier, and never past the depth their paths can reach (each categorical attribute once: a new
    user's 6-attribute model showed height 8). Used by the river classifier and by the service's growing
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
