"""The compiled one-record path (streamdp/river/_kernel.c) gives the plain-Python path's objects and floats.

Every comparison runs one model with the kernel and a twin (same seed: same
structure, same noise) without it, record by record across releases, on
binary, multi-class, numeric, categorical and mixed schemas, with perturbed
records (missing, None, NaN, booleans, strings, numpy scalars, out of range,
undeclared values) that the kernel hands back to Python.
"""

from __future__ import annotations

import math
import os
import random

import numpy as np
import pytest

pytest.importorskip("river")
from river import datasets  # noqa: E402

from streamdp import estimation  # noqa: E402
from streamdp.estimation import rule  # noqa: E402
from streamdp.river import (
    PrivateForestClassifier,  # noqa: E402
    kernel,  # noqa: E402
)
from streamdp.river import schemas as rs  # noqa: E402
from streamdp.river.encoding import RecordEncoder  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::streamdp.privacy.NotPrivateWarning")

needs_kernel = pytest.mark.skipif(
    not kernel.available(), reason="the C kernel is not built (pip install -e . builds it)"
)

ODD = [
    None,
    float("nan"),
    True,
    False,
    "zz",
    np.float32(3.5),
    np.int64(2),
    np.bool_(True),
    -1e30,
    1e30,
    7,
    2.0,
    1,
    0.5,
    2**60,
    -(2**60),
]


@pytest.fixture
def no_kernel(monkeypatch):
    """Models made under this fixture run the plain-Python path."""
    monkeypatch.setattr(kernel, "_kernel", None)


def _twins(make, monkeypatch):
    fast = make()
    with monkeypatch.context() as mp:
        mp.setattr(kernel, "_kernel", None)
        slow = make()
    assert fast._view._k is not None and slow._view._k is None
    assert type(slow.encoder._fast).__name__ == "function"
    return fast, slow


def _perturbed(x: dict, rng: random.Random) -> dict:
    z = dict(x)
    k = rng.choice(list(z))
    r = rng.random()
    if r < 0.2:
        del z[k]
    else:
        z[k] = rng.choice(ODD)
    return z


STREAMS = [
    ("agrawal", rs.agrawal_schema, lambda: datasets.synth.Agrawal(seed=3), "geometric"),  # numeric + categorical
    ("agrawal-laplace", rs.agrawal_schema, lambda: datasets.synth.Agrawal(seed=4), "laplace"),  # non-integer counts
    ("led", rs.led_schema, lambda: datasets.synth.LED(seed=3), "geometric"),  # ten classes: the general chain
    ("sea", rs.sea_schema, lambda: datasets.synth.SEA(seed=3), "geometric"),  # numeric only, integer keys
    ("stagger", rs.stagger_schema, lambda: datasets.synth.STAGGER(seed=3), "geometric"),  # categorical only
    ("mixed", rs.mixed_schema, lambda: datasets.synth.Mixed(seed=3), "geometric"),  # boolean categories
    ("phishing", rs.phishing_schema, lambda: datasets.Phishing(), "geometric"),  # float categories
    ("segments", rs.image_segments_schema, lambda: datasets.ImageSegments(), "laplace"),  # seven classes
]


@needs_kernel
@pytest.mark.parametrize("estimator", ["shrink", "leaf"])
@pytest.mark.parametrize("name, schema, gen, mechanism", STREAMS, ids=[s[0] for s in STREAMS])
def test_kernel_predictions_equal_the_python_path(monkeypatch, name, schema, gen, mechanism, estimator):
    fast, slow = _twins(
        lambda: PrivateForestClassifier(
            schema(), n_trees=7, guard=0, batch_size=300, first_batch=50, mechanism=mechanism, seed=9
        ),
        monkeypatch,
    )
    fast.forest.estimator = slow.forest.estimator = estimator
    rng = random.Random(1)
    checked = handed_back = 0
    for i, (x, y) in enumerate(gen().take(1500)):
        xs = [x, _perturbed(x, rng)] if i % 5 == 0 else [x]
        for z in xs:
            assert fast.encoder.encode_one(z) == slow.encoder.encode_one(z) or _same_with_nan(
                fast.encoder.encode_one(z), slow.encoder.encode_one(z)
            )
            want = slow.predict_proba_one(z)
            got = fast.predict_proba_one(z)
            assert got == want, (i, z)
            assert [type(v) for v in got.values()] == [type(v) for v in want.values()]
            assert fast.predict_one(z) == slow.predict_one(z) == max(want, key=want.get)  # river's argmax
            k = fast._view._k.predict(z)
            assert k is None or fast.encoder.label_values[k] == slow.predict_one(z)
            handed_back += fast._view._k.proba(z) is None
            checked += 1
        fast.learn_one(x, y)
        slow.learn_one(x, y)
    assert fast.n_releases == slow.n_releases >= 4
    assert np.array_equal(fast.forest.counts, slow.forest.counts)  # nothing learned differently
    assert checked > 1.15 * (i + 1) and handed_back < checked / 2  # the kernel answered most records itself


def _same_with_nan(a: list, b: list) -> bool:
    return [type(v) for v in a] == [type(v) for v in b] and all(u == w or (u != u and w != w) for u, w in zip(a, b))


@needs_kernel
def test_kernel_encoder_returns_the_generated_encoders_objects():
    """encode_one through the kernel: the same values and types as the generated Python encoder and the
    attribute loop, on generated and perturbed records; integers too large for a double are handed back."""
    rng = random.Random(0)
    for schema, gen in [
        (rs.agrawal_schema(), datasets.synth.Agrawal(seed=1)),
        (rs.led_schema(), datasets.synth.LED(seed=1)),
        (rs.sea_schema(), datasets.synth.SEA(seed=1)),
        (rs.phishing_schema(), datasets.Phishing()),
        (rs.mixed_schema(), datasets.synth.Mixed(seed=1)),
    ]:
        enc = RecordEncoder(schema)
        py = enc._compile_python()
        assert type(enc._fast).__name__ == "builtin_function_or_method"
        for x, _ in gen.take(300):
            for z in [x, {k: v for k, v in list(x.items())[1:]}, *(_perturbed(x, rng) for _ in range(4))]:
                a, b, c = enc._fast(z), py(z), enc._encode(z)
                assert _same_with_nan(a, b) and _same_with_nan(a, c)


@needs_kernel
@pytest.mark.parametrize("C", [2, 3, 7, 10])
def test_kernel_chain_equals_path_proba_one(C):
    """The C chain against streamdp.estimation.path_proba_one on random pooled rows and root numbers:
    noise-swamped, negative, tiny and large totals; the same floats."""
    rng = np.random.default_rng(C)
    consts = kernel.constants()
    for _ in range(3000):
        h = int(rng.integers(1, 9))
        scale = 10.0 ** rng.uniform(-1, 4)
        rows = []
        for _d in range(h):
            y = (rng.normal(size=C) * scale + rng.uniform(-1, 3) * scale).tolist()
            v = float(rng.choice([0.0, -1.0, rng.uniform(0, 4) * scale**2]))
            rows += [*y, v]
        prior = rng.dirichlet(np.ones(C)).tolist()
        r0 = float(rng.choice([0.0, rng.uniform(0, 10) * scale]))
        v0 = float(rng.choice([0.0, rng.uniform(0, 40) * scale**2]))
        assert kernel._kernel.chain(rows, prior, r0, v0, *consts) == estimation.path_proba_one(rows, prior, r0, v0)


@needs_kernel
def test_kernel_sum_is_the_left_to_right_sum():
    """The column sums are estimation.seq_sum's, left to right as numpy adds the trees' rows (not Python 3.12's
    compensated sum(), which would give other last bits than the vectorised path)."""
    rng = np.random.default_rng(0)
    for _ in range(2000):
        xs = (rng.normal(size=int(rng.integers(1, 40))) * 10.0 ** rng.integers(-8, 16, size=1)).tolist()
        if rng.random() < 0.3:
            xs += [1e16, -1e16, 1.0, -0.0]
        rng.shuffle(xs)
        want = np.zeros(1)
        for x in xs:  # the vectorised path's order: one row after another onto zeros
            want += x
        assert kernel._kernel.py_sum(xs) == estimation.seq_sum(xs) == rule._left_to_right(xs) == want[0]


@needs_kernel
def test_kernel_follows_windows_and_the_vote_rule(monkeypatch):
    """A windowed model (deltas subtracted again) and the majority vote (not the kernel's rule: the Python path)."""
    data = list(datasets.synth.Agrawal(seed=5).take(2500))
    for kw in ({"window": 2}, {"vote": "majority"}):
        fast, slow = _twins(
            lambda kw=kw: PrivateForestClassifier(
                rs.agrawal_schema(), n_trees=5, guard=0, batch_size=200, seed=4, **kw
            ),
            monkeypatch,
        )
        for x, y in data:
            assert fast.predict_proba_one(x) == slow.predict_proba_one(x)
            fast.learn_one(x, y)
            slow.learn_one(x, y)
        if kw.get("vote") == "majority":
            assert fast._view._k.proba(data[0][0]) is None  # not the kernel's rule: Python answers


def test_without_the_kernel_the_python_path_runs(no_kernel):
    """STREAMDP_NO_KERNEL or no build: nothing compiled is used, and the model still predicts and learns."""
    assert not kernel.available() and kernel.new_kernel(RecordEncoder(rs.agrawal_schema())._spec, dict) is None
    m = PrivateForestClassifier(rs.agrawal_schema(), batch_size=200, seed=1)
    assert m._view._k is None and type(m.encoder._fast).__name__ == "function"
    for x, y in datasets.synth.Agrawal(seed=2).take(500):
        p = m.predict_proba_one(x)
        assert math.isclose(sum(p.values()), 1.0)
        m.learn_one(x, y)
    assert m.n_releases >= 2


def test_disabled_by_environment(monkeypatch):
    monkeypatch.setenv("STREAMDP_NO_KERNEL", "1")
    assert not kernel.available()
    assert PrivateForestClassifier(rs.agrawal_schema())._view._k is None


@needs_kernel
def test_a_bound_not_exact_as_a_double_keeps_the_python_path():
    spec = list(RecordEncoder(rs.sea_schema())._spec)
    name, alt, lookup, lo, hi, mid = spec[0]
    spec[0] = (name, alt, lookup, lo, 2**60 + 1, mid)
    assert kernel.new_kernel(spec, dict) is None


@pytest.mark.skipif(not os.environ.get("CI"), reason="CI only: a developer's editable install may predate the kernel")
def test_ci_builds_the_kernel():
    """CI installs with pip on a machine with a C compiler: the optional build must not have failed silently."""
    assert kernel._kernel is not None, "streamdp/river/_kernel.c was not built: see pip's build log (setup.py)"
    assert kernel.available(), "the built kernel mirrors another estimate than streamdp.river.kernel.CHAIN"


@needs_kernel
def test_a_kernel_built_from_other_source_keeps_the_python_path(monkeypatch):
    """A build whose chain mirrors another estimate (an install older than the code) is not used."""
    monkeypatch.setattr(kernel, "CHAIN", kernel.CHAIN + 1)
    assert not kernel.available()
    assert kernel.new_kernel(list(RecordEncoder(rs.sea_schema())._spec), dict) is None
