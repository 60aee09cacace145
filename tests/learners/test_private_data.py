"""The private data layer: charges before reads, parallel composition, mechanisms, and the learner boundary."""

from __future__ import annotations

import ast
import math
import pathlib
import pickle
import warnings

import numpy as np
import pytest

from streamdp import Schema
from streamdp.learners.private_data import PrivateDataset
from streamdp.privacy.ledger import BudgetExceeded, InMemoryLedger
from streamdp.privacy.mechanisms import NotPrivateWarning, exponential_mechanism_probabilities

SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "a", "type": "categorical", "values": ["p", "q", "r"]},
            {"name": "x", "type": "numeric", "min": 0, "max": 100},
        ],
        "label": {"name": "y", "values": ["no", "yes"]},
    }
)


def records(n: int = 300, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = rng.choice(["p", "q", "r"], n)
    x = rng.uniform(0, 100, n)
    y = np.where(x > 35, "yes", "no")
    return [[ai, xi] for ai, xi in zip(a, x)], list(y)


def pds(epsilon=1.0, n=300, seed=0, noise_seed=None):
    X, y = records(n, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        return PrivateDataset.from_records(SCHEMA, X, y, epsilon=epsilon, noise_seed=noise_seed)


class Spy(list):
    """Records given to from_records that notice being read."""

    def __init__(self, *a):
        super().__init__(*a)
        self.read = False

    def __iter__(self):
        self.read = True
        return super().__iter__()

    def __len__(self):
        self.read = True
        return super().__len__()

    def __getitem__(self, i):
        self.read = True
        return super().__getitem__(i)


# -- accounting -------------------------------------------------------------------------------


def test_sequential_composition_sums_and_refuses_past_the_allotment():
    d = pds(1.0)
    d.noisy_count(0.4)
    d.noisy_class_counts(0.4)
    assert d.spent == pytest.approx(0.8)
    with pytest.raises(BudgetExceeded, match="refused before reading"):
        d.noisy_count(0.3)
    assert d.spent == pytest.approx(0.8), "a refused charge must not be recorded"
    d.noisy_count(0.2)  # exactly the rest fits (tolerance for float sums)
    assert d.remaining == pytest.approx(0.0)


def test_three_thirds_fit_a_budget_of_one():
    d = pds(1.0)
    for _ in range(3):
        d.noisy_count(1 / 3)
    assert d.spent == pytest.approx(1.0)


def test_parallel_composition_is_the_max_over_parts_and_sums_over_partitions():
    d = pds(1.0)
    p, q, r = d.partition("a")
    p.noisy_count(0.3)
    q.noisy_count(0.5)
    r.noisy_count(0.1)
    assert d.spent == pytest.approx(0.5)
    # a second partition of the same records composes sequentially with the first
    left, right = d.partition("x", 50.0)
    left.noisy_count(0.2)
    assert d.spent == pytest.approx(0.7)
    # nested: grandchildren count toward their part, the part toward the root
    p1 = p.partition("x", 10.0)[0]
    p1.noisy_count(0.25)  # p: 0.3 + 0.25 = 0.55 > 0.5
    assert d.spent == pytest.approx(0.55 + 0.2)
    with pytest.raises(BudgetExceeded):
        q.noisy_count(0.35)  # q would reach 0.85: root max(0.55, 0.85) + 0.2 = 1.05
    q.noisy_count(0.25)  # max(0.55, 0.75) + 0.2 = 0.95
    assert d.spent == pytest.approx(0.95)


def test_refused_parallel_charge_leaves_every_level_unchanged():
    d = pds(1.0)
    p, q, _ = d.partition("a")
    p.noisy_count(0.9)
    with pytest.raises(BudgetExceeded):
        q.partition("x", 50.0)[0].noisy_count(1.05)
    assert (d.spent, p.spent, q.spent) == (pytest.approx(0.9), pytest.approx(0.9), 0.0)


def test_ledger_is_charged_once_before_the_records_are_read():
    led = InMemoryLedger()
    led.set_budget("src", 1.0)
    X, y = records(50)
    spy = Spy(X)
    with pytest.raises(BudgetExceeded):
        PrivateDataset.from_records(SCHEMA, spy, y, epsilon=2.0, ledger=led, source="src")
    assert not spy.read, "records were read before the ledger refused"
    assert led.spends("src") == []
    d = PrivateDataset.from_records(SCHEMA, X, y, epsilon=0.6, ledger=led, source="src", who="me", what="test")
    d.noisy_count(0.3)
    d.noisy_count(0.3)
    assert [s.epsilon for s in led.spends("src")] == [0.6], "the allotment is one spend, queries inside are local"
    with pytest.raises(BudgetExceeded):
        PrivateDataset.from_records(SCHEMA, X, y, epsilon=0.6, ledger=led, source="src")


def test_a_ledger_needs_a_source():
    X, y = records(5)
    with pytest.raises(ValueError, match="source"):
        PrivateDataset.from_records(SCHEMA, X, y, epsilon=1.0, ledger=InMemoryLedger())
    with pytest.raises(ValueError, match="no ledger= was given: nothing would be charged"):  # and a source needs one
        PrivateDataset.from_records(SCHEMA, X, y, epsilon=1.0, source="votes")


def test_operations_validate_before_charging():
    d = pds(1.0)
    with pytest.raises(ValueError, match="numeric"):
        d.partition("x")
    with pytest.raises(ValueError, match="categorical"):
        d.partition("a", 3.0)
    with pytest.raises(ValueError, match="numeric"):
        d.noisy_contingency("x", 0.5)
    with pytest.raises(ValueError, match="categorical"):
        d.exponential([(0, 1.0)], lambda t: 0.0, sensitivity=1, epsilon=0.5)
    with pytest.raises(ValueError, match="epsilon"):
        d.noisy_count(-1)
    with pytest.raises(KeyError, match="no attribute named"):
        d.partition("nope")
    with pytest.raises(ValueError, match="outside"):
        d.partition("x", 500.0)
    assert d.spent == 0.0


def test_infinite_epsilon_is_refused_inside_a_finite_allotment():
    d = pds(1.0)
    with pytest.raises(BudgetExceeded):
        d.noisy_count(math.inf)


def test_not_picklable():
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(pds())


def test_log_names_every_operation_with_its_path():
    d = pds(1.0)
    p = d.partition("a")[1]
    p.noisy_class_counts(0.5)
    d.exponential([0, (1, 50.0)], lambda t: float(t.max(axis=1).sum()), sensitivity=1, epsilon=0.25)
    assert d.log == [((("a", "q"),), "noisy_class_counts", 0.5), ((), "exponential", 0.25)]


# -- mechanisms --------------------------------------------------------------------------------


def test_counts_are_noisy_but_centred():
    d = pds(1e9, n=200)
    vals = np.array([d.noisy_count(1.0) for _ in range(2000)])
    # geometric noise at eps=1: sd = sqrt(2a)/(1-a) ~ 1.40; the mean of 2000 is within 6 sd/sqrt(n) w.p. > 1 - 1e-8
    assert abs(vals.mean() - 200) < 6 * 1.40 / math.sqrt(2000)
    assert vals.std() > 1.0, "counts must carry noise"
    assert vals.dtype.kind == "i"


def test_contingency_and_class_counts_have_schema_shapes():
    d = pds(10.0)
    assert d.noisy_contingency("a", 1.0).shape == (3, 2)
    assert d.noisy_class_counts(1.0).shape == (2,)


def test_partition_parts_hold_the_right_records():
    d = pds(1e9, noise_seed=1)
    X, y = records()
    big = 1e6  # near-exact counts to check the routing (test only)
    for part, v in zip(d.partition("a"), "pqr"):
        assert part.noisy_count(big) == sum(1 for r in X if r[0] == v)
    left, right = d.partition("x", 35.0)
    assert left.noisy_class_counts(big).tolist() == [sum(1 for r in X if r[1] <= 35), 0]
    assert right.bounds("x") == (35.0, 100.0)


# A tree fixed in advance: root splits a (p, q, r); the q child splits x at 35.
TREE = (
    np.array([0, -1, 1, -1, -1, -1]),
    np.array([np.inf, np.inf, 35.0, np.inf, np.inf, np.inf]),
    np.array([1, -1, 4, -1, -1, -1]),
)


def test_leaf_class_counts_route_like_partitions_and_cost_epsilon_once():
    d = pds(1e9, noise_seed=1)
    X, y = records()
    out = d.noisy_leaf_class_counts(*TREE, 1e6)  # near-exact counts to check the routing (test only)
    exact = {
        1: [r for r in zip(X, y) if r[0][0] == "p"],
        3: [r for r in zip(X, y) if r[0][0] == "r"],
        4: [r for r in zip(X, y) if r[0][0] == "q" and r[0][1] <= 35],
        5: [r for r in zip(X, y) if r[0][0] == "q" and r[0][1] > 35],
    }
    for leaf, rows in exact.items():
        assert out[leaf].tolist() == [sum(1 for _, c in rows if c == k) for k in ("no", "yes")]
    assert out[[0, 2]].tolist() == [[0, 0], [0, 0]]  # inner nodes release nothing
    assert d.spent == 1e6 and [w for _, w, _ in d.log] == ["noisy_leaf_class_counts(4 leaves)"]


def test_leaf_class_counts_noise_every_leaf_cell_even_empty_ones():
    """An empty leaf must not show as an exact zero. Depth-1 tree on a, 400 draws at eps 0.5 on
    6 cells of which the r-leaf's are filled by no record (only p/q rows): P(noise = 0) =
    (1-a)/(1+a) = 0.245 for a = e^-0.5, so among 800 empty-cell draws the nonzero share is 0.755
    (sd 0.015); the band 0.68..0.83 fails with probability < 1e-6."""
    X0, y0 = records()
    X, y = [r for r in X0 if r[0] != "r"], [c for r, c in zip(X0, y0) if r[0] != "r"]
    d = PrivateDataset.from_records(SCHEMA, X, y, epsilon=1e9)
    tree = (np.array([0, -1, -1, -1]), np.full(4, np.inf), np.array([1, -1, -1, -1]))
    empty = np.array([d.noisy_leaf_class_counts(*tree, 0.5)[3] for _ in range(400)])
    assert 0.68 < np.mean(empty != 0) < 0.83
    assert abs(empty.mean()) < 6 * math.sqrt(2 * math.exp(-0.5)) / (1 - math.exp(-0.5)) / math.sqrt(800)


def test_leaf_class_counts_refuse_bad_trees_and_overspending_before_reading():
    d = pds(1.0)
    f, t, c = TREE
    for bad, msg in [
        ((f, t, np.array([1, -1, 5, -1, -1, -1])), "out of bounds"),
        ((f, t, np.array([0, -1, 4, -1, -1, -1])), "out of bounds"),  # a loop to itself
        ((f, np.array([0.5, *t[1:]]), c), "wrong way"),
        ((np.array([0, -1, 7, -1, -1, -1]), t, c), "attribute 7"),
        ((f, np.array([np.inf, np.inf, 150.0, np.inf, np.inf, np.inf]), c), "outside"),
    ]:
        with pytest.raises(ValueError, match=msg):
            d.noisy_leaf_class_counts(*bad, 0.5)
    assert d.spent == 0
    d.noisy_leaf_class_counts(*TREE, 0.6)
    with pytest.raises(BudgetExceeded):
        d.noisy_leaf_class_counts(*TREE, 0.6)
    assert d.spent == pytest.approx(0.6)


def test_exponential_matches_its_distribution():
    d = pds(1e9, n=300)
    cands = [0, (1, 35.0), (1, 80.0)]

    def q(t):
        return float(t.max(axis=1).sum())

    X, y = records()
    exact_scores = []
    for c in cands:
        if c == 0:
            t = np.zeros((3, 2))
            for r, lab in zip(X, y):
                t["pqr".index(r[0]), int(lab == "yes")] += 1
        else:
            t = np.zeros((2, 2))
            for r, lab in zip(X, y):
                t[int(r[1] > c[1]), int(lab == "yes")] += 1
        exact_scores.append(q(t))
    eps = 0.05
    p = exponential_mechanism_probabilities(np.array(exact_scores), eps, 1.0)
    n = 3000
    draws = [cands.index(d.exponential(cands, q, sensitivity=1.0, epsilon=eps)) for _ in range(n)]
    freq = np.bincount(draws, minlength=3) / n
    # each frequency within 5 binomial sd: failure probability < 3 * 6e-7
    assert np.all(np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-12), (freq, p)


def test_exponential_threshold_follows_score_times_length():
    s = Schema.from_dict(
        {
            "attributes": [{"name": "x", "type": "numeric", "min": 0, "max": 10}],
            "label": {"name": "y", "values": [0, 1]},
        }
    )
    X = [[2.0], [4.0], [7.0]]
    y = [0, 0, 1]
    d = PrivateDataset.from_records(s, X, y, epsilon=1e9)

    def q(tables):  # Max scorer, vectorized
        return tables.max(axis=-1).sum(axis=-1)

    # ranges [0,2) [2,4) [4,7) [7,10]: left counts 0,1,2,3 -> scores 2,2,3,2 ; lengths 2,2,3,3
    scores, lengths, edges = np.array([2, 2, 3, 2.0]), np.array([2, 2, 3, 3.0]), [0, 2, 4, 7, 10]
    eps = 2.0
    p = exponential_mechanism_probabilities(scores, eps, 1.0, measure=lengths)
    n = 4000
    t = np.array([d.exponential_threshold(0, q, sensitivity=1.0, epsilon=eps) for _ in range(n)])
    assert np.all((t >= 0) & (t <= 10))
    freq = np.histogram(t, bins=edges)[0] / n
    assert np.all(np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / n)), (freq, p)
    # uniform inside the chosen range: the middle range's draws spread over [4, 7)
    mid = t[(t >= 4) & (t < 7)]
    assert abs(mid.mean() - 5.5) < 5 * (3 / math.sqrt(12)) / math.sqrt(len(mid))


def test_exponential_threshold_respects_narrowed_bounds_and_validates_quality():
    d = pds(100.0)
    left = d.partition("x", 35.0)[0]
    t = [
        left.exponential_threshold("x", lambda tb: tb.max(axis=-1).sum(axis=-1), sensitivity=1, epsilon=1.0)
        for _ in range(50)
    ]
    assert all(0 <= v <= 35 for v in t)
    with pytest.raises(ValueError, match="one score per range"):
        d.exponential_threshold("x", lambda tb: 0.0, sensitivity=1, epsilon=0.1)


# -- the learner boundary ----------------------------------------------------------------------

LEARNERS = pathlib.Path(__file__).resolve().parents[2] / "streamdp" / "learners"
ALLOWED_IMPORTS = {
    "__future__",
    "math",
    "typing",
    "dataclasses",
    "inspect",
    "warnings",
    "importlib",
    "numpy",
    "msgpack",
    "streamdp.privacy",
    "streamdp.records.schema",
    "streamdp.records.domains",  # the declared domains (public, data-free)
    "streamdp.blob",
    "streamdp.learners",
    "streamdp.forest",
    "scipy.stats",
    "collections",
    "itertools",
    "functools",
    "sklearn.utils",
    "streamdp.validation",
    "streamdp.options",  # data-free: the parameter rules and option lists
    "streamdp.estimation",  # post-processing of released noisy counts only (no rows, no epsilon)
}
# The private data layer itself (it holds the rows) and the data-free catalogue are not learners.
LAYER = {
    "private_data.py",
    "private_budget.py",
    "private_bounds.py",
    "private_subtree.py",
    "private_selection.py",
    "catalogue.py",
}
# Names a learner may take from the layer-side subtree module: data-free helpers only.
SUBTREE_OK = {"SubtreeSpace", "structure_leaves", "SENSITIVITY"}
FORBIDDEN_ATTRS = {"encode", "encode_labels", "_columns"}
PREDICTION_HELPERS = {"_encode"}


def _learner_modules():
    return sorted(p for p in LEARNERS.glob("*.py") if p.name not in LAYER)


@pytest.mark.parametrize("path", _learner_modules(), ids=lambda p: p.name)
def test_learner_modules_never_touch_raw_rows(path):
    tree = ast.parse(path.read_text())
    pkg = "streamdp.learners"
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = pkg.rsplit(".", node.level - 1)[0] if node.level > 1 else pkg
                    base = f"{parent}.{base}".rstrip(".") if base else parent
                names = [a.name for a in node.names]
            else:
                base, names = "", [a.name for a in node.names]
            if isinstance(node, ast.ImportFrom) and base in ("streamdp", "streamdp.learners"):
                mods = [f"{base}.{n}" for n in names]  # "from .. import blob" imports streamdp.blob
            else:
                mods = [base] if base else names
            for m in mods:
                if not any(m == a or m.startswith(a + ".") for a in ALLOWED_IMPORTS):
                    problems.append(f"imports {m}")
            if base == "streamdp.learners.private_subtree" and set(names) - SUBTREE_OK:
                problems.append(f"imports samplers {sorted(set(names) - SUBTREE_OK)} from private_subtree")
            if any(m.startswith("streamdp.forest.tally") for m in mods) or (
                base == "streamdp.forest" and "tally" in names
            ):
                problems.append("imports the exact tally")
        elif isinstance(node, ast.Attribute):
            if "_PrivateDataset__" in node.attr or node.attr in ("_X", "_y"):
                problems.append(f"reads {node.attr}")
        elif isinstance(node, ast.Name) and "_PrivateDataset__" in node.id:
            problems.append(f"reads {node.id}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "_PrivateDataset__" in node.value:
            problems.append("names the layer's private arrays in a string")
    # .encode( is allowed only on prediction inputs, in these helpers; on training data never.
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in FORBIDDEN_ATTRS:
            fn = _enclosing_function(tree, node)
            if fn not in PREDICTION_HELPERS:
                problems.append(f"calls .{node.func.attr}() in {fn}")
    assert not problems, f"{path.name} crosses the privacy boundary: {problems}"


def _enclosing_function(tree, target):
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(n is target for n in ast.walk(fn)):
                inner = [
                    g
                    for g in ast.walk(fn)
                    if g is not fn and isinstance(g, ast.FunctionDef) and any(n is target for n in ast.walk(g))
                ]
                if not inner:
                    return fn.name
    return None


def test_the_boundary_test_catches_a_leak(tmp_path, monkeypatch):
    bad = tmp_path / "leaky.py"
    bad.write_text("def f(pds):\n    return pds._PrivateDataset__X.sum()\n")
    with pytest.raises(AssertionError, match="crosses the privacy boundary"):
        test_learner_modules_never_touch_raw_rows(bad)
    bad.write_text("from streamdp.learners.private_subtree import exact_subtree\n")
    with pytest.raises(AssertionError, match="samplers"):
        test_learner_modules_never_touch_raw_rows(bad)
    bad.write_text("def _fit(self, X, y):\n    return self.schema.encode(X, y)\n")
    with pytest.raises(AssertionError, match="encode"):
        test_learner_modules_never_touch_raw_rows(bad)
