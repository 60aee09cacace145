"""The level-by-level drawing has the distribution of Fan et al.'s node-by-node definition.

``reference_draw_tree`` is the former pure-Python drawer, kept here as the
specification: categorical attributes split multiway and are not reused
below, numeric ones split at a threshold uniform in the range narrowed by
the splits above, a path stops at the height or when no attribute is left.
Thousands of trees from each are compared on the root attribute, the
attribute frequencies at every depth, the leaf counts (chi-square tests of
homogeneity) and the thresholds at the root and below (two-sample
Kolmogorov-Smirnov). Every comparison uses a Bonferroni share of a fixed
failure probability ALPHA, so a correct drawer fails a test with probability
below ALPHA; the seeds are fixed, so the suite is reproducible.
"""

from __future__ import annotations

from collections import Counter, deque

import numpy as np
import pytest
from scipy import stats

from streamdp.forest.draw import draw_forest
from streamdp.forest.structure import ForestStructure
from streamdp.records.schema import Categorical, Numeric, Schema

ALPHA = 1e-3
N = 3000  # trees per sample


def make_schema(spec) -> Schema:
    attrs = []
    for j, s in enumerate(spec):
        if isinstance(s, tuple):
            attrs.append({"name": f"a{j}", "type": "numeric", "min": s[0], "max": s[1]})
        else:
            attrs.append({"name": f"a{j}", "type": "categorical", "values": list(range(s))})
    return Schema.from_dict({"attributes": attrs, "label": {"name": "y", "values": [0, 1]}})


def reference_draw_tree(schema: Schema, height: int, rng: np.random.Generator, room: int | None = None):
    """The former node-by-node drawer (BFS order; leaves point to themselves); with ``room``, the budgeted
    draw: a node picks among the attributes whose fan-out its room holds, each child gets ``room // fan-out``."""
    attrs = schema.attributes
    numeric = [j for j, a in enumerate(attrs) if isinstance(a, Numeric)]
    feature, threshold, child, leaf = [], [], [], []
    n_leaves = 0
    cats0 = tuple(j for j, a in enumerate(attrs) if isinstance(a, Categorical))
    width = [a.arity if isinstance(a, Categorical) else 2 for a in attrs]
    big = 2**62
    queue = deque([(0, cats0, {j: (attrs[j].min, attrs[j].max) for j in numeric}, big if room is None else room)])
    while queue:
        depth, cats, ranges, r = queue.popleft()
        idx = len(feature)
        candidates = [j for j in list(cats) + numeric if width[j] <= r]
        if depth >= height or not candidates:
            feature.append(len(attrs))
            threshold.append(np.inf)
            child.append(idx)
            leaf.append(n_leaves)
            n_leaves += 1
            continue
        j = candidates[int(rng.integers(len(candidates)))]
        feature.append(j)
        child.append(idx + 1 + len(queue))
        leaf.append(-1)
        a = attrs[j]
        if isinstance(a, Categorical):
            threshold.append(np.inf)
            rest = tuple(c for c in cats if c != j)
            queue.extend((depth + 1, rest, ranges, r // a.arity) for _ in range(a.arity))
        else:
            lo, hi = ranges[j]
            t = float(rng.uniform(lo, hi))
            threshold.append(t)
            queue.append((depth + 1, cats, {**ranges, j: (lo, t)}, r // 2))
            queue.append((depth + 1, cats, {**ranges, j: (t, hi)}, r // 2))
    return feature, threshold, child, leaf


def summarize(schema: Schema, f, th, ch, lf):
    """(depth, attribute, threshold, branch path key) of every inner node, and the leaf count."""
    m = schema.n_attributes
    width = [a.arity if isinstance(a, Categorical) else 2 for a in schema.attributes]
    depth = {0: 0}
    nodes = []
    for i in range(len(f)):
        if lf[i] >= 0 or i not in depth:
            continue
        j = int(f[i])
        assert j < m
        nodes.append((depth[i], j, float(th[i])))
        for b in range(width[j]):
            depth[int(ch[i]) + b] = depth[i] + 1
    return nodes, int(sum(1 for x in lf if x >= 0))


def samples(schema: Schema, height: int, seed: int, room: int | None = None):
    ref = [
        summarize(schema, *reference_draw_tree(schema, height, rng, room))
        for rng in [np.random.default_rng(seed)]
        for _ in range(N)
    ]
    drawn = draw_forest(schema, N, height, np.random.default_rng(seed + 1), 10**9, room=room)
    assert not isinstance(drawn, int)
    fs = ForestStructure(*drawn[:5], drawn[5])
    fs.validate(schema)
    new = []
    for t in range(N):
        k = int(np.flatnonzero(fs.leaf[t] >= 0).max()) + 1
        new.append(summarize(schema, fs.feature[t, :k], fs.threshold[t, :k], fs.child[t, :k], fs.leaf[t, :k]))
        assert new[-1][1] == fs.n_leaves[t]
    return ref, new


def chi2_same(a: list, b: list) -> float:
    """p-value of the chi-square test that two samples of labels come from one distribution."""
    ca, cb = Counter(a), Counter(b)
    keys = sorted(set(ca) | set(cb))
    table = np.array([[ca[k] for k in keys], [cb[k] for k in keys]])
    if len(keys) < 2:
        return 1.0
    return float(stats.chi2_contingency(table)[1])


SCHEMAS = {
    "mixed": ([3, (0.0, 10.0), 2, (-5.0, 5.0)], 3, None),
    "categorical, paths run out": ([2, 3, 2], 4, None),
    "numeric reused": ([(0.0, 1.0), (10.0, 20.0)], 4, None),
    "budgeted, mixed": ([3, (0.0, 10.0), 2, 7, (-5.0, 5.0)], 64, 40),
    "budgeted, categorical": ([2, 3, 5, 2, 9], 64, 30),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SCHEMAS))
def test_same_distribution_as_node_by_node_reference(name):
    spec, height, room = SCHEMAS[name]
    schema = make_schema(spec)
    ref, new = samples(schema, height, seed=sum(map(ord, name)), room=room)
    if room is not None:  # the budget holds in every tree, and the deepest paths are as deep in both
        assert max(k for _, k in new) <= room
        assert max(d for n, _ in ref for d, _, _ in n) == max(d for n, _ in new for d, _, _ in n)
        height = 1 + max(d for n, _ in new for d, _, _ in n)
    tests: list[tuple[str, float]] = []
    tests.append(("root attribute", chi2_same([n[0][1] for n, _ in ref], [n[0][1] for n, _ in new])))
    tests.append(("leaf count", chi2_same([k for _, k in ref], [k for _, k in new])))
    for d in range(height):
        a = [j for nodes, _ in ref for dd, j, _ in nodes if dd == d]
        b = [j for nodes, _ in new for dd, j, _ in nodes if dd == d]
        assert bool(a) == bool(b), d
        if a:
            tests.append((f"attributes at depth {d}", chi2_same(a, b)))
    for j, attr in enumerate(schema.attributes):
        if isinstance(attr, Numeric):
            for label, sel in (("root", lambda d: d == 0), ("below", lambda d: d > 0)):
                a = [t for nodes, _ in ref for d, jj, t in nodes if jj == j and sel(d)]
                b = [t for nodes, _ in new for d, jj, t in nodes if jj == j and sel(d)]
                assert len(a) > 100 and len(b) > 100
                assert min(b) >= attr.min and max(b) <= attr.max
                tests.append((f"thresholds of {attr.name} ({label})", float(stats.ks_2samp(a, b).pvalue)))
    bad = [(what, p) for what, p in tests if p < ALPHA / len(tests)]
    assert not bad, f"distributions differ (Bonferroni level {ALPHA}/{len(tests)}): {bad}"


def test_a_different_distribution_is_detected():
    """The comparison has power: a drawer that prefers categoricals at the root is caught."""
    schema = make_schema(SCHEMAS["mixed"][0])
    ref, new = samples(schema, 2, seed=5)
    skewed = [j if j in (0, 2) or k % 4 else 0 for k, j in enumerate(n[0][1] for n, _ in new)]
    assert chi2_same([n[0][1] for n, _ in ref], skewed) < ALPHA / 10


def test_more_trees_than_max_trees_are_refused_before_drawing():
    """More than MAX_TREES random trees (the batch jobs' bound, one constant) are refused at once, naming the bound,
    before anything is drawn: ten million were drawn for most of a minute."""
    import time

    from streamdp import PrivateForest
    from streamdp.forest.limits import MAX_TREES

    s = Schema([Categorical("a", [0, 1])], Categorical("y", [0, 1]))
    t = time.perf_counter()
    with pytest.raises(ValueError, match=rf"n_trees must be an integer in \[1, {MAX_TREES}\], got 10000000"):
        PrivateForest.create(s, n_trees=10**7)
    assert time.perf_counter() - t < 1.0
    assert PrivateForest.create(s, n_trees=MAX_TREES, height=2).n_trees == MAX_TREES
