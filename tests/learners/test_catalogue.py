"""The catalogue of algorithms and the parameter rules: one entry per algorithm, matching its class."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

from streamdp.learners import load_model
from streamdp.learners.catalogue import ALGORITHMS, FORMATS, AlgorithmError, algorithm, by_format, learners
from streamdp.records.datasets import load
from streamdp.validation import check_delta, check_epsilon, check_integer, check_probability

VOTES = load("congressional-voting")


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_catalogue_defaults_are_the_class_defaults(name):
    a = ALGORITHMS[name]
    cls = a.cls()
    sig = inspect.signature(cls.create if a.is_forest else cls.__init__).parameters
    for p in a.params:
        assert p.name in sig, f"{name}: {p.name} is not a parameter of {cls.__name__}"
        if p.name not in a.required:
            assert sig[p.name].default == p.default, f"{name}: {p.name} default differs from the class"
            p.rule.check(p.default, p.name)  # every default passes its own rule
    if not a.is_forest:
        assert cls.FORMAT == a.format


def test_the_scorer_names_are_the_scorers():
    from streamdp.learners import catalogue as algorithms
    from streamdp.learners.scorers import SCORERS

    assert algorithms.SCORERS == tuple(SCORERS)


def test_formats_decode_every_model_including_the_forest():
    from streamdp import PrivateForest

    assert set(FORMATS) == {a.format for a in ALGORITHMS.values()}
    f = PrivateForest.create(VOTES.schema, n_trees=2, height=2)
    assert isinstance(load_model(f.to_bytes()), PrivateForest)
    assert by_format("streamdp.dpea").learner == "DPEA"
    with pytest.raises(AlgorithmError, match="unknown model format"):
        by_format(["not", "a", "tag"])


def test_window_learners_are_the_batch_learners():
    assert set(learners()) == {"dpea", "sulq-id3", "diffp-id3", "diffp-c45", "hanisch-forest"}


def test_parameters_are_checked_by_name_and_rule():
    a = algorithm("dpea")
    assert a.check_params({"embed_depth": "whole"}) == {"embed_depth": "whole"}
    with pytest.raises(AlgorithmError, match="dpea: embed_depth must be an integer in \\[1, 20\\] or one of 'whole'"):
        a.check_params({"embed_depth": "half"})
    with pytest.raises(AlgorithmError, match="has no parameter 'depth'"):
        a.check_params({"depth": 3})
    with pytest.raises(AlgorithmError, match="noise_seed is for tests only"):
        a.check_params({"noise_seed": 1})
    with pytest.raises(AlgorithmError, match="unknown algorithm"):
        algorithm("nope")


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, True, "1", None])
def test_epsilon_rule(bad):
    with pytest.raises(ValueError, match="epsilon must be a finite number > 0"):
        check_epsilon(bad)


def test_epsilon_variants():
    assert check_epsilon(math.inf, allow_inf=True) == math.inf
    assert check_epsilon(0, allow_zero=True) == 0.0
    assert check_epsilon(np.float64(0.5)) == 0.5
    with pytest.raises(ValueError, match="inf for no noise"):
        check_epsilon(math.nan, allow_inf=True)


@pytest.mark.parametrize(
    "bad, word", [(-1e-9, ">= 0"), (1.0, "< 1"), (math.nan, ">= 0"), (math.inf, ">= 0"), (False, ">= 0")]
)
def test_delta_rule(bad, word):
    with pytest.raises(ValueError, match=f"delta must be .*{word}"):
        check_delta(bad)


def test_sizes_and_probabilities():
    assert check_integer(np.int64(3), "n_trees") == 3
    for bad in (0, 2.0, True, 1001):
        with pytest.raises(ValueError, match="n_trees must be an integer in"):
            check_integer(bad, "n_trees", high=1000)
    assert check_probability(1.0, "beta", closed="right") == 1.0
    for bad in (0.0, 1.0, math.nan):
        with pytest.raises(ValueError, match=r"cf must be a number in \(0, 1\)"):
            check_probability(bad, "cf", closed="neither")


# -- issue 12 item 12: every job parameter is bounded, and checked before the ledger is charged ----------
@pytest.mark.parametrize(
    "algo, params, word",
    [
        ("dpea", {"step_limit": 10**10}, "step_limit must be an integer in [1, 100000]"),
        ("dpea", {"exact_max_levels": 29}, "exact_max_levels must be an integer in [1, 3]"),
        ("hanisch-forest", {"n_trees": 10**7}, "n_trees must be an integer in [1, 1000]"),
        ("private-rdt", {"n_trees": 10**7}, "n_trees must be an integer in [1, 1000]"),
        ("diffp-id3", {"max_depth": 29, "scorer": "gini"}, "max_depth must be an integer in [0, 20]"),
    ],
)
def test_out_of_bounds_job_is_refused_before_the_ledger_is_charged(algo, params, word):
    from streamdp.jobs.runner import JobError, JobSpec, run_job
    from streamdp.privacy.ledger import InMemoryLedger

    led = InMemoryLedger()
    led.set_budget("votes", 10.0)

    def load():
        raise AssertionError("the data was read for a job that cannot run")

    with pytest.raises(JobError, match=word.replace("[", r"\[").replace("]", r"\]")):
        run_job(JobSpec(algo, 1.0, params), VOTES.schema, load, led, "votes", "job-big")
    assert led.spends("votes") == [] and led.spent("votes") == (0.0, 0.0)


@pytest.mark.parametrize("name", sorted(learners()))
def test_every_learner_refuses_to_predict_before_fit(name):
    """Not a silent class 0: scikit-learn's NotFittedError contract (a ValueError and an AttributeError)."""
    from streamdp.validation import NotFittedError

    ds = load("congressional-voting")
    model = learners()[name].cls()(ds.schema)
    for call in (lambda: model.predict(ds.X[:3]), lambda: model.predict_proba(ds.X[:3]), model.to_bytes):
        with pytest.raises(NotFittedError, match="not fitted") as e:
            call()
        assert isinstance(e.value, ValueError) and isinstance(e.value, AttributeError)
