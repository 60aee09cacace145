"""``model create``, ``show`` and ``list`` say when a model's counts are exact or nearly so (real Redis).

A review found ``--epsilon 1e6`` accepted, stored private and shown as "noise per cell sd 0.0" with no word, and
models made with epsilon=inf (before the service refused it) served with nothing to flag them.
"""

from __future__ import annotations

import json
import logging
import math
import warnings

import pytest

from streamdp.cli import main
from streamdp.privacy import NotPrivateWarning
from streamdp.records.datasets import load
from streamdp.release.policy import ReleasePolicy
from streamdp.release.variance import NEARLY_EXACT_SD, release_cell_sd
from streamdp.service.registry import create_model, show_model
from streamdp.service.stream_worker import Worker

pytestmark = pytest.mark.redis
DS = load("congressional-voting")


@pytest.mark.parametrize("epsilon,trees", [("1e6", "10"), ("50", "2")])
def test_a_nearly_exact_epsilon_is_warned_at_create_and_by_show(redis_url, unique_name, capsys, epsilon, trees):
    u = ["--redis-url", redis_url]
    create = ["model", "create", unique_name, "--schema", "congressional-voting", "--epsilon", epsilon]
    assert main(u + create + ["--trees", trees]) == 0  # not refused: the budget is the owner's choice
    err = capsys.readouterr().err
    assert "WARNING" in err and "releases nearly exact counts" in err and "below half a record" in err
    info = show_model(redis_url, unique_name)
    assert info["private"] is True and info["cell_sd"] < NEARLY_EXACT_SD
    above = info["nearly_exact_above"]  # the epsilon named: the largest whose noise is at least half a record
    assert f"an epsilon of {above:g} or less would add at least that much" in err
    args = (ReleasePolicy.from_dict(info["release"]), "geometric", "split", info["n_trees"], info["prior_trees"])

    def sd(eps: float) -> float:
        return release_cell_sd(args[0], eps, *args[1:])

    assert sd(above) >= NEARLY_EXACT_SD > sd(above * 1.01)
    assert main(u + ["model", "show", unique_name]) == 0
    out = capsys.readouterr().out
    assert "  WARNING: epsilon" in out and f"an epsilon of {above:g} or less" in out
    assert main(u + ["model", "show", unique_name, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["nearly_exact_above"] == above


def test_a_usual_epsilon_gets_no_warning(redis_url, unique_name, capsys):
    u = ["--redis-url", redis_url]
    create = ["model", "create", unique_name, "--schema", "congressional-voting", "--epsilon", "1", "--trees", "2"]
    assert main(u + create) == 0
    assert "WARNING" not in capsys.readouterr().err
    assert "nearly_exact_above" not in show_model(redis_url, unique_name)
    assert main(u + ["model", "show", unique_name]) == 0
    assert main(u + ["model", "list"]) == 0
    out = capsys.readouterr().out
    assert "WARNING" not in out and not [ln for ln in out.splitlines() if unique_name in ln and "NOT private" in ln]


def test_a_model_with_infinite_epsilon_is_flagged_by_create_show_list_and_worker(
    redis_url, unique_name, capsys, caplog
):
    with warnings.catch_warnings(record=True) as got:  # create_model(not_private=True) warns once, itself
        warnings.simplefilter("always")
        create_model(redis_url, unique_name, DS.schema, n_trees=2, height=2, epsilon=math.inf, not_private=True)
    assert [w.category for w in got] == [NotPrivateWarning] and "NOT private" in str(got[0].message)
    info = show_model(redis_url, unique_name)
    assert info["private"] is False and "nearly_exact_above" not in info  # (not nearly exact: exact)
    u = ["--redis-url", redis_url]
    assert main(u + ["model", "show", unique_name]) == 0
    assert "  WARNING: NOT private: this model's counts are released exact" in capsys.readouterr().out
    assert main(u + ["model", "list"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(unique_name)]
    assert len(lines) == 1 and lines[0].endswith("NOT private")
    with caplog.at_level(logging.WARNING):
        Worker(redis_url, unique_name, block_ms=1)
    logged = [json.loads(r.getMessage()) for r in caplog.records if "worker.not_private" in r.getMessage()]
    assert len(logged) == 1 and logged[0]["model"] == unique_name and "NOT private" in logged[0]["hint"]
    assert set(logged[0]) == {"ts", "event", "model", "hint"}  # value-free: the model's name and the words
