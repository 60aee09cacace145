"""The river classifier backed by the stream service (fakeredis)."""

from __future__ import annotations

import math

import pytest

fakeredis = pytest.importorskip("fakeredis")
pytest.importorskip("lupa")

from streamdp.service.registry import create_model  # noqa: E402
from streamdp.service.stats import collect  # noqa: E402
from tests.service.conftest import DS, _drain, _model, _worker  # noqa: E402

# create_model(not_private=True)'s own NotPrivateWarning, expected here
pytestmark = pytest.mark.filterwarnings("ignore:model .*NOT private:streamdp.privacy.secure_random.NotPrivateWarning")


@pytest.fixture
def r():
    return fakeredis.FakeRedis(server=fakeredis.FakeServer(), version=(7, 0))


def test_service_classifier_repeated_records_are_new_records(r):
    """Every flush pushed with the same (empty) source and offset 0, so a record learned
    again in a later flush had the same content-derived batch id and was merged once: 21 learned, 2 counted."""
    from streamdp.river import ServiceClassifier

    _model(r, epsilon=math.inf)
    clf = ServiceClassifier(r, "m", batch_size=1, sync_timeout=0)
    x = dict(zip(DS.schema.names, DS.X[0].tolist()))
    for i in range(21):
        clf.learn_one(x, DS.y[i % 2])
    _drain(_worker(r, "m"))
    assert collect(r, "m")["records_merged"] == 21 and clf.n_pushed == 21


def test_service_classifier_works_once_its_model_exists(r):
    """A ServiceClassifier used before its model was created kept its consumer without a
    producer, and every push after the model's creation failed (AttributeError); before the model exists it
    predicts nothing ({}), as documented."""
    from streamdp.river import ServiceClassifier

    clf = ServiceClassifier(r, "late", batch_size=2, sync_timeout=0)
    x = dict(zip(DS.schema.names, DS.X[0].tolist()))
    assert clf.predict_proba_one(x) == {}
    _model(r, name="late", epsilon=math.inf)
    clf.refresh(force=True)
    assert clf.version == 0 and clf.predict_proba_one(x) == {}  # (the empty version 0 guesses: not scored)
    for i in range(4):
        clf.learn_one(x, DS.y[i])
    _drain(_worker(r, "late"))
    assert collect(r, "late")["records_merged"] == 4 and clf.n_pushed == 4
    # refreshes seldom: its first prediction still fetches the model (never, before)
    slow = ServiceClassifier(r, "late", refresh_every=math.inf, sync_timeout=0)
    _drain(_worker(r, "late"))
    assert slow.predict_proba_one(x) != {}
    assert slow.__getstate__()["_checked"] == -math.inf  # (a pickle's: another process's clock is not ours)
    for bad, why in [
        ({"batch_size": 0}, "batch_size"),
        ({"refresh_every": -1}, "refresh_every"),
        ({"on_invalid": "bogus"}, "on_invalid"),
    ]:  # refused when made, not at the first push
        with pytest.raises(ValueError, match=why):
            ServiceClassifier(r, "late", **bad)


def test_service_classifier_reads_integer_keys_as_digit_names(r):
    """River's SEA, LED and Hyperplane key features by integers; ServiceClassifier pushed
    them as they were and every record was dead-lettered as missing its attributes."""
    from river.datasets import synth

    from streamdp.river import ServiceClassifier
    from streamdp.river.schemas import sea_schema

    create_model(
        r, "sea", sea_schema(), n_trees=3, height=3, epsilon=math.inf, seed=1, release="batch", not_private=True
    )
    clf = ServiceClassifier(r, "sea", batch_size=100, sync_timeout=0)
    for x, y in synth.SEA(seed=1).take(300):
        clf.learn_one(x, y)
    _drain(_worker(r, "sea"))
    st = collect(r, "sea")
    assert st["records_merged"] == 300 and st["dead_letters"] == 0
