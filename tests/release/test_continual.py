"""Release policies, continual counting with no horizon and the release noise (streamdp.release).

Statistical tests draw from the secure source (fresh each run) and use a fixed
failure probability of about 1e-6: a normal z bound of 5.0 per check (two-sided
P ~ 5.7e-7) or Clopper-Pearson intervals at a Bonferroni-split 1e-6.
"""

from __future__ import annotations

import doctest
import math

import msgpack
import numpy as np
import pytest
from scipy import stats

from streamdp import blob
from streamdp.estimation import cell_variance
from streamdp.privacy.mechanisms import SecureRandom, geometric_noise, geometric_pmf
from streamdp.release import continual
from streamdp.release import counter as counter_mod
from streamdp.release import decay as decay_mod
from streamdp.release import noisy as noisy_mod
from streamdp.release import octaves as octaves_mod
from streamdp.release import policy as policy_mod
from streamdp.release import tree as tree_mod
from streamdp.release import variance as variance_mod
from streamdp.release.continual import (
    NOISE_BLOCK,
    PLAIN_OCTAVES,
    STREAM_CHUNK,
    UNITS,
    Counter,
    Node,
    ReleasePolicy,
    TreeState,
    class_total_sd,
    closing_nodes,
    node_units,
    node_windows,
    noisy_node,
    published_variance,
    tree_variance_factor,
    window_delta,
    window_end,
    window_index,
    window_units,
    windows_due,
)
from streamdp.release.octaves import containing_nodes, decomposition, leaf, window_octave

Z = 5.0
P_FAIL = 1e-6


@pytest.mark.parametrize(
    "module", [continual, policy_mod, octaves_mod, tree_mod, decay_mod, counter_mod, variance_mod, noisy_mod]
)
def test_doctests(module):
    assert doctest.testmod(module).failed == 0


# -- the policy -----------------------------------------------------------------------


def test_policy_round_trips_through_msgpack_and_prints():
    for p in (
        ReleasePolicy(),
        ReleasePolicy("batch"),
        ReleasePolicy("tree", 0.5),
        ReleasePolicy("window", half_life=30.0, half_life_unit="records"),
        ReleasePolicy("tree", 0.5, levels=7, estimator="decomposition"),  # a stored fixed-horizon tree
    ):
        d = msgpack.unpackb(msgpack.packb(p.to_dict()), raw=False)
        assert ReleasePolicy.from_dict(d) == p
    assert ReleasePolicy().kind == "window" and ReleasePolicy().release_every == 1.0
    assert "no horizon" in str(ReleasePolicy("tree")) and "no longer run" in str(ReleasePolicy("tree", levels=7))
    assert "half-life of 30 records" in str(ReleasePolicy("window", half_life=30.0, half_life_unit="records"))


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"kind": "stream"}, "release"),
        ({"release_every": 0}, "release_every"),
        ({"release_every": math.nan}, "release_every"),
        ({"release_every": True}, "release_every"),
        ({"kind": "tree", "levels": 0}, "levels"),
        ({"kind": "tree", "levels": 49}, "levels"),
        ({"kind": "tree", "levels": 2.0}, "levels"),
        ({"kind": "window", "levels": 3}, "levels"),
        ({"estimator": "mean"}, "estimator"),
        ({"kind": "tree", "estimator": "decomposition"}, "estimator"),
        ({"half_life": 0.0}, "half_life"),
        ({"half_life": math.inf}, "half_life"),
        ({"kind": "tree", "half_life": 5.0}, "half_life"),
        ({"half_life": 5.0, "half_life_unit": "days"}, "half_life_unit"),
    ],
)
def test_policy_refuses_bad_settings_naming_them(kwargs, word):
    with pytest.raises(ValueError, match=word):
        ReleasePolicy(**kwargs)


def test_policy_from_dict_refuses_missing_or_extra_keys():
    d = ReleasePolicy().to_dict()
    with pytest.raises(ValueError, match="release policy"):
        ReleasePolicy.from_dict({**d, "code": "x"})
    with pytest.raises(ValueError, match="release policy"):
        ReleasePolicy.from_dict({k: v for k, v in d.items() if k != "levels"})
    with pytest.raises(ValueError, match="release policy"):
        ReleasePolicy.from_dict({**d, "half_life": 3.0})  # without its unit
    with pytest.raises(ValueError, match="release policy"):
        ReleasePolicy.from_dict([1, 2])
    # earlier versions stored their default levels with every kind: those policies load as they were
    stored = {"kind": "window", "release_every": 1.0, "levels": 20, "estimator": "honaker"}
    assert ReleasePolicy.from_dict(stored) == ReleasePolicy("window")


def test_node_epsilon_is_one_unit_for_tree_and_the_whole_epsilon_otherwise():
    assert ReleasePolicy("batch").node_epsilon(2.0) == 2.0
    assert ReleasePolicy("window").node_epsilon(2.0) == 2.0
    assert ReleasePolicy("tree").node_epsilon(2.0) == 2.0 / UNITS
    assert ReleasePolicy("tree", levels=8).node_epsilon(2.0) == 0.25  # a stored fixed-horizon tree
    assert ReleasePolicy("tree").node_epsilon(math.inf) == math.inf
    with pytest.raises(ValueError, match="epsilon_per_tree"):
        ReleasePolicy("tree").node_epsilon(0)
    with pytest.raises(ValueError, match="geometric"):
        ReleasePolicy("tree").check_mechanism("kanon")
    ReleasePolicy("window").check_mechanism("kanon")


# -- the schedule -----------------------------------------------------------------------


def test_window_index_and_end_agree():
    start, every = 1000.25, 0.5
    for w in range(1, 200):
        assert window_index(window_end(w, start, every) - 1e-6, start, every) == w
        assert window_index(window_end(w, start, every), start, every) == w + 1
    with pytest.raises(ValueError, match="before"):
        window_index(999.0, start, every)
    assert list(windows_due(start + 3.2, start, every, released=2)) == [3, 4, 5, 6]
    assert list(windows_due(start - 5, start, every, released=0)) == []


def test_every_window_spends_exactly_its_units_and_each_node_closes_once_at_its_last_window():
    """The privacy allocation: over all the released nodes that hold it, each window is noised with exactly
    UNITS units (the per-tree epsilon): every window to 2**13, then a sample to 2**40. Every released node
    has one units value for all its windows (a node is released as units times its sum) and closes once."""
    assert all(window_units(w) == UNITS for w in range(1, 2**13 + 1))
    gen = np.random.default_rng(0)
    assert all(window_units(int(w)) == UNITS for w in gen.integers(2**14, 2**40, 300))
    seen = set()
    for t in range(1, 2**11 + 1):
        for n in closing_nodes(t):
            assert n not in seen and n.units > 0 and node_windows(n)[-1] == t, (t, n)
            seen.add(n)
        for n in containing_nodes(t):
            assert t in node_windows(n) and n.units > 0
    for n in seen:  # the windows a node holds are exactly those that list it
        assert all(n in containing_nodes(w) for w in node_windows(n)), n
    m, _ = window_octave(300)
    assert node_units(Node(m, 0, leaf(m, 0) + 1)) == 0  # a right child: never noised


def test_the_estimate_covers_each_window_once_with_closed_nodes_only():
    """Inside an octave, S(t) adds the left children at the set bits of the next window's leaf: closed
    nodes that hold windows 2^m + 1 .. t exactly once."""
    closed = set()
    for t in range(1, 5000):
        closed.update(closing_nodes(t))
        m, i = window_octave(t)
        if m < 0 or i + 1 == 2**m:
            continue
        nodes = decomposition(m, leaf(m, i + 1))
        assert set(nodes) <= closed, t
        ws = sorted(w for n in nodes for w in node_windows(n))
        assert ws == list(range(2**m + 1, t + 1)), t


def test_noisy_node_keeps_integers_and_padding_and_refuses_bad_input():
    rng = SecureRandom()
    exact = np.arange(12, dtype=np.int64).reshape(3, 4)
    real = np.ones((3, 4), bool)
    real[2, 2:] = False
    exact[2, 2:] = 0
    y = noisy_node(exact, 0.5, "geometric", rng, real)
    assert y.dtype == np.int64 and np.all(y[2, 2:] == 0)
    assert np.any(y[real] != exact[real])  # P(all 10 noises are 0) = ((1-a)/(1+a))**10 < 1e-6
    assert noisy_node(exact, 1.0, "laplace", rng).dtype == np.float64
    assert noisy_node(exact, 1.0, "kanon", rng, k=5).tolist() == [[0, 0, 0, 0], [0, 5, 6, 7], [8, 9, 0, 0]]
    with pytest.raises(ValueError, match="integers"):
        noisy_node(exact.astype(float), 1.0, "geometric", rng)
    with pytest.raises(ValueError, match="real mask"):
        noisy_node(exact, 1.0, "geometric", rng, real[:2])
    with pytest.raises(ValueError, match="mechanism"):
        noisy_node(exact, 1.0, "gauss", rng)


def test_the_stream_layout_of_older_keyed_models_is_kept_byte_for_byte():
    """Models created before the "blocks" layout redraw (after a rollback) exactly what they drew first:
    the digests below were computed with the code of that time (commit b5c38e8)."""
    import hashlib

    n = STREAM_CHUNK + 4099  # the chunked path and a partial last chunk
    exact = np.arange(n, dtype=np.int64) % 7
    real = np.arange(n) % 5 != 3
    a = noisy_node(exact, 1.0, "geometric", SecureRandom.from_key(b"k" * 32, b"pin/old-layout", layout="stream"), real)
    assert hashlib.sha256(a.tobytes()).hexdigest() == "c72ea8ea57fa3eb42954632c4294f09f47026bc61da37d945728deca3454b25a"
    b = noisy_node(
        exact[:1000], 0.5, "laplace", SecureRandom.from_key(b"k" * 32, b"pin/old-layout-small", layout="stream")
    )
    assert hashlib.sha256(b.tobytes()).hexdigest() == "31f61f0897102c3a5780c65270397249036c17302d468e024689051540c294df"


def test_the_block_layout_is_pinned():
    """The "blocks" layout is part of every keyed release's definition (a redraw after a rollback must be
    the same draw): the digests below pin it (derivation of children, NOISE_BLOCK, the samplers)."""
    import hashlib

    n = 2 * NOISE_BLOCK + 777
    exact = np.arange(n, dtype=np.int64) % 7
    real = np.arange(n) % 5 != 3
    a = noisy_node(exact, 1.0, "geometric", SecureRandom.from_key(b"k" * 32, b"pin/blocks"), real)
    assert hashlib.sha256(a.tobytes()).hexdigest() == "2497c2421c99b1050774cca2a04e22f0e41b673a9b05f5e21e2a184b9e50c04e"
    b = noisy_node(exact[:1000], 0.5, "laplace", SecureRandom.from_key(b"k" * 32, b"pin/blocks-small"))
    assert hashlib.sha256(b.tobytes()).hexdigest() == "5358a7f3387705b6f400d9dfe895ae93dccb057f36d00f5c2cd40bb98035d5f9"


@pytest.mark.parametrize("layout", ["blocks", "stream"])
def test_input_that_is_not_c_contiguous_is_noised_everywhere(layout):
    """Before the "blocks" layout, a Fortran-ordered input of more than one chunk came back with NO noise (the
    noise went into a flat copy). Every real cell now gets its draw, in both layouts, in place or not."""
    exact = np.asfortranarray(np.zeros((1100, 1000), np.int64))  # 1.1 M cells: beyond one 2^20 chunk
    for in_place in (False, True):
        out = noisy_node(exact, 0.5, "geometric", SecureRandom.from_key(bytes(32), b"f", layout), in_place=in_place)
        # P(a two-sided geometric at 0.5 is 0) = 0.245: about 830 k nonzero cells of 1.1 M
        assert np.count_nonzero(out) > 0.7 * out.size


def test_block_layout_draws_each_block_from_its_own_child():
    """Each block of NOISE_BLOCK cells is drawn from its own child generator: a release's first blocks are
    those of a shorter release under the same key and context (and mask), whatever the counts."""
    key = bytes(range(32))
    n = 3 * NOISE_BLOCK + 1000
    real = np.random.default_rng(0).random(n) < 0.7
    long = noisy_node(np.zeros(n, np.int64), 1.0, "geometric", SecureRandom.from_key(key, b"m/window/1"), real)
    short = noisy_node(
        np.zeros(2 * NOISE_BLOCK, np.int64),
        1.0,
        "geometric",
        SecureRandom.from_key(key, b"m/window/1"),
        real[: 2 * NOISE_BLOCK],
    )
    assert np.array_equal(long[: 2 * NOISE_BLOCK], short) and not long[~real].any()
    # block by block, by hand: child b draws the real cells of block b in C order
    rng = SecureRandom.from_key(key, b"m/window/1")
    for b in range(4):
        m = real[b * NOISE_BLOCK : (b + 1) * NOISE_BLOCK]
        assert np.array_equal(
            long[b * NOISE_BLOCK : (b + 1) * NOISE_BLOCK][m], geometric_noise(int(m.sum()), 1.0, rng.spawn())
        )
    other = noisy_node(np.zeros(n, np.int64), 1.0, "geometric", SecureRandom.from_key(key, b"m/window/2"), real)
    assert np.mean(other[real] == long[real]) < 0.5  # another context: independent noise (P(equal) ~0.46 per cell)
    # counts shift the result and nothing else (in place or not)
    exact = np.arange(n, dtype=np.int64) % 3
    again = noisy_node(exact.copy(), 1.0, "geometric", SecureRandom.from_key(key, b"m/window/1"), real, in_place=True)
    assert np.array_equal(again[real] - exact[real], long[real])


def test_block_layout_draws_are_independent_across_blocks_and_geometric():
    """Fresh noise over 4 blocks: the two-sided geometric (chi-square) and no correlation between a cell and the
    same cell of the next block (another child generator); failure probability about 1e-6 each."""
    n = 4 * NOISE_BLOCK
    x = noisy_node(np.zeros(n, np.int64), 0.7, "geometric", SecureRandom())
    ks = np.arange(-40, 41)
    p = geometric_pmf(ks, 0.7)
    obs = np.bincount(np.clip(x, -40, 40) + 40, minlength=81).astype(float)
    p[0] += geometric_pmf(np.arange(-400, -40), 0.7).sum()
    p[-1] += geometric_pmf(np.arange(41, 400), 0.7).sum()
    keep = p * n > 5
    exp_ = np.append(p[keep] * n, p[~keep].sum() * n)
    got = np.append(obs[keep], obs[~keep].sum())
    assert stats.chisquare(got, exp_ * got.sum() / exp_.sum()).pvalue > P_FAIL
    r = np.corrcoef(x[:-NOISE_BLOCK], x[NOISE_BLOCK:])[0, 1]
    assert abs(r) < 5.3 / math.sqrt(n - NOISE_BLOCK)  # |z| > 5.3: probability ~1e-7


def test_an_empty_window_is_released_as_pure_noise():
    d = window_delta(None, (50_000,), 1.0, "geometric", SecureRandom())
    assert d.shape == (50_000,) and d.dtype == np.int64
    a = math.exp(-1.0)
    assert abs(np.mean(d == 0) - (1 - a) / (1 + a)) < 0.01  # the geometric's mass at 0, within ~5 sd
    with pytest.raises(ValueError, match="shape"):
        window_delta(np.zeros(3, np.int64), (4,), 1.0, "geometric", SecureRandom())


@pytest.mark.parametrize(
    "kind, mechanism",
    [("window", "geometric"), ("tree", "geometric"), ("tree", "laplace"), ("batch", "geometric")],
)
def test_without_noise_every_policy_publishes_the_exact_running_counts(kind, mechanism):
    c = Counter(ReleasePolicy(kind), (2, 2), math.inf, SecureRandom(), mechanism)
    gen = np.random.default_rng(3)
    total = np.zeros((2, 2), np.int64)
    for t in range(1, 300):  # past the plain windows, into octave 8's tree
        x = gen.integers(0, 9, (2, 2))
        total += x
        c.add(x)
        if kind != "batch":
            c.close()
        assert np.array_equal(c.published, total) and c.releases == t
    assert c.published.dtype == (np.float64 if mechanism == "laplace" else np.int64)


def test_kanon_window_thresholds_each_window_and_tree_refuses_kanon():
    c = Counter(ReleasePolicy("window"), (3,), 1.0, SecureRandom(), "kanon", k=3)
    c.add(np.array([1, 3, 5]))
    c.close()
    c.add(np.array([2, 2, 2]))
    c.close()
    assert c.published.tolist() == [0, 3, 5]
    with pytest.raises(ValueError, match="tree"):
        Counter(ReleasePolicy("tree"), (3,), 1.0, SecureRandom(), "kanon", k=3)


class CountingRandom(SecureRandom):
    """Records the size of every noise draw."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple] = []

    def bits(self, size=()):  # every variate the samplers use is built from these words
        self.calls.append(tuple(np.atleast_1d(size)))
        return super().bits(size)

    def random_bytes(self, n):
        self.calls.append(("bytes", n))
        return super().random_bytes(n)

    def spawn(self):  # noisy_node draws each block from a child: its draws are recorded here too
        self.calls.append(("spawn",))
        child = CountingRandom()
        child.calls = self.calls
        return child


@pytest.mark.parametrize("kind", ["window", "tree"])
def test_releases_and_noise_draws_depend_on_the_clock_only(kind):
    """Two very different streams (lots of data at random times, none at all) over the same
    clock: the same number of releases at every instant and the same noise draws."""
    policy = ReleasePolicy(kind, release_every=0.25)
    gen = np.random.default_rng(1)
    busy, idle = (Counter(policy, (2, 3), 1.0, CountingRandom(), start=100.0) for _ in range(2))
    times = np.sort(gen.uniform(100.0, 110.0, 500))
    for now in times:
        busy.add(gen.integers(0, 5, (2, 3)), now=now)
        idle.tick(now)
        assert busy.releases == idle.releases == math.floor((now - 100.0) / 0.25)
    busy.tick(112.0)
    idle.tick(112.0)
    assert busy.releases == idle.releases == 48  # past the plain windows
    assert busy.rng.calls == idle.rng.calls and len(busy.rng.calls) > 0


def test_tree_state_round_trips_and_refuses_bad_bytes_and_wrong_nodes():
    policy = ReleasePolicy("tree")
    c = Counter(policy, (2, 3), 1.0, SecureRandom())
    for _ in range(301):
        c.add(np.ones((2, 3), np.int64))
        c.close()
    s = TreeState.from_bytes(c.state.to_bytes())
    assert s.t == 301 and np.array_equal(s.sums, c.state.sums) and np.array_equal(s.est, c.state.est)
    assert np.array_equal(s.block, c.state.block) and np.array_equal(s.carry, c.state.carry)
    assert np.array_equal(s.published(), c.published)
    with pytest.raises(blob.BlobError):
        TreeState.from_bytes(c.state.to_bytes()[:-5])
    bad = msgpack.unpackb(c.state.to_bytes(), raw=False)
    bad["policy"]["kind"] = "window"
    with pytest.raises(blob.BlobError, match="tree"):
        TreeState.from_bytes(msgpack.packb(bad))
    bad = msgpack.unpackb(c.state.to_bytes(), raw=False)
    bad["t"] = 600  # arrays of 301 windows' open and closed nodes
    with pytest.raises(blob.BlobError, match="levels"):
        TreeState.from_bytes(msgpack.packb(bad))
    closing = closing_nodes(302)
    assert set(s.closing_sums(None)) == set(closing)
    with pytest.raises(ValueError, match="releases nodes"):
        s.advance(None, {Node(8, 0, 1): np.zeros((2, 3))})
    with pytest.raises(ValueError, match="window tally"):
        s.closing_sums(np.zeros((3, 2), np.int64))


def test_a_stored_fixed_horizon_tree_is_refused_with_a_clear_error_and_its_policy_still_loads():
    """A model of an earlier version (the fixed-horizon tree, state format 1): its policy loads, so its
    published versions stay readable; continuing it is refused, naming why."""
    old = ReleasePolicy.from_dict({"kind": "tree", "release_every": 1.0, "levels": 20, "estimator": "honaker"})
    assert old.fixed_horizon and old.node_epsilon(1.0) == 1 / 20
    with pytest.raises(ValueError, match="fixed-horizon binary tree"):
        TreeState.empty(old, (2,))
    z = {"dtype": "<i8", "shape": [19, 2], "data": bytes(19 * 2 * 8)}
    state_v1 = blob.dumps(
        continual.STATE_FORMAT,
        1,
        {"policy": old.to_dict(), "t": 3, "sums": z, "est": z, "carry": z},
    )
    with pytest.raises(blob.BlobError, match="fixed-horizon binary tree.*create a new model"):
        TreeState.from_bytes(state_v1)
    # and its published noise variance is still the fixed tree's
    v = 2.0
    assert published_variance(old, 3, v) == pytest.approx((1 + 2 / 3) * v)


def test_a_stored_state_of_the_octaves_of_full_dyadic_trees_is_refused_with_a_clear_error():
    """A ``tree`` model's worker state of the previous layout (format 2, nodes "u:level:index"): refused
    naming why (its policy is the same, so its published versions load)."""
    z = {"dtype": "<i8", "shape": [3, 2], "data": bytes(3 * 2 * 8)}
    f = {"dtype": "<f8", "shape": [4, 2], "data": bytes(4 * 2 * 8)}
    state_v2 = blob.dumps(
        continual.STATE_FORMAT,
        2,
        {"policy": ReleasePolicy("tree").to_dict(), "t": 5, "shape": [2], "sums": z, "est": f},
    )
    with pytest.raises(blob.BlobError, match="octaves of full dyadic trees.*create a new model"):
        TreeState.from_bytes(state_v2)


@pytest.mark.parametrize("horizon", [280, pytest.param(540, marks=pytest.mark.long)])
def test_the_estimate_is_unbiased_with_the_closed_form_variance_near_least_squares(horizon):
    """The published estimate is linear in the released ``y / c`` (each of variance ``(UNITS / c)**2`` plain
    windows): its coefficients sum every window once (unbiased), its variance is
    :func:`tree_variance_factor`, and it is within 2% of the weighted least-squares estimate's from every
    released node (which it equals while no octave's smooth tree has a redundant node)."""
    nodes = [n for t in range(1, horizon + 1) for n in closing_nodes(t)]
    col = {n: j for j, n in enumerate(nodes)}
    state = TreeState.empty(ReleasePolicy("tree"), (len(nodes),))
    checks = {1, 5, 256, 257, 258, 264, 272, 288, 300, 400, 511, 512, 513, 540}
    for t in range(1, horizon + 1):
        noisy = {}
        for n in closing_nodes(t):
            y = np.zeros(len(nodes))
            y[col[n]] = n.units  # node n's y / c is 1: the estimate's coefficient on it
            noisy[n] = y
        state = state.advance(None, noisy)
        if t not in checks:
            continue
        coef = state.estimate()
        done = [n for n in nodes if col[n] < len(col) and node_windows(n)[-1] <= t]
        A = np.array([[1.0 if w in node_windows(n) else 0.0 for w in range(1, t + 1)] for n in done])
        a = np.array([coef[col[n]] for n in done])
        assert np.allclose(a @ A, 1.0), t  # unbiased: every window of 1..t once
        sd = np.array([UNITS / n.units for n in done])
        var = float(np.sum((a * sd) ** 2))
        assert tree_variance_factor(t) == pytest.approx(var, rel=1e-9), t
        G = np.linalg.pinv(A / sd[:, None])
        wls = float(np.sum((np.ones(t) @ G) ** 2))
        assert wls <= var * (1 + 1e-9) and var <= 1.02 * wls, (t, var, wls)


# -- variance --------------------------------------------------------------------------


def _geometric_moments(eps: float) -> tuple[float, float]:
    k = np.arange(-20000, 20001)
    p = geometric_pmf(k, eps)
    return float((p * k**2).sum()), float((p * k.astype(float) ** 4).sum())


@pytest.mark.parametrize("kind", ["window", "tree"])
def test_published_variance_matches_the_noise_of_the_published_counts(kind):
    """The published counts' error has the variance :func:`published_variance` says (a z test with the
    sample's own fourth moment; 20,000 cells per check)."""
    eps, n = 1.0, 20_000
    policy = ReleasePolicy(kind)
    v = cell_variance("geometric", policy.node_epsilon(eps))
    if kind == "window":
        assert v == pytest.approx(_geometric_moments(eps)[0], rel=1e-9)
    c = Counter(policy, (n,), eps, SecureRandom(), mechanism="geometric")
    checks = {1, 2, 256, 257, 258, 300, 400, 512}  # plain windows, then octave 8's tree and its end
    for t in range(1, max(checks) + 1):
        c.add(np.full(n, 3, np.int64))
        c.close()
        if t not in checks:
            continue
        est = c.state.estimate() if kind == "tree" else c.published.astype(float)
        err = est - 3 * t
        var = published_variance(policy, t, v)
        if kind == "tree" and t <= 2**PLAIN_OCTAVES:
            assert var == pytest.approx(t * v / UNITS**2)  # the plain window sum's
        sq = err**2
        s2, se = float(sq.mean()), float(sq.std() / math.sqrt(n))
        assert abs(s2 - var) < Z * se, (t, s2, var, se)


# -- empirical epsilon audit -----------------------------------------------------------------


def _max_ratio_lower_bound(a: np.ndarray, b: np.ndarray, bins: int) -> float:
    """Largest lower confidence bound on P_a(bin)/P_b(bin) or P_b/P_a over the bins."""
    alpha = P_FAIL / (bins * 2 * 2)  # Bonferroni: the bins, two directions, two intervals each
    best = 0.0
    for x, y in ((a, b), (b, a)):
        for k in range(bins):
            cx, cy = int(np.sum(x == k)), int(np.sum(y == k))
            lo = stats.binomtest(cx, x.size).proportion_ci(1 - 2 * alpha, "exact").low
            hi = stats.binomtest(cy, y.size).proportion_ci(1 - 2 * alpha, "exact").high
            best = max(best, lo / hi)
    return best


@pytest.mark.long
def test_empirical_epsilon_audit_of_the_tree_mechanism():
    """Neighbouring streams: one more record in window 257, the first window of octave 8, which lies in three
    released nodes (two left children at 0.425 of the units each, released at windows 257 and 279, and the
    octave's root at 0.15, released at window 512). The joint distribution of the estimates released at those
    windows differs by at most e^eps in every bin; the same audit rejects the nodes noised at 2.35 times
    their epsilon. The windows before are released without noise (their nodes hold neither stream's extra
    record; exact is the audit's worst case)."""
    eps, n = 1.0, 200_000
    policy = ReleasePolicy("tree")
    assert [node_windows(nd)[-1] for nd in containing_nodes(AUDITED[0])] == list(AUDITED)
    a = _run_tree_stream(policy, eps, n, 0)
    b = _run_tree_stream(policy, eps, n, 1)
    assert _max_ratio_lower_bound(a, b, 8) <= math.exp(eps)
    wrong = policy.node_epsilon(eps) * 2.35
    wrong_a = _run_tree_stream(policy, eps, n, 0, node_eps=wrong)
    wrong_b = _run_tree_stream(policy, eps, n, 1, node_eps=wrong)
    assert _max_ratio_lower_bound(wrong_a, wrong_b, 8) > math.exp(eps)


AUDITED = (257, 279, 512)


def _run_tree_stream(
    policy: ReleasePolicy, eps: float, n: int, extra: int, node_eps: float | None = None
) -> np.ndarray:
    """N independent runs (one per cell) of a 512-window stream, ``extra`` records in window 257 and the
    releases before it exact; the bucketed joint output at the audited windows."""
    c = Counter(policy, (n,), math.inf, SecureRandom())
    outs, exact = [], 0
    for t in range(1, AUDITED[-1] + 1):
        if t == AUDITED[0]:
            c.epsilon_node = policy.node_epsilon(eps) if node_eps is None else node_eps
        x = 1 + (t % 3) + (extra if t == AUDITED[0] else 0)
        exact += 1 + (t % 3)
        c.add(np.full(n, x, np.int64))
        c.close()
        if t in AUDITED:
            outs.append(c.state.estimate() > exact)
    return np.stack(outs, axis=1) @ (1 << np.arange(len(AUDITED)))


def test_release_windows_shorter_than_the_minimum_are_refused_at_create_but_stored_ones_load():
    """A user's 1 ms windows: 20,008 releases in 20 s, each a noise draw on every count (below the majority).
    New models are refused; a policy stored before the rule still loads (a review: its model could not run)."""
    import fakeredis

    from streamdp.records.datasets import load
    from streamdp.release.continual import MIN_RELEASE_EVERY
    from streamdp.service.registry import create_model

    r = fakeredis.FakeRedis(server=fakeredis.FakeServer(), version=(7, 0))
    schema = load("congressional-voting").schema
    with pytest.raises(ValueError, match=r"release_every \(seconds\) must be at least 0.01, got 0.001"):
        create_model(r, "m", schema, n_trees=2, height=2, epsilon=1.0, release="window", release_every=0.001)
    assert not r.keys("*")
    create_model(r, "m", schema, n_trees=2, height=2, epsilon=1.0, release="window", release_every=MIN_RELEASE_EVERY)
    assert ReleasePolicy.from_dict(ReleasePolicy("window", 0.001).to_dict()).release_every == 0.001


@pytest.mark.parametrize("budget", ["split", "disjoint"])
def test_class_total_sd_is_the_stumps_published_noise(budget):
    """``model show``'s noise line: the stumps' variance as the forest itself tracks it, window and grow."""
    from streamdp import PrivateForest
    from streamdp.records.datasets import load

    ds = load("congressional-voting")
    for kind in ("window", "grow"):
        f = PrivateForest.create(ds.schema, n_trees=4, height=3, epsilon=1.0, budget=budget, prior_trees=2, seed=0)
        for lo in range(0, 300, 100):
            (f.grow if kind == "grow" else f.update)(ds.X[lo : lo + 100], ds.y[lo : lo + 100])
        T = f.n_trees
        stump = f.node_variance[T:, 0] if kind == "grow" else f.noise_variance[T:]
        expected = math.sqrt(1.0 / np.sum(1.0 / stump)) * (f.n_released_trees if budget == "disjoint" else 1.0)
        got = class_total_sd(ReleasePolicy(kind), f.n_releases, 1.0, "geometric", budget, T, 2)
        assert got == pytest.approx(expected, rel=1e-9), kind
    assert class_total_sd(ReleasePolicy("window"), 5, 1.0, "kanon", "split", 4, 1) is None
    assert class_total_sd(ReleasePolicy("tree"), 0, 1.0, "geometric", "split", 4, 1) == 0.0  # nothing released yet
    assert class_total_sd(ReleasePolicy("window"), 5, math.inf, "geometric", "split", 4, 1) == 0.0
    # continual counting: less noise on a count than the windows' sum
    assert class_total_sd(ReleasePolicy("tree"), 10_000, 1.0, "geometric", "split", 10, 1) < class_total_sd(
        ReleasePolicy("window"), 10_000, 1.0, "geometric", "split", 10, 1
    )


@pytest.mark.parametrize("eps", [1.0, 0.1])
def test_the_tree_is_within_1_3x_of_the_window_sum_early_and_below_the_fixed_l20_tree_over_every_octave(eps):
    """The contract in closed forms (benchmarks/results/continual_table.md): sd within 1.3x of the plain window
    sum for T <= 16 (and up to 256 windows); over each octave [2^k, 2^(k+1)) for k = 11..22, both the mean
    variance and the largest at most the fixed-horizon L=20 tree's (whose error jumps with the bits of T);
    below the window sum at every T from 400 windows on."""
    from streamdp.release.variance import fixed_horizon_variance

    tree, window = ReleasePolicy("tree"), ReleasePolicy("window")
    v_unit, v_window = cell_variance("geometric", tree.node_epsilon(eps)), cell_variance("geometric", eps)
    v_node20 = cell_variance("geometric", eps / 20)
    for t in range(1, 257):
        assert published_variance(tree, t, v_unit) <= 1.3**2 * published_variance(window, t, v_window), t
    gen = np.random.default_rng(0)
    for k in range(11, 23):
        ts = gen.integers(2**k, 2 ** (k + 1), 200)
        new = [published_variance(tree, int(t), v_unit) for t in ts]
        fixed = [fixed_horizon_variance(20, "honaker", int(t), v_node20) for t in ts]
        assert np.mean(new) <= np.mean(fixed) and max(new) <= max(fixed), k
    for t in list(range(400, 3000)) + [10**4, 10**5, 10**6, 10**7]:
        assert published_variance(tree, t, v_unit) < published_variance(window, t, v_window), t


@pytest.mark.parametrize("layout", ["blocks", "stream"])
@pytest.mark.parametrize("mechanism", ["geometric", "laplace"])
def test_real_rows_noise_what_the_real_mask_noises(layout, mechanism):
    """A release noised through the forest's real rows (no counts-sized mask) is the release the boolean mask
    gives, value for value, under the same key: the layouts are unchanged, padding stays exactly 0."""
    from streamdp.forest.model import PrivateForest
    from streamdp.records.datasets import load
    from streamdp.release.continual import RealRows

    f = PrivateForest.create(load("adult").schema, n_trees=3, height=7, seed=2)
    assert f.counts.size > 3 * continual.NOISE_BLOCK and not f.real_cells.all()  # several blocks, with padding
    assert isinstance(f.real_rows, RealRows)
    assert np.array_equal(f.real_rows.mask(0, f.counts.size).reshape(f.shape), f.real_cells)
    exact = np.random.default_rng(0).integers(0, 5, f.shape) * f.real_cells  # (a tally: nothing in the padding)
    draws = [
        continual.noisy_node(exact, 1.0, mechanism, SecureRandom.from_key(b"k" * 32, b"rows", layout), real)
        for real in (f.real_cells, f.real_rows)
    ]
    assert np.array_equal(draws[0], draws[1])
    assert not draws[1][~f.real_cells].any() and (draws[1][f.real_cells] != exact[f.real_cells]).any()
    with pytest.raises(ValueError, match="does not match"):
        continual.noisy_node(exact[:1], 1.0, mechanism, SecureRandom(), f.real_rows)


def test_real_rows_mask_any_block():
    """:meth:`RealRows.mask` of any block is that block of the whole mask (rows empty, partial, full, and
    blocks that start or end inside a row)."""
    from streamdp.release.continual import RealRows

    rng = np.random.default_rng(5)
    for _ in range(200):
        rows, size = int(rng.integers(1, 41)), int(rng.integers(1, 12))  # (a few rows or many in a block)
        rr = RealRows(rng.integers(0, size + 1, rows), size, (rows, size))
        whole = np.arange(size)[None, :] < rr.lengths[:, None]
        s = int(rng.integers(0, rows * size))
        e = int(rng.integers(s, rows * size + 1))
        assert np.array_equal(rr.mask(s, e), whole.reshape(-1)[s:e])
