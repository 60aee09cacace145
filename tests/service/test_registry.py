"""The model registry on fakeredis (Lua via lupa): create, list, show, delete, and what a create refuses."""

from __future__ import annotations

import math

import numpy as np
import pytest

fakeredis = pytest.importorskip("fakeredis")
pytest.importorskip("lupa")

from streamdp import PrivateForest  # noqa: E402
from streamdp.service.consumer import Consumer  # noqa: E402
from streamdp.service.keys import Keys, check_name  # noqa: E402
from streamdp.service.ledger_store import RedisLedger  # noqa: E402
from streamdp.service.producer import Producer  # noqa: E402
from streamdp.service.registry import ModelExists, ModelNotFound, create_model, delete_model, list_models, show_model  # noqa: E402
from tests.service.conftest import DS, _model  # noqa: E402

# create_model(not_private=True)'s own NotPrivateWarning, expected here
pytestmark = pytest.mark.filterwarnings("ignore:model .*NOT private:streamdp.privacy.secure_random.NotPrivateWarning")


# -- registry ---------------------------------------------------------------------------
def test_registry_create_list_show_delete(r):
    f = _model(r, "a")
    assert f.version == 0
    with pytest.raises(ModelExists):
        _model(r, "a")
    assert list(list_models(r)) == ["a"]
    info = show_model(r, "a")
    assert info["version"] == 0 and info["batches_merged"] == 0 and info["epsilon"] == 1.0
    assert info["class_total_sd"] == 0.0  # no release yet: no noise on anything
    c = Consumer(r, "a").latest()
    assert c.version == 0 and not c.counts.any()
    assert np.array_equal(c.structure.feature, f.structure.feature)
    assert delete_model(r, "a") > 0
    # the ledger stays: privacy spent is history, deleting a model does not give it back
    assert list_models(r) == {} and not [k for k in r.keys("sdp:{a}:*") if b":ledger" not in k]
    assert r.exists("sdp:{a}:ledger")
    with pytest.raises(ModelNotFound):
        show_model(r, "a")


def test_create_refuses_an_infinite_epsilon_as_a_job_does(r):
    """epsilon=inf was created (uncharged) and its exact counts published as differentially private; the service
    refuses it by the batch jobs' rule, before anything is stored or charged. ``not_private`` (tests) admits it."""
    from streamdp.jobs.runner import JobError, JobSpec, check_params

    with pytest.raises(JobError) as job:
        check_params(JobSpec("sulq-id3", math.inf, {}))
    for eps in (math.inf, float("nan")):
        with pytest.raises(ValueError, match="epsilon must be a finite number > 0") as e:
            create_model(r, "exact", DS.schema, n_trees=2, height=3, epsilon=eps)
        assert eps != math.inf or str(e.value) == str(job.value)
    assert not r.keys("*exact*") and list_models(r) == {}
    f = create_model(r, "exact", DS.schema, n_trees=2, height=3, epsilon=math.inf, not_private=True)
    assert not f.private and show_model(r, "exact")["private"] is False


def test_create_refuses_what_no_release_could_draw_or_read(r):
    """An epsilon whose noise the samplers cannot draw, and a height no reader accepts, were
    created and charged, then every release (or read) failed."""

    for release, eps, mech in [
        ("batch", 1e-300, "geometric"),
        ("window", 1e-320, "laplace"),
        ("tree", 1e-14, "geometric"),
        ("grow", 1e-14, "geometric"),
    ]:
        with pytest.raises(ValueError, match="too small for this model"):
            create_model(
                r,
                "tiny",
                DS.schema,
                n_trees=10,
                height=3,
                epsilon=eps,
                mechanism=mech,
                release=release,
            )
    with pytest.raises(ValueError, match="height must be an integer in \\[1, 64\\]"):
        create_model(r, "tall", DS.schema, n_trees=2, height=100, epsilon=1.0)
    assert not r.keys("sdp:{tiny}:*") and not r.keys("sdp:{tall}:*")  # nothing stored, nothing charged
    with pytest.raises(ValueError):
        check_name("m\n")  # ("$" matched before a trailing newline)


def test_a_refused_create_leaves_the_ledger_as_it_was(r):
    """A create refused by its own --ledger-budget (epsilon 3, budget 2) left the budget of 2
    behind; a raise too small for the model is not written either."""
    from streamdp.privacy.ledger import BudgetExceeded

    with pytest.raises(BudgetExceeded, match="would spend 3 of a budget of 2"):
        create_model(r, "bud", DS.schema, n_trees=2, height=2, epsilon=3.0, ledger_budget=2.0)
    assert RedisLedger(r).budget("bud") is None and not r.hexists("sdp:registry", "bud")
    create_model(r, "bud2", DS.schema, n_trees=2, height=2, epsilon=1.0, ledger_budget=1.5)
    delete_model(r, "bud2")
    with pytest.raises(BudgetExceeded, match="would spend 2 of a budget of 1.8"):
        create_model(r, "bud2", DS.schema, n_trees=2, height=2, epsilon=1.0, ledger_budget=1.8)
    assert RedisLedger(r).budget("bud2") == (1.5, 0.0)
    create_model(r, "bud2", DS.schema, n_trees=2, height=2, epsilon=1.0, ledger_budget=2.0)  # a raise that fits
    assert RedisLedger(r).budget("bud2") == (2.0, 0.0)


def test_pushing_to_a_job_result_says_what_it_is(r):
    """A user pushed to a job's result (listed beside the models) and was told no model of that name existed;
    the message is its own, without a KeyError's doubled quotes."""
    from streamdp.service.keys import JOB_RESULTS

    r.hset(JOB_RESULTS, "nurs-rdt", "{}")
    with pytest.raises(ModelNotFound) as e:
        Producer(r, "nurs-rdt")
    assert str(e.value).startswith("'nurs-rdt' is a batch job's model, not a stream model")
    with pytest.raises(ModelNotFound) as e:
        Producer(r, "nothing")
    assert str(e.value).startswith("no model named 'nothing'")


# -- model size against the server's limit --------------------------------------------------
def test_model_create_refuses_a_blob_the_server_would_not_accept(r, monkeypatch):
    import time

    from streamdp.forest.structure import TooLargeError
    from streamdp.records.datasets import load_schema
    from streamdp.service.registry import DEFAULT_BULK_LIMIT, server_value_limit

    assert server_value_limit(r) == DEFAULT_BULK_LIMIT  # fakeredis has no CONFIG: the default
    monkeypatch.setattr(r, "config_get", lambda *a: {"proto-max-bulk-len": "1000000"})
    assert server_value_limit(r) == 1_000_000
    adult = load_schema("adult")
    t0 = time.process_time()
    with pytest.raises(TooLargeError, match="proto-max-bulk-len"):
        create_model(r, "big", adult, n_trees=10, height=8, epsilon=1.0)
    assert time.process_time() - t0 < 2.0  # refused while drawing the first levels, not after
    assert r.hget("sdp:registry", "big") is None and not r.keys("sdp:{big}:*")  # nothing stored, nothing charged
    f = create_model(r, "small", adult, n_trees=10, height=3, epsilon=1.0, seed=1)
    assert len(r.get(Keys("small").spec)) <= 1_000_000 and f.height == 3
    with pytest.raises(TooLargeError, match="Lower the number of trees"):
        monkeypatch.setattr(r, "config_get", lambda *a: {"proto-max-bulk-len": "70000"})
        create_model(r, "tiny", adult, n_trees=1000, height=1, epsilon=1.0)


def test_a_grown_model_is_refused_or_not_grown_when_its_growth_would_not_fit(r, monkeypatch):
    """A grown release publishes a noise variance per node on top of the drawn blob (1.25x it): a model whose
    drawn blob fits but whose fully grown blob would not used to be created and then fail at every window close
    once a long stream filled its levels. Now: refused for release='grow', 'window' for the default."""
    from streamdp.forest.structure import TooLargeError
    from streamdp.records.schema import Categorical, Label, Schema
    from streamdp.service.registry import grown_blob_bound, load_policy

    # binary attributes: a tree of L leaves has exactly 2L - 1 nodes, the drawing bound's worst case
    binary = Schema([Categorical(f"a{i}", (0, 1)) for i in range(12)], Label("y", (0, 1)))
    drawn = PrivateForest.create(binary, n_trees=10, height=10, epsilon=1.0, seed=3)
    spec = len(drawn.to_bytes())
    grown_max = drawn
    for _ in range(11):  # every level grown: an exact tally that passes every bar
        grown_max = grown_max.grow_exact(np.full((11, 1024, 2), 10**6, np.int64))
    assert grown_max.structure.height == 10 and spec < len(grown_max.to_bytes()) <= grown_blob_bound(drawn, spec)
    # the drawn blob with its counts (the spec holds a fresh model's zero counts as their shape alone) fits, with
    # the drawing bound's slack; its grown blob does not
    limit = spec + drawn.counts.nbytes + 100_000
    assert grown_blob_bound(drawn, spec) > limit
    monkeypatch.setattr(r, "config_get", lambda *a: {"proto-max-bulk-len": str(limit)})
    with pytest.raises(TooLargeError, match="release='grow'"):  # by the bound while drawing, or by the drawn blob
        create_model(r, "g", binary, n_trees=10, height=10, epsilon=1.0, seed=3, release="grow")
    assert r.hget("sdp:registry", "g") is None and not r.keys("sdp:{g}:*")  # nothing stored, nothing charged
    import streamdp.service.registry as registry

    # the drawing bound (blob_max_cells: 40 bytes a leaf and row, padded nodes counted) and the grown blob's
    draw_limit = 11 * 40 * drawn.structure.max_leaves + len(binary.to_json()) + (64 << 10)
    fits = max(grown_blob_bound(drawn, spec), draw_limit) + 1_000
    monkeypatch.setattr(r, "config_get", lambda *a: {"proto-max-bulk-len": str(fits)})
    with monkeypatch.context() as m:  # a drawn blob that fits whose growth would not
        m.setattr(registry, "grown_blob_bound", lambda forest, spec_bytes: fits + 1)
        create_model(r, "d", binary, n_trees=10, height=10, epsilon=1.0, seed=3)
    assert load_policy(r, "d")[0].kind == "window"  # all categorical, but its growth would not fit
    create_model(r, "d2", binary, n_trees=10, height=10, epsilon=1.0, seed=3)
    assert load_policy(r, "d2")[0].kind == "grow"


def test_a_growing_models_default_height_is_the_ceiling_rule_on_categorical_schemas(r):
    """Release grow (or the default that grows) on an all-categorical schema: height None is
    structure.ceiling_height, the river classifier's default (benchmarks/results/grow_ceiling.log: on long
    streams it beats half the attributes by 0.08-0.19); the drawn-tree policies keep half the attributes. With a
    numeric attribute a growing model's height None is the budgeted draw, as window's (decisions/025)."""
    from streamdp.forest.structure import ceiling_height
    from streamdp.records.datasets import load_schema

    votes = DS.schema  # 16 categorical attributes of 3 values: ceiling 6 (729 leaves), half 8 (6,561)
    assert (ceiling_height(votes), votes.n_attributes // 2) == (6, 8)
    assert create_model(r, "gd", votes, n_trees=2, epsilon=1.0).height == 6
    assert create_model(r, "wd", votes, n_trees=2, epsilon=1.0, release="window").height == 8
    assert (
        create_model(r, "inf", votes, n_trees=2, epsilon=math.inf, not_private=True).height == 8
    )  # cannot grow: window
    adult = load_schema("adult")
    ga = create_model(r, "ga", adult, n_trees=2, epsilon=1.0, release="grow", seed=4)
    assert ga.height == create_model(r, "wa", adult, n_trees=2, epsilon=1.0, release="window", seed=4).height
    assert ga.height > ceiling_height(adult, 2) == 2
    assert create_model(r, "gh", votes, n_trees=2, epsilon=1.0, height=3).height == 3  # an explicit height stays
    assert show_model(r, "gd")["height"] == 6


def test_size_bounds_hold_at_their_edges(r, monkeypatch):
    """Review findings: (1) a growing model's default height went through no leaf guard (many trees failed where
    window succeeded); (2) the grown bound missed the per-tree noise variances (9 bytes each in msgpack); (3) the
    cell bound left the prior stump's row out (a 1-tree model was refused only by the final blob check)."""
    from streamdp.forest.structure import TooLargeError, ceiling_height
    from streamdp.records.schema import Categorical, Label, Schema
    from streamdp.service.registry import blob_max_cells, grown_blob_bound, load_policy

    votes = DS.schema
    monkeypatch.setattr(r, "config_get", lambda *a: {"proto-max-bulk-len": str(2 << 20)})
    f = create_model(r, "many", votes, n_trees=100, epsilon=1.0)  # the default grows: its ceiling is lowered
    assert f.height < ceiling_height(votes) and load_policy(r, "many")[0].kind == "grow"
    assert create_model(r, "many-g", votes, n_trees=100, epsilon=1.0, release="grow").height == f.height
    # (2) the most trees of one binary split, every level grown
    from streamdp.forest.limits import MAX_TREES

    one = Schema([Categorical("a", (0, 1))], Label("y", (0, 1)))
    drawn = PrivateForest.create(one, n_trees=MAX_TREES, height=1, epsilon=1.0)
    grown = drawn
    for _ in range(2):
        grown = grown.grow_exact(np.full((MAX_TREES + 1, 2, 2), 10**6, np.int64))
    assert grown.height == 1 and len(grown.to_bytes()) <= grown_blob_bound(drawn, len(drawn.to_bytes()))
    # (4) release='tree' keeps 2 * levels counts-sized arrays in one value (its state): bounded by that, not the counts
    monkeypatch.setattr(r, "config_get", lambda *a: {"proto-max-bulk-len": str(8 << 20)})
    with pytest.raises(TooLargeError, match="too many leaves"):
        create_model(r, "tree8", votes, n_trees=10, height=8, epsilon=1.0, release="tree")
    create_model(r, "win8", votes, n_trees=10, height=8, epsilon=1.0, release="window")  # counts alone: it fits
    # (3) one-tree models: the stump's row counts as much as the tree's. Refused while drawing or stored within the
    # limit, never refused by the last check after drawing (which the bound should make unreachable)
    monkeypatch.setattr(r, "config_get", lambda *a: {"proto-max-bulk-len": "1300000"})
    assert blob_max_cells(votes, 1, 1_300_000) < blob_max_cells(votes, 1, 1_300_000, prior_trees=0)
    for h in range(6, 14):
        try:
            create_model(r, f"one{h}", votes, n_trees=1, height=h, epsilon=1.0, release="window", seed=h)
        except TooLargeError as e:
            assert "too many leaves" in str(e) and "its blob has" not in str(e)
        else:
            assert len(r.get(Keys(f"one{h}").spec)) <= 1_300_000
            assert len(r.hget(Keys(f"one{h}").pub_model, "counts")) <= 1_300_000


def test_the_default_release_grows_on_categorical_schemas_only(r):
    """Release=None: grow where growing.grows_by_default says so (every attribute categorical) and growing is
    possible (finite epsilon, geometric or Laplace noise), else window (numeric and mixed schemas too:
    decisions/025); the CLI's default is the same None."""
    from streamdp.cli import build_parser
    from streamdp.records.datasets import load_schema
    from streamdp.service.registry import load_policy

    votes = DS.schema  # congressional voting: 16 categorical attributes
    create_model(r, "g", votes, n_trees=2, height=3, epsilon=1.0, seed=1)
    create_model(r, "w", load_schema("adult"), n_trees=2, height=3, epsilon=1.0, seed=1)  # numeric attributes too
    create_model(r, "inf", votes, n_trees=2, height=3, epsilon=math.inf, seed=1, not_private=True)
    create_model(r, "k", votes, n_trees=2, height=3, epsilon=1.0, mechanism="kanon", k=5, beta=0.1, seed=1)
    create_model(r, "b", votes, n_trees=2, height=3, epsilon=1.0, seed=1, release="batch")
    got = {n: load_policy(r, n)[0].kind for n in ("g", "w", "inf", "k", "b")}
    assert got == {"g": "grow", "w": "window", "inf": "window", "k": "window", "b": "batch"}
    assert show_model(r, "g")["release"]["kind"] == "grow"
    args = build_parser().parse_args(["model", "create", "m2", "--schema", "s.json", "--epsilon", "1"])
    assert args.release is None


def test_grow_on_numeric_and_mixed_schemas_grows_on_the_trees_window_draws(r):
    """Decisions/025: release="grow" with no height on a numeric (Agrawal) or mixed (Adult) schema grows on the
    budgeted draw (height None), the very trees window draws (the default there), not up to ceiling_height (on
    a server where the grown blob's cell bound does not lower the draw)."""
    from streamdp.forest.growth import service_ceiling
    from streamdp.forest.structure import ceiling_height
    from streamdp.records.datasets import load_schema
    from streamdp.river.schemas import agrawal_schema
    from streamdp.service.registry import load_policy

    for name, schema in [("agrawal", agrawal_schema()), ("adult", load_schema("adult"))]:
        assert service_ceiling(schema) is None
        d = create_model(r, name, schema, epsilon=1.0, seed=7)
        w = create_model(r, f"{name}-w", schema, epsilon=1.0, seed=7, release="window")
        g = create_model(r, f"{name}-g", schema, epsilon=1.0, seed=7, release="grow")
        assert load_policy(r, name)[0].kind == "window" and load_policy(r, f"{name}-g")[0].kind == "grow"
        assert show_model(r, f"{name}-g")["release"]["kind"] == "grow"
        assert d.height == w.height == g.height > ceiling_height(schema)
        for f in (d, g):
            for a in ("feature", "threshold", "child", "leaf", "n_leaves"):
                np.testing.assert_array_equal(getattr(f.structure, a), getattr(w.structure, a))
        assert show_model(r, f"{name}-g")["height"] == w.height


def test_a_fully_grown_budgeted_forest_stays_within_the_grown_blob_bound(r):
    """A grow model on a numeric or mixed schema draws the budgeted trees (about 18,000 leaves a tree at height
    14): once the data fill every level its release publishes the whole drawn structure, its counts and a noise
    variance per node. That blob stays within registry.grown_blob_bound, which create_model checked against the
    server's limit."""
    from streamdp.records.datasets import load_schema
    from streamdp.river.schemas import agrawal_schema
    from streamdp.service.registry import grown_blob_bound, load_policy, server_value_limit

    for name, schema in [("agrawal", agrawal_schema()), ("adult", load_schema("adult"))]:
        drawn = create_model(r, name, schema, epsilon=1.0, seed=11, release="grow")
        assert load_policy(r, name)[0].kind == "grow" and drawn.height >= 12
        spec = len(r.get(Keys(name).spec))
        grown = drawn
        for _ in range(drawn.height + 1):  # exact tallies that pass every bar: every level grown
            grown = grown.grow_exact(np.full(drawn.counts.shape, 10**6, np.int64))
            if np.array_equal(grown.structure.n_leaves, drawn.structure.n_leaves):
                break
        assert grown.height == drawn.height
        np.testing.assert_array_equal(grown.structure.n_leaves, drawn.structure.n_leaves)
        assert spec < len(grown.to_bytes()) <= grown_blob_bound(drawn, spec) <= server_value_limit(r)


def test_an_explicit_grow_draws_within_the_grown_blob_bound_on_a_small_server(r, monkeypatch):
    """One numeric attribute, 100 classes, on a server whose value limit holds window's draw of 256 leaves a
    tree (its count cells, 8 bytes each, fill the limit) but not that draw grown (the structure and a noise
    variance per node on top): the default is window on those trees; an explicit grow draws within the grown
    blob's cell bound instead (smaller trees) and fits."""
    from streamdp.records.schema import Schema
    from streamdp.service.registry import grown_blob_bound, load_policy

    attrs = [{"name": "x", "type": "numeric", "min": 0, "max": 1}]
    schema = Schema.from_dict({"attributes": attrs, "label": {"name": "y", "values": list(range(100))}})
    limit = 256 * 11 * 8 * 100 + len(schema.to_json()) + (64 << 10)  # 256 leaves x 11 rows x 100 classes
    monkeypatch.setattr(r, "config_get", lambda *a: {"proto-max-bulk-len": str(limit)})
    d = create_model(r, "d", schema, n_trees=10, epsilon=1.0, seed=5)
    w = create_model(r, "w", schema, n_trees=10, epsilon=1.0, seed=5, release="window")
    assert load_policy(r, "d")[0].kind == "window" and d.structure.max_leaves == 256
    assert grown_blob_bound(d, len(r.get(Keys("d").spec))) > limit
    for a in ("feature", "threshold", "child", "n_leaves"):
        np.testing.assert_array_equal(getattr(d.structure, a), getattr(w.structure, a))
    g = create_model(r, "g", schema, n_trees=10, epsilon=1.0, seed=5, release="grow")
    assert load_policy(r, "g")[0].kind == "grow" and g.structure.max_leaves < 256
    assert grown_blob_bound(g, len(r.get(Keys("g").spec))) <= limit


def test_recreating_a_deleted_models_name_says_the_ledger_was_spent_before(r):
    """The refusal named the budget only; the ledger of a deleted model is kept by design."""
    from streamdp.privacy.ledger import BudgetExceeded

    create_model(r, "m", DS.schema, n_trees=2, height=2, epsilon=1.0)
    delete_model(r, "m")
    with pytest.raises(BudgetExceeded, match="was spent before .*ledgers are kept.*--ledger-budget"):
        create_model(r, "m", DS.schema, n_trees=2, height=2, epsilon=1.0)
    with pytest.raises(ValueError, match="can only raise it, not set 0.5"):
        create_model(r, "m", DS.schema, n_trees=2, height=2, epsilon=0.5, ledger_budget=0.5)
    create_model(r, "m", DS.schema, n_trees=2, height=2, epsilon=1.0, ledger_budget=2.0)  # raised: fits


def test_version_0_is_kept_as_the_shape_of_its_zero_counts_not_a_copy_of_the_spec(r):
    from streamdp.service.published import is_release_record

    f = create_model(r, "v0", DS.schema, n_trees=10, height=6, epsilon=1.0, seed=1, release="window")
    k = Keys("v0")
    v0 = r.get(k.pub_version(0))
    assert is_release_record(v0) and len(v0) < 1000 < f.counts.nbytes
    # the zero counts are no bytes in the state and pub:model (published.ZERO_COUNTS), read back as zeros
    assert r.hget(k.pub_model, "counts") == r.hget(k.state, "counts") == b""
    latest = Consumer(r, "v0").latest()
    assert latest.version == 0 and latest.shape == f.shape and not latest.counts.any()
    got = Consumer(r, "v0").get(0)
    assert got.version == 0 and got.shape == f.shape and not got.counts.any()
    np.testing.assert_array_equal(got.structure.child, f.structure.child)
    assert len(r.get(k.spec)) < f.counts.nbytes  # the structure without its padding


def test_a_stream_model_draws_its_thresholds_from_declared_quantiles_and_spends_no_share(r):
    from streamdp import Schema

    attrs = [{"name": "x", "type": "numeric", "min": 0, "max": 100, "quantiles": [40, 41, 42, 43, 44]}]
    schema = Schema.from_dict({"attributes": attrs, "label": {"name": "y", "values": [0, 1]}})
    create_model(r, "q", schema, n_trees=40, height=1, epsilon=1.0, seed=2)
    c = Consumer(r, "q").latest()
    assert c.schema == schema and c.threshold_share == 0.0 and c.threshold_spent == 0.0
    t = c.structure.threshold[:40, 0]
    assert np.mean((t >= 40) & (t <= 44)) > 0.4  # 4/6 expected; uniform draws would put 4% there
