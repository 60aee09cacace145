"""``streamdp demo``'s waiting rule (fakeredis): it waits for the workers to read every pushed record and for the
window holding them to be released, and names the step that did not happen when it times out."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

fakeredis = pytest.importorskip("fakeredis")
pytest.importorskip("lupa")

from streamdp.cli.demo import MARGIN_SD, default_batch_size, wait_published  # noqa: E402
from streamdp.estimation import cell_variance  # noqa: E402
from streamdp.records.datasets import load  # noqa: E402
from streamdp.release.cadence import KEEP_Z, keeps, release_total, total_sd  # noqa: E402
from streamdp.service.consumer import Consumer  # noqa: E402
from streamdp.service.keys import GROUP, Keys  # noqa: E402
from streamdp.service.producer import Producer  # noqa: E402
from streamdp.service.registry import create_model  # noqa: E402

DS = load("congressional-voting")


@pytest.fixture
def r():
    return fakeredis.FakeRedis(server=fakeredis.FakeServer(), version=(7, 0))


def _model(r, name="demo"):
    return create_model(
        r, name, DS.schema, n_trees=5, height=3, epsilon=1.0, budget="disjoint", release_every=0.25, max_lag=1.0
    )


def test_default_batch_stands_clear_of_the_merge_threshold(r):
    """Each default batch's total stands MARGIN_SD sd above the keep_z sd a release must clear, the sd counting the
    release noise and the disjoint budget's routing (a batch sized on the noise alone was left out, often enough to
    see); the batches are equal (no short last one)."""
    f = _model(r)
    sd = total_sd(cell_variance(f.mechanism, f.epsilon_per_tree, f.k), 2, f.prior_trees, "disjoint", 6)
    b = default_batch_size(f, 300)
    assert 300 % b == 0 and b - KEEP_Z * sd >= MARGIN_SD * math.sqrt(sd**2 + 5 * b)  # (6 rows: 5 per record)
    more = 300 // (300 // b + 1)  # one batch more: each would not stand clear
    assert more - KEEP_Z * sd < MARGIN_SD * math.sqrt(sd**2 + 5 * more)


def test_default_batches_are_merged_as_the_release_draws_them():
    """The demo's release of a default batch, drawn 1,000 times (routing and noise as a window's release draws them):
    left out at most 16 times. A default batch stands 2.5 sd clear (about 2.6 at 100 records: a left-out one has
    probability at most about 0.5% by the normal bound, 4.7 expected), so this fails by chance with probability
    below 1e-5; batches sized on
    the noise alone (75 here: about 2.8%, 28 expected) fail it."""
    from streamdp import PrivateForest

    f = PrivateForest.create(DS.schema, n_trees=5, height=3, epsilon=1.0, budget="disjoint", seed=0)
    b = default_batch_size(f, 300)
    sd = total_sd(cell_variance(f.mechanism, f.epsilon_per_tree, f.k), 2, f.prior_trees, "disjoint", 6)
    rng = np.random.default_rng(5)
    left_out = 0
    for _ in range(1000):
        idx = rng.choice(len(DS.y), b, replace=False)
        g = PrivateForest.create(DS.schema, n_trees=5, height=3, epsilon=1.0, budget="disjoint", seed=0)
        g.fit(DS.X[idx], DS.y[idx])
        left_out += not keeps(release_total(g.counts[5:, 0], "disjoint", 6), sd, KEEP_Z)
    assert left_out <= 16


def test_wait_names_unread_records_when_no_worker_reads(r):
    _model(r)
    with Producer(r, "demo", batch_size=10) as p, Consumer(r, "demo") as c:
        p.push(DS.X[:10], DS.y[:10])
        with pytest.raises(TimeoutError, match=r"did not read the pushed records .*0 worker\(s\).*workers running"):
            wait_published(c, c.version(), timeout=0.2, poll_s=0.01)


def test_wait_names_the_unreleased_window_and_sees_a_left_out_one(r):
    """Records read, no release yet: the error says so; once the schedule moves past them with the version
    unchanged (a left-out window) the wait returns None, not a timeout."""
    _model(r)
    keys = Keys("demo")
    with Consumer(r, "demo") as c:
        assert any(g["name"] in (GROUP, GROUP.encode()) for g in r.xinfo_groups(keys.records))  # nothing pushed
        with pytest.raises(TimeoutError, match="read every pushed record but released no window"):
            wait_published(c, 0, timeout=0.2, poll_s=0.01)
        sched = json.loads(r.hget(keys.pub_model, "schedule"))
        sched.update(released=1, end=sched["end"] + 1e9, length=1.0)  # the open window begins in the future
        r.hset(keys.pub_model, "schedule", json.dumps(sched))
        assert wait_published(c, 0, timeout=5, poll_s=0.01) is None
