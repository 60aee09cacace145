"""The secure generator (fresh, keyed, seeded) and the exact geometric sampler.

Statistical tests draw from the secure source (fresh each run) with a fixed
failure probability of about 1e-6 (chi-square p-value threshold 1e-6).
"""

from __future__ import annotations

import bisect
import math
import os
import pickle
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from streamdp.privacy import noise
from streamdp.privacy.noise import geometric_noise, geometric_pmf
from streamdp.privacy.secure_random import NotPrivateWarning, SecureRandom

P_FAIL = 1e-6


# -- generator -------------------------------------------------------------------------


def test_keyed_stream_is_a_function_of_key_and_context():
    key = os.urandom(32)
    a = geometric_noise(1000, 0.5, SecureRandom.from_key(key, b"model/batch-1"))
    b = geometric_noise(1000, 0.5, SecureRandom.from_key(key, b"model/batch-1"))
    c = geometric_noise(1000, 0.5, SecureRandom.from_key(key, b"model/batch-2"))
    d = geometric_noise(1000, 0.5, SecureRandom.from_key(os.urandom(32), b"model/batch-1"))
    assert np.array_equal(a, b)  # a redraw is the same draw
    assert not np.array_equal(a, c) and not np.array_equal(a, d)  # P(equal) < 0.5**1000
    rng = SecureRandom.from_key(key, b"x")
    assert rng.private and rng.keyed


def test_keyed_stream_is_stable_across_versions():
    """The keyed stream is part of the rollback contract: a new release of streamdp must redraw the same noise."""
    rng = SecureRandom.from_key(bytes(range(32)), b"model-a/7")
    assert rng.random_bytes(8).hex() == SecureRandom.from_key(bytes(range(32)), b"model-a/7").random_bytes(8).hex()
    # HKDF-SHA256 -> AES-256-CTR, nonce 0; pinned so a change of derivation cannot pass silently
    assert rng.random_bytes(8).hex() == _pinned_second_block()


def _pinned_second_block() -> str:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    k = HKDF(hashes.SHA256(), 32, None, b"streamdp noise stream v1\x00model-a/7").derive(bytes(range(32)))
    return Cipher(algorithms.AES(k), modes.CTR(bytes(16))).encryptor().update(bytes(16))[8:16].hex()


def test_copies_never_carry_a_key():
    import copy
    import pickle

    rng = SecureRandom()
    assert not np.array_equal(copy.deepcopy(rng).bits(64), rng.bits(64))  # freshly keyed, P(equal) = 2**-4096
    with pytest.warns(NotPrivateWarning):
        seeded = SecureRandom(seed=5)
    assert np.array_equal(pickle.loads(pickle.dumps(seeded)).bits(3), seeded.bits(3))  # tests stay reproducible
    with pytest.raises(TypeError, match="secret"):
        pickle.dumps(SecureRandom.from_key(os.urandom(32), b"c"))


def test_children_are_deterministic_under_a_key_distinct_and_never_the_parents_stream():
    key = os.urandom(32)
    a, b = SecureRandom.from_key(key, b"ctx"), SecureRandom.from_key(key, b"ctx")
    a_children = [a.spawn().bits(64) for _ in range(3)]
    b.bits(5)  # drawing from the parent's own stream does not move its children
    assert all(np.array_equal(x, b.spawn().bits(64)) for x in a_children)
    main = SecureRandom.from_key(key, b"ctx").bits(64)
    words = np.concatenate([main, *a_children])
    assert np.unique(words).size == words.size  # P(a repeat among 256 words) < 2**-48
    child = a.spawn()
    assert child.keyed and child.private and child.layout == "blocks"
    with pytest.raises(TypeError, match="secret"):
        pickle.dumps(child)
    fresh = SecureRandom()
    assert not np.array_equal(fresh.spawn().bits(64), fresh.spawn().bits(64))
    with pytest.warns(NotPrivateWarning):
        seeded = SecureRandom(seed=3)
    copy_ = pickle.loads(pickle.dumps(seeded))
    assert np.array_equal(seeded.spawn().bits(4), copy_.spawn().bits(4))  # tests stay reproducible
    with pytest.raises(ValueError, match="layout"):
        SecureRandom.from_key(key, b"ctx", layout="chunks")


def test_keyed_refuses_short_key_and_non_bytes_context():
    with pytest.raises(ValueError, match="32"):
        SecureRandom.from_key(b"short", b"c")
    with pytest.raises(TypeError):
        SecureRandom.from_key(os.urandom(32), "text")


def test_seeded_mode_unchanged():
    with pytest.warns(NotPrivateWarning):
        r = SecureRandom(seed=3)
    expected = np.random.default_rng(3).integers(0, 2**64, size=5, dtype=np.uint64)
    assert np.array_equal(r.bits(5), expected) and not r.private


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_does_not_replay_the_parent_stream():
    rng = SecureRandom()
    rng.bits(1)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.write(w, rng.random_bytes(32))
        os._exit(0)
    os.close(w)
    child = os.read(r, 32)
    os.waitpid(pid, 0)
    assert len(child) == 32 and child != rng.random_bytes(32)


def test_bits_are_uniform_bytes():
    b = np.frombuffer(SecureRandom().random_bytes(2_560_000), dtype=np.uint8)
    res = stats.chisquare(np.bincount(b, minlength=256).astype(float))
    assert res.pvalue > P_FAIL


# -- exact geometric sampler -------------------------------------------------------------


def _chi_square_two_sided(x: np.ndarray, eps: float, bins: int = 60) -> float:
    """Chi-square p-value of integer draws against the two-sided geometric, over equal-mass bins."""
    a = math.exp(-eps)
    half = int(math.ceil(40 / eps))
    ks = np.arange(-half, half + 1)
    cdf = np.cumsum(geometric_pmf(ks, eps))
    edges = np.unique(np.searchsorted(cdf, np.linspace(0, 1, bins + 1)[1:-1]))
    cuts = ks[edges]  # bin i is (cuts[i-1], cuts[i]]
    obs = np.bincount(np.searchsorted(cuts, x, side="left"), minlength=len(cuts) + 1)
    p_le = np.concatenate([cdf[edges], [1.0]])
    p = np.diff(np.concatenate([[0.0], p_le]))
    assert abs(p.sum() - 1) < 1e-9 and a > 0
    return stats.chisquare(obs.astype(float), p * x.size).pvalue


@pytest.mark.parametrize("eps", [3.0, 0.05, 0.004, 2e-5])
def test_geometric_sampler_chi_square(eps):
    """0.05 and 3: one folded table; 0.004 and 2e-5: two geometrics of split stages."""
    x = geometric_noise(400_000, eps, SecureRandom())
    assert _chi_square_two_sided(x, eps) > P_FAIL
    if eps < 0.01:
        assert not noise._fits(eps)  # the split-stage path really ran


def test_geometric_sampler_sign_and_zero():
    eps = 0.9
    x = geometric_noise(600_000, eps, SecureRandom())
    a = math.exp(-eps)
    p0 = (1 - a) / (1 + a)
    for count, p in ((np.sum(x == 0), p0), (np.sum(x > 0), (1 - p0) / 2)):
        assert abs(count - p * x.size) < 5 * math.sqrt(x.size * p * (1 - p))


def test_thresholds_are_the_exact_tail_probabilities():
    """T_r / 2**128 is P(R >= r) to 2**-128 (checked with exact rationals against a 60-digit a)."""
    import decimal

    for st in (noise._folded(0.3), noise._stages(1e-3)[0], noise._stages(1e-3)[1]):
        with decimal.localcontext() as ctx:
            ctx.prec = 80
            a = (-decimal.Decimal(st.lam)).exp()
            for r in (1, 2, 7, st.top // 2, st.top):
                t = Fraction(-st._neg[r - 1], 2**128)
                ar = a**r
                if st is noise._folded(0.3):
                    s = 2 * ar / (1 + a)
                elif st.top == noise._TABLE - 1:
                    aL = a**noise._TABLE
                    s = (ar - aL) / (1 - aL)
                else:
                    s = ar
                assert abs(t - Fraction(s)) <= Fraction(1, 2**128)


class _FixedBits:
    """A stand-in generator that returns given words (to reach the 128-bit decision path)."""

    _test_rng = None

    def __init__(self, words):
        self.words = list(words)

    def bits(self, n):
        out, self.words = self.words[:n], self.words[n:]
        return np.array(out, dtype=np.uint64)


def test_exact_path_decides_words_at_a_threshold():
    st = noise._folded(0.2)
    thresholds = [2**128] + [-t for t in st._neg]
    rs = [1, 2, 5, 30]
    his = [thresholds[r] >> 64 for r in rs]
    # low words: u = T_r exactly (so R = r - 1), and u at the start of T_r's top word (R >= r)
    for los in ([thresholds[r] & (2**64 - 1) for r in rs], [0] * len(rs)):
        got = st.draw(_FixedBits(his + los), len(rs))
        want = [sum(1 for t in thresholds[1:] if ((h << 64) | lo) < t) for h, lo in zip(his, los)]
        assert got.tolist() == want
    assert want != [r - 1 for r in rs]  # the second case really differs from the first


@pytest.mark.parametrize("stage", ["folded 0.3", "folded 0.09", "block", "geometric tail"])
def test_guide_buckets_give_the_exact_inverse(stage):
    """Every bucket's first and last word, the words at and next to each threshold, random words:
    the sampler's R is #{r >= 1: u < T_r} (buckets without a threshold are not checked word by word)."""
    st = {
        "folded 0.3": lambda: noise._folded(0.3),
        "folded 0.09": lambda: noise._folded(0.09),
        "block": lambda: noise._stages(1e-3)[0],
        "geometric tail": lambda: noise._stages(1e-3)[1],
    }[stage]()
    neg = st._neg
    b = np.arange(1 << 16, dtype=np.uint64) << np.uint64(48)
    at = np.array(sorted({min(-t >> 64, 2**64 - 1) for t in neg}), dtype=np.uint64)
    rnd = np.frombuffer(np.random.default_rng(1).bytes(8 * 20_000), dtype=np.uint64)
    his = np.concatenate([b, b | np.uint64(2**48 - 1), at, at - np.uint64(1), at + np.uint64(1), rnd])
    lo = 0x9E3779B97F4A7C15  # the same low word wherever the 128-bit path asks for one
    got = st.draw(_FixedBits(his.tolist() + [lo] * len(his)), len(his))
    want = [bisect.bisect_left(neg, -((h << 64) | lo)) for h in his.tolist()]
    assert got.tolist() == want
    assert (st.guide < 0).sum() <= len(neg)  # at most one checked bucket per threshold
