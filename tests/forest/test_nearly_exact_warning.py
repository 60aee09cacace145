"""An epsilon so large that a release is nearly exact warns where the model is made, as ``model create`` does.

One rule (:func:`streamdp.release.variance.warn_nearly_exact`, the sd the service's ``release_noise`` states):
``PrivateForest.create`` and river's ``PrivateForestClassifier`` warn once, naming what the user made and pointing
at the user's line; the service's ``create_model`` leaves it to ``model create`` (which words it for the model's
release policy); the demo prints it as ``model create`` does.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

import streamdp
from streamdp import NearlyExactWarning, NotPrivateWarning, PrivateForest
from streamdp.records.datasets import load
from streamdp.release.policy import ReleasePolicy
from streamdp.release.variance import nearly_exact_epsilon
from streamdp.service.noise_facts import release_noise

SCHEMA = load("congressional-voting").schema


def _caught(make):
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        made = make()
    return made, [w for w in got if issubclass(w.category, (NearlyExactWarning, NotPrivateWarning))]


def test_the_warning_is_public_beside_not_private_warning():
    assert "NearlyExactWarning" in streamdp.__all__ and issubclass(NearlyExactWarning, UserWarning)
    assert not issubclass(NearlyExactWarning, NotPrivateWarning)  # silencing one does not silence the other


@pytest.mark.parametrize("mechanism", ["geometric", "laplace"])
@pytest.mark.parametrize("budget", ["split", "disjoint"])
def test_create_warns_above_the_bound_model_create_states_and_not_at_it(mechanism, budget):
    bound = nearly_exact_epsilon(ReleasePolicy("batch"), mechanism, budget, 5, 1)
    facts = release_noise(
        {"release": ReleasePolicy("batch").to_dict(), "epsilon": 2 * bound, "mechanism": mechanism,
         "budget": budget, "n_trees": 5, "prior_trees": 1},
        scheduled=False,
    )  # fmt: skip
    assert facts["nearly_exact_above"] == bound  # the service says the same of this model
    kw = {"n_trees": 5, "height": 2, "mechanism": mechanism, "budget": budget, "seed": 1}
    _, got = _caught(lambda: PrivateForest.create(SCHEMA, epsilon=2 * bound, **kw))
    assert [w.category for w in got] == [NearlyExactWarning]
    msg = str(got[0].message)
    assert msg.startswith(f"PrivateForest.create: epsilon={2 * bound:g} releases nearly exact counts")
    assert f"an epsilon of {bound:g} or less" in msg and got[0].filename == __file__  # the user's line
    _, got = _caught(lambda: PrivateForest.create(SCHEMA, epsilon=bound, **kw))
    assert got == []


def test_no_nearly_exact_warning_for_an_ordinary_epsilon_infinity_or_k_anonymity():
    _, got = _caught(lambda: PrivateForest.create(SCHEMA, n_trees=5, height=2, epsilon=1.0, seed=1))
    assert got == []
    _, got = _caught(lambda: PrivateForest.create(SCHEMA, n_trees=5, height=2, epsilon=float("inf"), seed=1))
    assert [w.category for w in got] == [NotPrivateWarning]  # inf is not private at all: that warning alone
    make = lambda: PrivateForest.create(  # noqa: E731
        SCHEMA, n_trees=5, height=2, epsilon=1000.0, mechanism="kanon", k=20, beta=0.5, seed=1
    )
    _, got = _caught(make)
    assert got == []


def test_the_river_classifier_warns_once_in_its_own_name():
    from streamdp.river import PrivateForestClassifier

    _, got = _caught(lambda: PrivateForestClassifier(SCHEMA, n_trees=5, height=2, epsilon=1000.0))
    assert [w.category for w in got] == [NearlyExactWarning], [str(w.message) for w in got]
    assert str(got[0].message).startswith("PrivateForestClassifier: epsilon=1000 releases nearly exact counts")
    assert got[0].filename == __file__
    _, got = _caught(lambda: PrivateForestClassifier(SCHEMA, n_trees=5, height=2, epsilon=1.0))
    assert got == []


def test_create_model_leaves_the_warning_to_model_create():
    fakeredis = pytest.importorskip("fakeredis")
    pytest.importorskip("lupa")
    from streamdp.service.registry import create_model

    r = fakeredis.FakeRedis(server=fakeredis.FakeServer(), version=(7, 0))

    _, got = _caught(lambda: create_model(r, "m", SCHEMA, n_trees=3, height=3, epsilon=1000.0, seed=1))
    assert got == []  # (model create prints the service's words, for the model's release policy)


@pytest.mark.slow
def test_the_demo_says_so_at_a_nearly_exact_epsilon(redis_url):
    r = subprocess.run(
        [sys.executable, "-m", "streamdp.cli", "--redis-url", redis_url, "demo", "--epsilon", "500"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "streamdp: WARNING: epsilon 500" in r.stderr and "releases nearly exact counts" in r.stderr
