"""A ``tree`` model stored by an earlier version (the fixed-horizon binary tree): readable, and refused with a clear
error when a worker would continue it (fakeredis)."""

from __future__ import annotations

import json

import numpy as np
import pytest

fakeredis = pytest.importorskip("fakeredis")
pytest.importorskip("lupa")

from streamdp import blob  # noqa: E402
from streamdp.records.datasets import load  # noqa: E402
from streamdp.release.continual import STATE_FORMAT, ReleasePolicy  # noqa: E402
from streamdp.service.consumer import Consumer  # noqa: E402
from streamdp.service.keys import REGISTRY, Keys  # noqa: E402
from streamdp.service.registry import create_model, load_policy, show_model  # noqa: E402
from streamdp.service.stream_worker import Worker  # noqa: E402

DS = load("congressional-voting")
OLD = {"kind": "tree", "release_every": 10.0, "levels": 20, "estimator": "honaker"}


@pytest.fixture
def r():
    return fakeredis.FakeRedis(server=fakeredis.FakeServer(), version=(7, 0))


def _as_stored_by_an_earlier_version(r, name: str, released: int) -> None:
    """Rewrite a fresh tree model's policy and state as the fixed-horizon tree's of an earlier version."""
    k = Keys(name)
    r.hset(k.state, mapping={"release": json.dumps(OLD), "releases": released, "open": released + 1})
    r.hset(k.pub_model, "release", json.dumps(OLD))
    summary = json.loads(r.hget(REGISTRY, name))
    r.hset(REGISTRY, name, json.dumps({**summary, "release": OLD}))
    spec_shape = Consumer(r, name).latest().counts.shape
    z = np.zeros((19, *spec_shape), "<i8")
    e = np.zeros((20, *spec_shape), "<f8")
    state = {
        "policy": OLD,
        "t": released,
        "sums": blob.pack_array(z),
        "est": blob.pack_array(e),
        "carry": blob.pack_array(np.zeros(spec_shape, "<f8")),
    }
    r.set(k.tree, blob.dumps(STATE_FORMAT, 1, state))


def test_an_old_fixed_horizon_tree_model_is_readable_and_its_worker_refuses_it_naming_why(r):
    create_model(r, "old", DS.schema, n_trees=2, height=2, epsilon=1.0, release="tree", release_every=10.0)
    _as_stored_by_an_earlier_version(r, "old", released=3)
    policy, start = load_policy(r, "old")
    assert policy == ReleasePolicy.from_dict(OLD) and policy.fixed_horizon
    info = show_model(r, "old")  # what `model show` reads
    assert info["release"] == OLD
    assert Consumer(r, "old").latest().version == 0  # the published versions stay readable
    w = Worker(r, "old", block_ms=1)
    with pytest.raises(Exception, match="fixed-horizon binary tree"):
        w.closer.tick(start + 4 * 10.0 + 0.001)
    k = Keys("old")
    assert int(r.hget(k.state, "releases")) == 3 and Consumer(r, "old").latest().version == 0  # nothing released
