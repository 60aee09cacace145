"""PrivateForest: noise scale, the update procedure, fresh noise, no exact counts, votes, budgets, k-anon.

Statistical tests draw fresh secure noise, so each can fail by chance with a
fixed probability of about 1e-6: a normal z bound of 5.0 (two-sided
P ~ 5.7e-7) on sample variances / proportions, with exact moments.
"""

from __future__ import annotations

import math
import warnings

import msgpack
import numpy as np
import pytest

from streamdp import NotPrivateWarning, PrivateForest, Schema
from streamdp.forest.structure import ForestStructure
from streamdp.privacy.mechanisms import SecureRandom, geometric_noise, geometric_pmf, kanon_delta
from streamdp.release.continual import NOISE_BLOCK

Z = 5.0


def numeric_schema(m=2, n_classes=2) -> Schema:
    return Schema.from_dict(
        {
            "attributes": [{"name": f"x{j}", "type": "numeric", "min": 0, "max": 1} for j in range(m)],
            "label": {"name": "y", "values": list(range(n_classes))},
        }
    )


MIXED = Schema.from_dict(
    {
        "attributes": [
            {"name": "a", "type": "categorical", "values": ["p", "q", "r"]},
            {"name": "b", "type": "numeric", "min": 0, "max": 100},
            {"name": "c", "type": "categorical", "values": [True, False]},
            {"name": "d", "type": "numeric", "min": -1, "max": 1},
        ],
        "label": {"name": "y", "values": ["no", "yes", "maybe"]},
    }
)


def mixed_data(n, rng):
    X = np.empty((n, 4), dtype=object)
    X[:, 0] = np.array(["p", "q", "r"], dtype=object)[rng.integers(3, size=n)]
    X[:, 1] = rng.uniform(0, 100, n)
    X[:, 2] = rng.integers(2, size=n).astype(bool)
    X[:, 3] = rng.uniform(-1, 1, n)
    # the label depends on the data, so trees have something to learn
    y = np.where(X[:, 1].astype(float) > 50, "yes", np.where(X[:, 0] == "p", "no", "maybe")).astype(object)
    return X, y


def empty(schema):
    return np.empty((0, schema.n_attributes)), np.empty(0, dtype=object)


def geo_moments(eps):
    k = np.arange(-5000, 5001)
    p = geometric_pmf(k, eps)
    return float((p * k**2).sum()), float((p * k.astype(float) ** 4).sum())


def assert_var(samples, var, mu4, what=""):
    s2 = float(np.mean(np.asarray(samples, dtype=np.float64) ** 2))
    se = math.sqrt((mu4 - var**2) / np.size(samples))
    assert abs(s2 - var) < Z * se, f"{what}: sample variance {s2:.5g}, expected {var:.5g} +- {Z * se:.3g}"


def real_mask(f):
    return np.broadcast_to(
        (np.arange(f.structure.max_leaves)[None, :] < f.structure.n_leaves[:, None])[:, :, None], f.shape
    )


def exact_counts(f, X, y):
    """The exact tally of (X, y) in f's structure (an eps=inf twin: no noise at all)."""
    twin = PrivateForest(f.schema, f.structure, epsilon=math.inf, budget="split")
    return twin.noisy_delta(X, y)


def seeded(*args, **kw):
    with pytest.warns(NotPrivateWarning):
        return PrivateForest.create(*args, **kw)


# -- noise scale --------------------------------------------------------------------------


@pytest.mark.parametrize("budget,n_trees,eps", [("split", 4, 2.0), ("disjoint", 4, 2.0), ("split", 10, 1.0)])
def test_noise_scale_per_cell(budget, n_trees, eps):
    """Split: scale (n_trees + 1)/epsilon per cell (the prior stump is one more tree, and its cells are
    among those sampled); disjoint: 1/epsilon. Variance 2a/(1-a)^2, a = exp(-eps_tree)."""
    s = numeric_schema(2)
    f = PrivateForest.create(s, n_trees=n_trees, height=9, epsilon=eps, seed=0, budget=budget)
    assert f.n_trees == n_trees and f.n_released_trees == n_trees + 1
    eps_tree = eps / (n_trees + 1) if budget == "split" else eps
    assert f.epsilon_per_tree == pytest.approx(eps_tree)
    assert f.noise_scale == pytest.approx(1 / eps_tree)
    real = real_mask(f)
    samples = np.concatenate([f.noisy_delta(*empty(s))[real] for _ in range(40_000 // real.sum() + 1)])
    a = math.exp(-eps_tree)
    var, mu4 = geo_moments(eps_tree)
    assert var == pytest.approx(2 * a / (1 - a) ** 2)
    assert samples.dtype == np.int64
    assert_var(samples, var, mu4, budget)


def test_laplace_mechanism_scale():
    s = numeric_schema(2)
    f = PrivateForest.create(s, n_trees=5, height=9, epsilon=2.0, mechanism="laplace", seed=0)
    real = real_mask(f)
    x = np.concatenate([f.noisy_delta(*empty(s))[real] for _ in range(8)])
    assert f.counts.dtype == np.float64
    b = (5 + 1) / 2.0  # five random trees and the prior stump share epsilon 2
    assert_var(x, 2 * b**2, 24 * b**4, "laplace")


def test_no_noise_with_infinite_epsilon_and_exact_tally():
    """epsilon=inf: exact counts, and a warning at creation (only ``.private`` said so), once: not again when the
    forest is loaded or fitted."""
    rng = np.random.default_rng(1)
    X, y = mixed_data(300, rng)
    with pytest.warns(NotPrivateWarning, match=r"epsilon=inf\) adds no noise: .* the model is NOT private") as w:
        f = PrivateForest.create(MIXED, n_trees=3, height=3, epsilon=math.inf, seed=1)
    assert len(w) == 1 and issubclass(w[0].category, UserWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f.fit(X, y)
        assert not PrivateForest.from_bytes(f.to_bytes()).private
    assert not f.private
    leaves = f.apply(X)
    yc = MIXED.encode_labels(y)
    expect = np.zeros(f.shape, dtype=np.int64)
    for i in range(len(X)):
        for t in range(4):  # three random trees and the prior stump (one leaf: the exact class totals)
            expect[t, leaves[i, t], yc[i]] += 1
    assert np.array_equal(f.counts, expect)
    assert f.counts[3, 0].tolist() == np.bincount(yc, minlength=MIXED.n_classes).tolist()


# -- the update procedure -------------------------------------------------------------------------


def test_update_is_clone_tally_noise_once_add():
    rng = np.random.default_rng(2)
    X1, y1 = mixed_data(400, rng)
    X2, y2 = mixed_data(250, rng)
    X1b, y1b = mixed_data(100, rng)
    f = seeded(MIXED, n_trees=4, height=3, epsilon=1.0, seed=5, noise_seed=99, threshold_share=0).fit(
        X1, y1, prune=False
    )
    assert f.n_releases == 1 and f.version == 1
    f.update(X2, y2)
    assert f.n_releases == 2 and f.version == 2

    # same structure, same noise stream: fit-style release of D1 plus one noisy delta of D2
    g = seeded(MIXED, n_trees=4, height=3, epsilon=1.0, seed=5, noise_seed=99, threshold_share=0)
    d1 = g.noisy_delta(X1, y1)
    d2 = g.noisy_delta(X2, y2)
    assert np.array_equal(f.counts, d1 + d2)

    # each delta is the exact tally of its own batch plus exactly one geometric draw (masked to real cells)
    with pytest.warns(NotPrivateWarning):
        r = SecureRandom(99)
    real = real_mask(f)
    n1, n2 = np.zeros(f.shape, np.int64), np.zeros(f.shape, np.int64)
    assert f.counts.size <= NOISE_BLOCK  # one block: each release's noise is its generator's first child's
    n1[real] = geometric_noise(int(real.sum()), f.epsilon_per_tree, r.spawn())  # the real cells only, in order
    n2[real] = geometric_noise(int(real.sum()), f.epsilon_per_tree, r.spawn())
    assert np.array_equal(d1, exact_counts(f, X1, y1) + n1)
    assert np.array_equal(d2, exact_counts(f, X2, y2) + n2)

    # the noise does not depend on the data: another D1 changes the counts by exactly the tally difference
    h = seeded(MIXED, n_trees=4, height=3, epsilon=1.0, seed=5, noise_seed=99, threshold_share=0)
    h.fit(X1b, y1b, prune=False).update(X2, y2)
    assert np.array_equal(f.counts - h.counts, exact_counts(f, X1, y1) - exact_counts(f, X1b, y1b))


def test_merge_adds_a_delta_computed_elsewhere():
    rng = np.random.default_rng(3)
    X, y = mixed_data(200, rng)
    a = PrivateForest.create(MIXED, n_trees=2, height=2, epsilon=1.0, seed=4)
    b = PrivateForest.create(MIXED, n_trees=2, height=2, epsilon=1.0, seed=4)
    d = b.noisy_delta(X, y)
    before = a.counts.copy()
    a.merge(d)
    assert np.array_equal(a.counts, before + d) and a.n_releases == 1
    with pytest.raises(ValueError):
        a.merge(d.astype(np.float64))
    with pytest.raises(ValueError):
        a.merge(d[:, :1])
    with pytest.raises(ValueError):
        a.counts[0, 0, 0] = 5  # the released counts are read-only
    pad = ~real_mask(a)
    assert pad.any()  # trees of 4 and 6 leaves
    if pad.any():  # a delta with counts past a tree's last leaf would make the blob unloadable
        bad = d.copy()
        bad[pad] = 1
        with pytest.raises(ValueError, match="past each tree's last leaf"):
            a.merge(bad)
    lap = PrivateForest.create(MIXED, n_trees=2, height=2, epsilon=1.0, seed=4, mechanism="laplace")
    with pytest.raises(ValueError, match="NaN"):
        lap.merge(np.where(real_mask(lap), np.nan, 0.0))


def test_noise_variance_grows_linearly_with_updates():
    """After U releases (fit + U-1 updates) every cell carries exactly U independent draws: variance U*v."""
    s = numeric_schema(2)
    rng = np.random.default_rng(4)
    var1, m41 = geo_moments(0.5)
    for U in (1, 3, 8):
        # 7 trees + 1 stump: eps_tree = 0.5 (no share spent on thresholds)
        f = PrivateForest.create(s, n_trees=7, height=9, epsilon=4.0, seed=1, threshold_share=0)
        X_all, y_all = [], []
        for u in range(U):
            X = rng.uniform(-0.2, 1.2, size=(300, 2))
            y = rng.integers(2, size=300)
            X_all.append(X)
            y_all.append(y)
            f.fit(X, y, prune=False) if u == 0 else f.update(X, y)  # the drawn trees: every release at eps_tree
        resid = (f.counts - exact_counts(f, np.vstack(X_all), np.concatenate(y_all)))[real_mask(f)]
        var = U * var1
        mu4 = U * m41 + 3 * U * (U - 1) * var1**2  # fourth moment of a sum of U iid mean-zero draws
        assert_var(resid, var, mu4, f"U={U}")
        assert f.n_releases == U


# -- fresh, unreproducible noise -----------------------------------------------------------------------


def test_two_fits_without_seed_never_share_noise():
    rng = np.random.default_rng(5)
    X, y = mixed_data(300, rng)
    f = PrivateForest.create(MIXED, threshold_share=0.0, n_trees=3, height=3, epsilon=1.0, seed=7)
    c1 = f.fit(X, y).counts.copy()
    c2 = f.fit(X, y).counts.copy()
    g = PrivateForest.create(MIXED, threshold_share=0.0, n_trees=3, height=3, epsilon=1.0, seed=7)
    c3 = g.fit(X, y).counts.copy()
    real = real_mask(f)
    # eps_tree = 1/3: P(two draws agree on a cell) < 0.2; hundreds of cells
    for a, b in ((c1, c2), (c1, c3), (c2, c3)):
        assert np.mean(a[real] == b[real]) < 0.5
    assert f.private and g.private


@pytest.mark.filterwarnings(
    "ignore:PrivateForest.create\\(epsilon=inf\\):streamdp.privacy.NotPrivateWarning"
)  # (exact counts on purpose)
def test_noise_seed_is_test_only_and_marks_not_private():
    with pytest.warns(NotPrivateWarning):
        f = PrivateForest.create(MIXED, n_trees=2, height=2, epsilon=1.0, noise_seed=1)
    assert not f.private
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = PrivateForest.create(MIXED, n_trees=2, height=2, epsilon=1.0)  # no warning
    assert g.private
    assert not PrivateForest.create(MIXED, n_trees=2, height=2, epsilon=math.inf).private
    doc = msgpack.unpackb(f.to_bytes(), raw=False)
    assert doc["privacy"]["private"] is False
    assert not PrivateForest.from_bytes(f.to_bytes()).private


BLOB_KEYS = {
    "format",
    "format_version",
    "schema",
    "params",
    "privacy",
    "structure",
    "counts",
    "version",
    "n_releases",
    "noise_variance",
    "node_variance",
    "created",
}


def test_blob_holds_nothing_the_noise_can_be_rebuilt_from():
    rng = np.random.default_rng(6)
    X, y = mixed_data(300, rng)
    # the drawn trees (prune=False): a pruned refit may cut the trees otherwise (its cuts read fresh noise), and
    # this test compares the noise cell by cell
    f = PrivateForest.create(MIXED, threshold_share=0.0, n_trees=3, height=3, epsilon=1.0, seed=8).fit(
        X, y, prune=False
    )
    doc = msgpack.unpackb(f.to_bytes(), raw=False)
    assert set(doc) == BLOB_KEYS
    assert set(doc["params"]) == {"n_trees", "height", "mechanism", "k", "beta", "vote", "budget", "prior_trees"}
    assert set(doc["privacy"]) == {"epsilon", "delta", "private", "threshold_share", "threshold_spent"}
    assert set(doc["structure"]) == {"layout", "n_nodes", "feature", "threshold"}  # (format 3: "bfs")
    # loading the blob and refitting the same data gives fresh noise
    g = PrivateForest.from_bytes(f.to_bytes())
    assert g.private
    g.fit(X, y, prune=False)
    real = real_mask(f)
    assert np.mean(g.counts[real] == f.counts[real]) < 0.5
    h = PrivateForest.from_bytes(f.to_bytes()).fit(X, y, prune=False)
    assert np.mean(g.counts[real] == h.counts[real]) < 0.5


def _scalars(doc, path=""):
    """Every scalar of a decoded blob outside the array payloads."""
    if isinstance(doc, dict):
        if set(doc) == {"dtype", "shape", "data"}:
            yield path + ".shape", doc["shape"]
            return
        for k, v in doc.items():
            yield from _scalars(v, f"{path}.{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _scalars(v, f"{path}[{i}]")
    else:
        yield path, doc


@pytest.mark.parametrize("mechanism", ["geometric", "laplace", "kanon"])
def test_model_never_carries_an_exact_record_count(mechanism):
    rng = np.random.default_rng(7)
    n = 5003
    X, y = mixed_data(n + 1, rng)
    kw = dict(k=3, beta=0.5) if mechanism == "kanon" else {}
    eps = 4.0 if mechanism == "kanon" else 1.0
    fa = PrivateForest.create(
        MIXED, threshold_share=0.0, n_trees=3, height=3, epsilon=eps, mechanism=mechanism, seed=9, **kw
    )
    fb = PrivateForest.create(
        MIXED, threshold_share=0.0, n_trees=3, height=3, epsilon=eps, mechanism=mechanism, seed=9, **kw
    )
    # prune=False: a pruned structure depends on (noisy, private) releases and may differ between the two
    fa.fit(X[:n], y[:n], prune=False)
    fb.fit(X, y, prune=False)  # one more record
    da = msgpack.unpackb(fa.to_bytes(), raw=False)
    db = msgpack.unpackb(fb.to_bytes(), raw=False)
    for key in BLOB_KEYS - {"counts", "created"}:
        assert da[key] == db[key], key
    for path, v in _scalars(da):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            assert v not in (n, n + 1), f"{path} equals the record count"
    # the counts' own total is noisy
    assert da["counts"]["shape"] == db["counts"]["shape"]
    assert not any(v in (n,) for v in vars(fa).values() if isinstance(v, int) and not isinstance(v, bool))


# -- votes ------------------------------------------------------------------------------------


@pytest.fixture
def hand_forest():
    s = Schema.from_dict(
        {
            "attributes": [{"name": "a", "type": "categorical", "values": ["x", "y", "z"]}],
            "label": {"name": "c", "values": ["c0", "c1", "c2"]},
        }
    )
    fs = ForestStructure.draw(s, n_trees=2, height=1, seed=0)
    counts = np.array(
        [
            [[5, 1, 0], [0, 0, 0], [-3, 2, 2]],
            [[1, 4, 0], [0, -2, 0], [0, 1, 3]],
        ],
        dtype=np.int64,
    )

    def make(vote, counts=counts, estimator="leaf"):
        f = PrivateForest(s, fs, epsilon=1.0, vote=vote, counts=counts.copy())
        f.estimator = estimator  # these tests pin the leaf rule (Fan et al.); test_estimation covers "shrink"
        return f

    return make


def test_hand_forest_routes_by_value(hand_forest):
    f = hand_forest("proba")
    assert f.apply([["x"], ["y"], ["z"]]).tolist() == [[0, 0], [1, 1], [2, 2]]


def test_vote_proba_clamps_sums_and_falls_back_to_prior(hand_forest):
    f = hand_forest("proba")
    p = f.predict_proba([["x"], ["y"], ["z"]])
    # x: [5,1,0] + [1,4,0]; y: all clamped to 0 -> prior = clamped sum of all leaves [6,8,5];
    # z: [0,2,2] + [0,1,3] (the -3 is clamped)
    assert np.allclose(p, [[6 / 11, 5 / 11, 0], [6 / 19, 8 / 19, 5 / 19], [0, 3 / 8, 5 / 8]])
    assert list(f.predict([["x"], ["y"], ["z"]])) == ["c0", "c1", "c2"]
    # every count non-positive: uniform prior
    g = hand_forest("proba", counts=-np.ones((2, 3, 3), dtype=np.int64))
    assert np.allclose(g.predict_proba([["x"]]), [[1 / 3] * 3])


def test_vote_majority_argmax_per_tree_ties_and_empty_to_prior(hand_forest):
    f = hand_forest("majority")
    p = f.predict_proba([["x"], ["y"], ["z"]])
    # x: tree0 votes c0, tree1 votes c1. y: both leaves empty -> prior's top class c1.
    # z: tree0 ties c1/c2 (2, 2) -> the prior prefers c1 (8 > 5); tree1 votes c2.
    assert np.allclose(p, [[0.5, 0.5, 0], [0, 1, 0], [0, 0.5, 0.5]])
    # the prior decides ties the other way when it prefers c2
    counts = np.array([[[0, 0, 0], [0, 0, 0], [0, 2, 2]], [[0, 0, 9], [0, 0, 0], [0, 0, 0]]], dtype=np.int64)
    g = hand_forest("majority", counts=counts)
    assert np.allclose(g.predict_proba([["z"], ["y"]]), [[0, 0, 1], [0, 0, 1]])


def test_predict_empty_batch(hand_forest):
    f = hand_forest("proba")
    assert f.predict_proba(np.empty((0, 1))).shape == (0, 3)
    assert f.predict(np.empty((0, 1))).shape == (0,)


# -- budgets ----------------------------------------------------------------------------------


@pytest.mark.filterwarnings(
    "ignore:PrivateForest.create\\(epsilon=inf\\):streamdp.privacy.NotPrivateWarning"
)  # (exact counts on purpose)
def test_disjoint_budget_routes_every_record_to_exactly_one_tree():
    rng = np.random.default_rng(8)
    X, y = mixed_data(6000, rng)
    f = PrivateForest.create(MIXED, n_trees=5, height=3, epsilon=math.inf, seed=2, budget="disjoint").fit(X, y)
    per_class = f.counts.sum(axis=(0, 1))
    assert per_class.tolist() == [int(np.sum(y == c)) for c in MIXED.classes]
    # trees (the prior stump among them) get a uniform random share: each tree's total ~ Binomial(n, 1/6)
    per_tree = f.counts.sum(axis=(1, 2))
    assert per_tree.shape == (6,)
    sd = math.sqrt(6000 * (1 / 6) * (5 / 6))
    assert np.all(np.abs(per_tree - 1000) < Z * sd)
    assert len(set(per_tree.tolist())) > 1  # not a deterministic split
    # split budget: every tree sees every record
    g = PrivateForest.create(MIXED, n_trees=5, height=3, epsilon=math.inf, seed=2).fit(X, y)
    assert g.counts.sum(axis=(1, 2)).tolist() == [6000] * 6


@pytest.mark.filterwarnings(
    "ignore:PrivateForest.create\\(epsilon=inf\\):streamdp.privacy.NotPrivateWarning"
)  # (exact counts on purpose)
def test_bad_options_refused():
    for kw in (
        dict(mechanism="gauss"),
        dict(vote="mean"),
        dict(budget="half"),
        dict(epsilon=0),
        dict(epsilon=-1.0),
        dict(epsilon=True),
        dict(k=5),
        dict(beta=0.1),
        dict(mechanism="kanon"),
        dict(mechanism="kanon", k=5, beta=0.1, epsilon=math.inf),
    ):
        with pytest.raises(ValueError):
            PrivateForest.create(MIXED, n_trees=2, height=2, seed=0, **kw)


def test_encoded_batch_validated():
    f = PrivateForest.create(MIXED, n_trees=2, height=2, epsilon=1.0, seed=0)
    enc = MIXED.encode(*mixed_data(10, np.random.default_rng(0)))
    f.noisy_delta_encoded(enc.X, enc.y)
    bad_y = enc.y.copy()
    bad_y[0] = 3
    with pytest.raises(ValueError):
        f.noisy_delta_encoded(enc.X, bad_y)
    with pytest.raises(ValueError):
        f.noisy_delta_encoded(enc.X, -enc.y - 1)
    bad_x = enc.X.copy()
    bad_x[0, 0] = 3  # attribute a has 3 values
    with pytest.raises(ValueError):
        f.noisy_delta_encoded(bad_x, enc.y)
    bad_x = enc.X.copy()
    bad_x[3, 1] = np.nan  # numeric attribute b
    with pytest.raises(ValueError, match="NaN"):
        f.noisy_delta_encoded(bad_x, enc.y)
    bad_x = enc.X.copy()
    bad_x[2, 2] = -1  # attribute c
    with pytest.raises(ValueError):
        f.noisy_delta_encoded(bad_x, enc.y)
    with pytest.raises(ValueError):
        f.noisy_delta_encoded(enc.X[:, :3], enc.y)
    with pytest.raises(ValueError):
        f.noisy_delta_encoded(enc.X, enc.y[:5])


# -- k-anonymity mode -------------------------------------------------------------------------------


def test_kanon_cells_below_k_are_zero_and_delta_reported():
    rng = np.random.default_rng(9)
    X, y = mixed_data(3000, rng)
    k, beta = 20, 0.3
    f = PrivateForest.create(
        MIXED, n_trees=4, height=3, epsilon=2.0, mechanism="kanon", k=k, beta=beta, seed=3, prior_trees=0
    )
    assert f.delta == pytest.approx(4 * kanon_delta(k, beta, 0.5))
    assert f.noise_scale == 0
    f.fit(X, y)
    c = f.counts
    assert c.dtype == np.int64
    assert np.all((c == 0) | (c >= k))
    assert np.count_nonzero(c) > 0
    exact = exact_counts(f, X, y)
    assert np.all(c <= exact)  # sampling only removes records
    # with the full epsilon per tree, the disjoint budget reports the one-tree delta
    g = PrivateForest.create(
        MIXED, n_trees=4, height=3, epsilon=0.5, mechanism="kanon", k=k, beta=beta, seed=3, budget="disjoint"
    )
    assert g.delta == pytest.approx(kanon_delta(k, beta, 0.5))
    assert "delta" in repr(f)


def test_kanon_huge_k_zeroes_everything():
    X, y = mixed_data(500, np.random.default_rng(10))
    f = PrivateForest.create(MIXED, n_trees=2, height=2, epsilon=4.0, mechanism="kanon", k=10**6, beta=0.5, seed=0)
    assert not f.fit(X, y).counts.any()


@pytest.mark.parametrize("beta", [0.1, 0.5, 1 - 1e-3])
def test_kanon_sampling_rate_is_beta(beta):
    """With k=1 the threshold removes nothing, so the kept total is Binomial(n * n_trees, beta)."""
    n, T = 20_000, 4
    X, y = mixed_data(n, np.random.default_rng(11))
    eps = T * max(1.0, -math.log1p(-beta) + 0.01)
    f = PrivateForest.create(
        MIXED, n_trees=T, height=3, epsilon=eps, mechanism="kanon", k=1, beta=beta, seed=4, prior_trees=0
    )
    kept = int(f.fit(X, y).counts.sum())
    N = n * T
    assert abs(kept - beta * N) < Z * math.sqrt(N * beta * (1 - beta)), (kept, beta * N)
    # every tree samples independently: per-tree totals differ (P(all equal) is tiny for beta < 1)
    if beta < 0.9:
        assert len(set(f.counts.sum(axis=(1, 2)).tolist())) > 1


def test_kanon_refuses_epsilon_below_floor():
    with pytest.raises(ValueError, match=r"-ln\(1-beta\)"):
        PrivateForest.create(MIXED, n_trees=10, height=2, epsilon=1.0, mechanism="kanon", k=5, beta=0.4)


def test_kanon_update_thresholds_each_batch_on_its_own():
    """A small batch loses its cells below k even if the accumulated counts are large (no carry-over)."""
    X, y = mixed_data(3000, np.random.default_rng(12))
    f = PrivateForest.create(MIXED, n_trees=2, height=2, epsilon=4.0, mechanism="kanon", k=10, beta=0.5, seed=5)
    f.fit(X, y)
    before = f.counts.copy()
    Xs, ys = mixed_data(9, np.random.default_rng(13))  # 9 records: no cell can reach k = 10
    f.update(Xs, ys)
    assert np.array_equal(f.counts, before) and f.n_releases == 2
    delta = f.noisy_delta(*mixed_data(3000, np.random.default_rng(14)))
    assert np.all((delta == 0) | (delta >= 10)) and delta.any()


@pytest.mark.filterwarnings(
    "ignore:PrivateForest.create\\(epsilon=inf\\):streamdp.privacy.NotPrivateWarning"
)  # (exact counts on purpose)
def test_merge_adds_in_place_and_packing_does_not_copy_the_counts():
    """A worker's merge allocates no second counts array; the blob's counts record views them."""
    import tracemalloc

    from streamdp import blob

    schema = Schema.from_dict(
        {
            "attributes": [{"name": f"a{j}", "type": "numeric", "min": 0, "max": 1} for j in range(4)],
            "label": {"name": "y", "values": [0, 1]},
        }
    )
    f = PrivateForest.create(
        schema, n_trees=4, height=14, epsilon=math.inf, seed=0, prior_trees=0
    )  # 4 x 16384 x 2 cells
    X = np.random.default_rng(0).uniform(size=(2000, 4))
    delta = f.noisy_delta(X, np.arange(2000) % 2)
    tracemalloc.start()
    try:
        f.merge(delta)
        f.merge(delta)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.array_equal(f.counts, 2 * delta) and int(f.counts.sum()) == 2 * 4 * 2000
    assert peak < 0.1 * f.counts.nbytes, peak
    rec = blob.pack_array(f.counts)
    assert np.shares_memory(np.frombuffer(rec["data"], dtype=np.uint8), f.counts)
    assert PrivateForest.from_bytes(f.to_bytes()).counts.tolist() == f.counts.tolist()


# -- prior stumps ---------------------------------------------------------------------------------


def test_prior_stumps_are_valid_single_leaf_trees_after_the_random_ones():
    f = PrivateForest.create(MIXED, n_trees=3, height=3, epsilon=1.0, seed=5, prior_trees=2)
    s, m = f.structure, MIXED.n_attributes
    assert (f.n_trees, f.prior_trees, f.n_released_trees, s.n_trees) == (3, 2, 5, 5)
    assert f.shape == (5, s.max_leaves, MIXED.n_classes)
    assert s.n_leaves[3:].tolist() == [1, 1] and np.all(s.leaf[3:, 0] == 0) and np.all(s.feature[3:, 0] == m)
    s.validate(MIXED)
    assert np.array_equal(ForestStructure.from_arrays(s.arrays(), s.height, MIXED).leaf, s.leaf)
    ref = ForestStructure.draw(MIXED, 3, 3, seed=5)  # the random trees are drawn as before: data-independent
    assert all(np.array_equal(a, s.arrays()[n][:3]) for n, a in ref.arrays().items())
    X, _ = mixed_data(200, np.random.default_rng(0))
    assert np.all(f.apply(X)[:, 3:] == 0)  # every record reaches the stump's only leaf, at any routing depth
    assert "prior_trees=2" in repr(f)
    assert PrivateForest.create(MIXED, n_trees=3, height=3, seed=5, prior_trees=0).shape[0] == 3


def test_prior_trees_refused_when_invalid():
    for bad in (-1, 1.5, True, 17):
        with pytest.raises(ValueError, match="prior_trees"):
            PrivateForest.create(MIXED, n_trees=2, height=2, seed=0, prior_trees=bad)
    plain = ForestStructure.draw(MIXED, 3, 2, seed=0)
    with pytest.raises(ValueError, match="single leaves"):  # the last tree is a random one, not a stump
        PrivateForest(MIXED, plain, prior_trees=1)


def test_prior_stumps_blob_round_trip_and_old_blobs_read_as_zero():
    from streamdp.blob import BlobError

    X, y = mixed_data(300, np.random.default_rng(1))
    f = PrivateForest.create(MIXED, n_trees=3, height=3, epsilon=1.0, seed=2, prior_trees=2).fit(X, y)
    g = PrivateForest.from_bytes(f.to_bytes())
    assert (g.n_trees, g.prior_trees) == (3, 2) and np.array_equal(g.counts, f.counts)
    assert np.array_equal(g.predict_proba(X[:20]), f.predict_proba(X[:20]))
    doc = msgpack.unpackb(f.to_bytes(), raw=False)
    doc["params"]["prior_trees"] = 1  # 3 + 1 != 5 structure rows
    with pytest.raises(BlobError, match="prior_trees"):
        PrivateForest.from_bytes(msgpack.packb(doc, use_bin_type=True))
    old = PrivateForest.create(MIXED, n_trees=3, height=3, epsilon=1.0, seed=2, prior_trees=0).fit(X, y)
    doc = msgpack.unpackb(old.to_bytes(), raw=False)
    del doc["params"]["prior_trees"]  # a blob written before prior stumps
    h = PrivateForest.from_bytes(msgpack.packb(doc, use_bin_type=True))
    assert (h.n_trees, h.prior_trees) == (3, 0) and np.array_equal(h.counts, old.counts)


def test_prior_stump_is_one_more_tree_to_every_mechanism():
    T = 4
    assert PrivateForest.create(MIXED, n_trees=T, height=3, epsilon=2.0, seed=0).epsilon_per_tree == pytest.approx(
        2.0 / 5
    )
    assert (
        PrivateForest.create(MIXED, n_trees=T, height=3, epsilon=2.0, seed=0, budget="disjoint").epsilon_per_tree == 2.0
    )
    k, beta = 20, 0.3
    f = PrivateForest.create(MIXED, n_trees=T, height=3, epsilon=2.5, mechanism="kanon", k=k, beta=beta, seed=3)
    assert f.delta == pytest.approx((T + 1) * kanon_delta(k, beta, 0.5))
    X, y = mixed_data(3000, np.random.default_rng(2))
    c = f.fit(X, y).counts
    assert np.all((c[T] == 0) | (c[T] >= k)) and np.all(c[T] <= np.bincount(MIXED.encode_labels(y), minlength=3))


@pytest.mark.filterwarnings(
    "ignore:PrivateForest.create\\(epsilon=inf\\):streamdp.privacy.NotPrivateWarning"
)  # (exact counts on purpose)
def test_prior_stumps_do_not_vote():
    X, y = mixed_data(2000, np.random.default_rng(3))
    f = PrivateForest.create(MIXED, n_trees=3, height=3, epsilon=math.inf, seed=1, vote="majority").fit(X, y)
    p = f.predict_proba(X[:200])
    assert np.allclose(p * 3, np.round(p * 3))  # votes of the three random trees only
    # the stump's counts reach the estimate only through the prior (ForestNodes has the random trees alone)
    nodes = f.estimation_nodes()
    assert nodes.leaf_node.shape[0] == 3 and (nodes.depth == 0).sum() == 3
    assert np.allclose(nodes.prior, np.bincount(MIXED.encode_labels(y), minlength=3) / len(y))


def test_noise_variance_adds_up_over_releases_and_travels_in_the_blob():
    """Estimation weighs counts by the noise they carry: r releases carry r times one release's variance."""
    rng = np.random.default_rng(9)
    X, y = mixed_data(200, rng)
    f = PrivateForest.create(MIXED, threshold_share=0.0, n_trees=3, height=3, epsilon=1.0, seed=2)
    s2 = f.cell_variance
    f.fit(X, y, prune=False)
    assert np.allclose(f.noise_variance, s2)
    for r in range(2, 5):
        f.update(X, y)
        assert np.allclose(f.noise_variance, r * s2)
    f.merge(np.zeros(f.shape, dtype=np.int64), variance=0.0)  # a delta that adds no noise
    assert np.allclose(f.noise_variance, 4 * s2) and f.n_releases == 5
    g = PrivateForest.from_bytes(f.to_bytes())
    assert np.allclose(g.noise_variance, f.noise_variance)
    nodes = g.estimation_nodes()
    leaves = nodes.leaf_node[nodes.leaf_node >= 0]
    assert np.allclose(nodes.var[leaves], MIXED.n_classes * 4 * s2)
    with pytest.raises(ValueError, match="noise_variance"):
        g.noise_variance = -1.0


def test_river_sliding_window_keeps_the_variance_of_its_window():
    import itertools

    from river.datasets import synth

    from streamdp.estimation import cell_variance
    from streamdp.river import PrivateForestClassifier
    from streamdp.river.schemas import agrawal_schema

    m = PrivateForestClassifier(
        agrawal_schema(), epsilon=1.0, first_batch=50, batch_size=50, window=3, seed=1, prior_records=0
    )
    for x, label in itertools.islice(synth.Agrawal(seed=2), 400):  # 8 releases, 3 kept
        m.learn_one(x, label)
    assert m.n_releases == 8
    assert np.allclose(m.forest.noise_variance, 3 * m.forest.cell_variance)
    # with the prior phase (4, 8, 16, 22 records to the stump alone, at the whole epsilon): the window keeps
    # the variances of the releases it holds, whichever kind they are
    m = PrivateForestClassifier(agrawal_schema(), epsilon=1.0, first_batch=50, batch_size=50, window=3, seed=1)
    stump_phase = cell_variance("geometric", 1.0)
    for i, (x, label) in enumerate(itertools.islice(synth.Agrawal(seed=2), 400)):
        m.learn_one(x, label)
        if i + 1 == 50:  # the phase's last 3 releases kept; the random trees have released nothing
            assert m.n_releases == 4
            assert np.allclose(m.forest.noise_variance, [0.0] * 10 + [3 * stump_phase])
        if i + 1 == 100:  # two phase releases and one tree release (the first: what the threshold share left)
            first = cell_variance("geometric", (1 - m.forest.threshold_share) / 11)
            assert np.allclose(m.forest.noise_variance, [first] * 10 + [2 * stump_phase + first])
    assert m.n_releases == 11
    assert np.allclose(m.forest.noise_variance, 3 * m.forest.cell_variance)


@pytest.mark.parametrize("per_pair", [0, 10**9])  # every batch sorted / every batch counted densely
@pytest.mark.parametrize("masked", [False, True])
def test_sparse_tally_is_the_dense_tallys_nonzero_cells(masked, per_pair, monkeypatch):
    """Same cells, same counts, ascending, as the dense tally's nonzero entries (random leaves, labels, masks),
    whether the batch's cell numbers are sorted or counted densely."""
    from streamdp.forest import tally as tally_module
    from streamdp.forest.tally import sparse_tally, tally

    monkeypatch.setattr(tally_module, "DENSE_CELLS_PER_PAIR", per_pair)

    rng = np.random.default_rng(7)
    for _ in range(50):
        T, L, C, n = rng.integers(1, 6), rng.integers(1, 40), rng.integers(2, 5), rng.integers(0, 300)
        leaves, y = rng.integers(0, L, (n, T)), rng.integers(0, C, n)
        mask = rng.random((n, T)) < 0.5 if masked else None
        dense = tally(leaves, y, (T, L, C), mask).ravel()
        idx, counts = sparse_tally(leaves, y, (T, L, C), mask)
        assert idx.tolist() == np.flatnonzero(dense).tolist() and counts.tolist() == dense[idx].tolist()
        assert idx.dtype == counts.dtype == np.int64


@pytest.mark.parametrize("budget", ["split", "disjoint"])
def test_sparse_tally_encoded_is_tally_encoded_without_the_dense_array(budget):
    """The window worker's per-batch tally: the same cells as tally_encoded's nonzero ones, the same sampling
    (disjoint budget: the same seeded mask)."""
    s = Schema.from_dict(
        {
            "attributes": [
                {"name": "a", "type": "categorical", "values": ["x", "y", "z"]},
                {"name": "b", "type": "numeric", "min": 0, "max": 1},
            ],
            "label": {"name": "c", "values": ["p", "q"]},
        }
    )
    f = PrivateForest.create(s, 5, 3, epsilon=1.0, budget=budget, seed=3)
    rng = np.random.default_rng(1)
    X = np.column_stack([rng.integers(0, 3, 500), rng.random(500)])
    y = rng.integers(0, 2, 500)
    dense = f.tally_encoded(X, y, SecureRandom(5)).ravel()
    idx, counts = f.sparse_tally_encoded(X, y, SecureRandom(5))
    assert idx.tolist() == np.flatnonzero(dense).tolist() and counts.tolist() == dense[idx].tolist()
    with pytest.raises(ValueError, match="encoded labels"):
        f.sparse_tally_encoded(X, y + 2)


def test_a_second_fit_warns_that_it_spends_epsilon_again():
    """Fit twice on the same forest, nothing said that the records were released twice."""
    import warnings as _w

    from streamdp.records.datasets import load

    ds = load("congressional-voting")
    f = PrivateForest.create(ds.schema, n_trees=2, height=3, epsilon=1.0)
    with _w.catch_warnings():
        _w.simplefilter("error")
        f.fit(ds.X, ds.y)  # the first fit: no warning
    with pytest.warns(UserWarning, match="fitting again spends epsilon=1 more"):
        f.fit(ds.X, ds.y)


def test_estimated_records_weighs_each_tree_by_its_noise():
    """A trial read 24,309 records for 32,561 (the plain mean of 11 tree totals, each carrying all its leaves'
    noise). Votes at height 8 (6,561 leaves a tree): a tree's total has noise sd ~1,800, the stump's ~22; the
    weighted estimate is within 150 of 435 (about 7 sd: fails with probability < 1e-9; the plain mean of the 11
    totals, sd ~540, falls outside in ~78% of draws)."""
    from streamdp.records.datasets import load

    ds = load("congressional-voting")
    f = PrivateForest.create(ds.schema, n_trees=10, height=8, epsilon=1.0, seed=3)
    f.update(ds.X, ds.y)
    assert abs(f.estimated_records() - len(ds.y)) < 150
    empty = PrivateForest.create(ds.schema, n_trees=10, height=8, epsilon=1.0, seed=3)
    assert empty.estimated_records() == 0.0  # nothing released: no noise, no records


def test_predict_before_any_release_raises_not_fitted():
    """A forest with no release (created, not fitted) has zero counts: predicting the first class for every
    record silently was wrong; it raises scikit-learn's NotFittedError contract instead."""
    from streamdp.records.datasets import load
    from streamdp.validation import NotFittedError

    ds = load("congressional-voting")
    f = PrivateForest.create(ds.schema, n_trees=3, epsilon=1.0)
    for call in (f.predict, f.predict_proba, lambda X: f.score(X, ds.y[:3])):
        with pytest.raises(NotFittedError, match="released no counts") as e:
            call(ds.X[:3])
        assert isinstance(e.value, ValueError) and isinstance(e.value, AttributeError)
    f.fit(ds.X, ds.y)
    assert len(f.predict(ds.X[:3])) == 3
    assert f.score(ds.X, ds.y) == np.mean(f.predict(ds.X) == ds.y)
