"""Drawing random tree structures level by level with numpy (Fan et al.'s random decision trees).

:meth:`streamdp.forest.structure.ForestStructure.draw` calls :func:`draw_forest`. Every tree of a
group is grown one depth level at a time, side by side: at each frontier node an attribute is
drawn uniformly among those still allowed on its path (a categorical attribute is used once per
path, a numeric one may repeat with its range narrowed by the splits above), and a path stops at
the height or when no attribute is left. The leaf count is checked as each level is counted,
before the level is built, so a forest over the ``max_cells`` guard is refused early. Nothing
here sees data: the generator is seeded by the caller (128 bits from the OS CSPRNG).

>>> import numpy as np
>>> from streamdp.records.datasets import load
>>> drawn = draw_forest(load("congressional-voting").schema, 2, 2, np.random.default_rng(0), 10**6)
>>> [int(n) for n in drawn[4]]  # leaves per tree: 16 attributes of 3 values, height 2
[9, 9]
"""

from __future__ import annotations

import numpy as np

from streamdp.records.schema import Categorical, Numeric, Schema

__all__ = ["draw_forest", "max_possible_leaves", "ragged_arange"]


#: One level of a drawn group: its per-tree runs, then the level's feature, threshold, child and leaf
#: arrays (None on the last level, which is all leaves).
_Level = tuple[
    list[tuple[int, int, int, int]], np.ndarray | None, np.ndarray | None, np.ndarray | None, np.ndarray | None
]


def max_possible_leaves(schema: Schema, height: int) -> int:
    """Most leaves a tree of ``height`` can have: every node splits on the widest attribute still allowed."""
    arities = sorted((a.arity for a in schema.attributes if isinstance(a, Categorical)), reverse=True)
    has_numeric = any(isinstance(a, Numeric) for a in schema.attributes)
    leaves = 1
    for _ in range(height):
        if arities and (arities[0] >= 2 or not has_numeric):
            leaves *= arities.pop(0)
        elif has_numeric:
            leaves *= 2
        else:
            break
    return leaves


def ragged_arange(counts: np.ndarray) -> np.ndarray:
    """Concatenation of arange(c) for each c in counts."""
    ends = np.cumsum(counts)
    return np.arange(ends[-1]) - np.repeat(ends - counts, counts)


# Bytes of "used categorical" bits: free values per byte, and where a byte's r-th zero bit is.
_FREE = np.array([8 - bin(b).count("1") for b in range(256)], dtype=np.int64)
_SELECT = np.array(
    [[([i for i in range(8) if not b >> i & 1] + [0] * 8)[r] for r in range(8)] for b in range(256)], dtype=np.int64
)


#: Frontier nodes drawn side by side: trees are drawn in groups whose frontiers together stay
#: below this many nodes, so a forest of big trees never holds more than one tree's state at once.
_GROUP_NODES = 2**21


def draw_forest(
    schema: Schema, n_trees: int, height: int, rng: np.random.Generator, max_leaves: int, room: int | None = None
):
    """Padded node arrays and leaf counts of ``n_trees`` trees, or the number of the first tree
    with more than ``max_leaves`` leaves (nothing of that tree's last levels is built).

    ``room`` (the budgeted draw): each tree's root has room for this many leaves, and each child gets
    its parent's room divided by the parent's fan-out (rounded down). A node's attribute is drawn
    uniformly among those allowed on its path (Fan et al.) whose fan-out its room holds (a numeric one
    needs 2, a categorical one its arity); a node with none is a leaf. So no tree has more than
    ``room`` leaves, whatever it splits on: a branch of binary (numeric) splits goes about
    ``log2(room)`` deep, one through wide categorical attributes stops after a few, and the trees use
    the budget where a single height for every tree would leave most of it to the widest trees.
    Data-independent like every draw.

    Returns the node arrays, the leaves per tree and the routing height: the deepest path, at least 1
    (``height`` itself without ``room``).

    >>> from streamdp.records.datasets import load
    >>> s = load("adult").schema
    >>> drawn = draw_forest(s, 10, 64, np.random.default_rng(0), 10**6, room=1000)
    >>> bool(drawn[4].max() <= 1000), drawn[5] > 4
    (True, True)
    """
    widest = min(max_leaves, room or max_leaves, max_possible_leaves(schema, height))
    group = max(1, min(n_trees, _GROUP_NODES // max(1, widest)))
    levels, n_nodes, n_leaves = [], [], []
    reached = 1
    for t0 in range(0, n_trees, group):
        drawn = _draw_group(schema, min(group, n_trees - t0), height, rng, max_leaves, room)
        if isinstance(drawn, int):
            return t0 + drawn
        levels.append(drawn[0])
        n_nodes.append(drawn[1])
        n_leaves.append(drawn[2])
        reached = max(reached, drawn[3])
    M = int(max(int(x.max()) for x in n_nodes))
    feature = np.full((n_trees, M), schema.n_attributes, dtype=np.int32)
    threshold = np.full((n_trees, M), np.inf)
    child = np.tile(np.arange(M, dtype=np.int32), (n_trees, 1))
    leaf = np.full((n_trees, M), -1, dtype=np.int32)
    # In BFS order a level is a contiguous run of node numbers in each tree: copy runs, no scatter.
    t0 = 0
    for g, group_levels in enumerate(levels):
        for runs, f, th, ch, lf in group_levels:
            for t, src, dst, k in runs:
                t += t0
                if f is not None:
                    feature[t, dst : dst + k] = f[src : src + k]
                    threshold[t, dst : dst + k] = th[src : src + k]
                    child[t, dst : dst + k] = ch[src : src + k]
                    leaf[t, dst : dst + k] = lf[src : src + k]
                else:  # the last level: leaves numbered from src
                    leaf[t, dst : dst + k] = np.arange(src, src + k)
        t0 += len(n_nodes[g])
    return feature, threshold, child, leaf, np.concatenate(n_leaves), reached if room else height


def _draw_group(
    schema: Schema, T: int, height: int, rng: np.random.Generator, max_leaves: int, room_at_root: int | None = None
):
    """Draw ``T`` trees level by level, side by side: a few numpy calls per level.

    The frontier (the nodes of one depth, ordered by tree then BFS position)
    carries per node the categorical attributes already used on its path (a
    bit set) and its parent and branch; a numeric split's range is its declared one narrowed by
    the splits on that attribute above, found by walking the levels back (no per-node copy of every
    numeric attribute's range: that made wide numeric schemas slow to draw).
    An inner node picks uniformly among its allowed attributes (unused
    categoricals, every numeric). Children at the last depth are leaves and
    carry no state. Returns per level the per-tree runs and the level's node
    arrays, then node and leaf counts per tree; or the number of the first
    tree with more than ``max_leaves`` leaves, found as soon as a level's
    frontier exceeds it (every frontier node ends in at least one leaf),
    before that level's children are built.
    """
    attrs = schema.attributes
    m = len(attrs)
    is_cat = schema.is_categorical
    cat = np.flatnonzero(is_cat)
    num = np.flatnonzero(~is_cat)
    n_cat, n_num = cat.size, num.size
    cat_width = schema.arities[cat].astype(np.int64)
    nb = max(1, -(-n_cat // 8))
    tree = np.arange(T, dtype=np.int64)
    used = np.zeros((T, nb), dtype=np.uint8)
    if n_cat % 8 or n_cat == 0:
        used[:, -1] = 0xFF << (n_cat % 8) & 0xFF  # bits past the last attribute count as used
    numeric = [a for a in attrs if isinstance(a, Numeric)]  # in the order of num
    lo_decl = np.array([a.min for a in numeric], dtype=np.float64)
    hi_decl = np.array([a.max for a in numeric], dtype=np.float64)
    # per level drawn so far: each node's attribute, threshold, parent (in the level above) and branch
    hist_feat: list[np.ndarray] = []
    hist_thr: list[np.ndarray] = []
    hist_par: list[np.ndarray] = []
    hist_br: list[np.ndarray] = []
    par = br = np.zeros(T, dtype=np.int64)
    level_start = np.zeros(T, dtype=np.int64)  # per tree: number of its first node on this level
    leaves_before = np.zeros(T, dtype=np.int64)
    levels: list[_Level] = []
    per_tree = np.ones(T, dtype=np.int64)  # nodes of each tree on the current level
    room = None if room_at_root is None else np.full(T, int(room_at_root), dtype=np.int64)
    # too_wide[j]: the bits of the categoricals wider than widths[j - 1] (all of them at j = 0)
    widths = np.unique(cat_width)
    too_wide = np.zeros((widths.size + 1, nb), dtype=np.uint8)
    for j in range(widths.size + 1):
        wide = np.zeros(nb * 8, dtype=bool)
        wide[:n_cat] = cat_width > (widths[j - 1] if j else -1)
        too_wide[j] = np.packbits(wide, bitorder="little")
    reached = 0  # the deepest level with a split, plus one
    for depth in range(height + 1):
        seg = np.cumsum(per_tree) - per_tree  # where each tree's run starts in the frontier
        if depth == height:  # the last level: all leaves, numbered in order within each tree
            levels.append(
                (
                    [
                        (t, int(leaves_before[t]), int(level_start[t]), int(per_tree[t]))
                        for t in range(T)
                        if per_tree[t]
                    ],
                    None,
                    None,
                    None,
                    None,
                )
            )
            leaves_before += per_tree
            level_start += per_tree
            break
        n = tree.size
        if n == 0:  # every path ran out of attributes
            break
        runs = [(t, int(seg[t]), int(level_start[t]), int(per_tree[t])) for t in range(T) if per_tree[t]]
        k_num: int | np.ndarray = n_num
        widest = max(2, int(widths[-1]) if widths.size else 0)
        if room is not None and int(room.min()) < widest:  # a categorical wider than the room: not here nor below
            used |= too_wide[np.searchsorted(widths, room, side="right")]
            k_num = np.where(room >= 2, n_num, 0)
        free = _FREE[used[:, 0]] if nb == 1 else _FREE[used].sum(axis=1)
        if (n_num or depth < n_cat) and room is None:
            inner = None  # every node can still split
        else:
            inner = free + k_num > 0
        # Attribute of each node: the r-th allowed one (free categoricals first), r uniform.
        r = rng.integers(np.maximum(free + k_num, 1))  # (leaves draw a value that is not used)
        pick_cat = r < free
        if inner is not None:
            pick_cat &= inner
        feat = np.full(n, m, dtype=np.int64)
        is_num = ~pick_cat if inner is None else ~pick_cat & inner
        if n_num:
            feat[is_num] = num[(r - free)[is_num]]
        c = np.full(n, -1, dtype=np.int64)
        if n_cat:
            rc = r.copy()
            for b in range(nb):
                byte = used[:, b]
                z = _FREE[byte]
                here = pick_cat & (c < 0) & (rc < z)
                c[here] = 8 * b + _SELECT[byte[here], rc[here]]
                rc -= z
            feat[pick_cat] = cat[c[pick_cat]]
        w = np.where(is_num, 2, 0)
        w[pick_cat] = cat_width[c[pick_cat]]
        if w.any():
            reached = depth + 1
        w_tree = np.bincount(tree, weights=w, minlength=T).astype(np.int64)
        n_leaf_level = 0 if inner is None else per_tree - np.bincount(tree[inner], minlength=T)
        total = leaves_before + w_tree + n_leaf_level
        if np.any(total > max_leaves):
            return int(np.flatnonzero(total > max_leaves)[0])
        # Numeric splits: threshold uniform in the node's narrowed range.
        threshold = np.full(n, np.inf)
        ni = np.flatnonzero(is_num)
        q = np.searchsorted(num, feat[ni])  # column of each split attribute among the numeric ones
        if ni.size:
            lo, hi = lo_decl[q].copy(), hi_decl[q].copy()
            way, up, fq = br[ni], par[ni], feat[ni]
            for lev in range(depth - 1, -1, -1):  # up the path: narrow by each split on the same attribute
                t_up = hist_thr[lev][up]  # branch 0 is x <= t (the range below t), branch 1 is x > t
                same = hist_feat[lev][up] == fq
                lo = np.where(same & (way == 1), np.maximum(lo, t_up), lo)
                hi = np.where(same & (way == 0), np.minimum(hi, t_up), hi)
                way, up = hist_br[lev][up], hist_par[lev][up]
            threshold[ni] = rng.uniform(lo, hi)
        # First child of each node (children follow their parents' order); a leaf points to itself.
        next_start = level_start + per_tree
        cw = np.cumsum(w) - w
        child = cw + (next_start - (np.cumsum(w_tree) - w_tree))[tree]
        leaf = None
        if inner is not None:
            own = np.arange(n) + (level_start - seg)[tree]
            child = np.where(inner, child, own)
            is_leaf = ~inner
            cl = np.cumsum(is_leaf) - is_leaf
            leaf = np.where(is_leaf, cl + (leaves_before - cl[np.minimum(seg, n - 1)])[tree], -1)
            leaves_before += n_leaf_level
        levels.append(
            (
                runs,
                feat.astype(np.int32),
                threshold,
                child.astype(np.int32),
                np.full(n, -1, dtype=np.int32) if leaf is None else leaf.astype(np.int32),
            )
        )
        level_start, per_tree = next_start, w_tree
        if depth + 1 == height:
            continue  # the children are leaves: only their number per tree is needed
        hist_feat.append(feat)
        hist_thr.append(threshold)
        hist_par.append(par)
        hist_br.append(br)
        # Next frontier: children inherit the state (w is 0 at leaves), narrowed by the split.
        tree = np.repeat(tree, w)
        used_next = np.repeat(used, w, axis=0)
        if n_cat:
            for b in range(nb):
                bit = np.where(pick_cat & (c // 8 == b), 1 << (c % 8), 0).astype(np.uint8)
                used_next[:, b] |= np.repeat(bit, w)
        par, br = np.repeat(np.arange(n, dtype=np.int64), w), ragged_arange(w)
        used = used_next
        if room is not None:
            room = np.repeat(room // np.maximum(w, 1), w)
    return levels, level_start, leaves_before, reached
