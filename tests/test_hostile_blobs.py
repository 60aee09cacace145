"""Hostile model blobs: decoding is linear and bounded, and every failure is a ValueError."""

from __future__ import annotations

import math

import msgpack
import numpy as np
import pytest
import scipy.stats  # noqa: F401  (kanon_delta imports it lazily; a one-time 1-5 s import is not the blob's cost)

from streamdp import blob
from streamdp.forest.model import PrivateForest
from streamdp.learners import load_model
from streamdp.records.schema import Schema, SchemaError

LIMIT = 1.0  # seconds


@pytest.fixture(scope="module")
def forest_doc() -> dict:
    schema = Schema.from_dict(
        {
            "attributes": [{"name": "a", "type": "categorical", "values": ["x", "y"]}],
            "label": {"name": "c", "values": ["no", "yes"]},
        }
    )
    return msgpack.unpackb(
        PrivateForest.create(schema, n_trees=2, height=1, epsilon=1.0, prior_trees=0).to_bytes(), raw=False
    )


def _timed_refusal(data: bytes, match: str, wall_clock) -> None:
    with wall_clock.within(LIMIT), pytest.raises(ValueError, match=match):
        PrivateForest.from_bytes(data)


def test_many_declared_values_with_a_late_duplicate_decode_fast(forest_doc, wall_clock):
    """A 200 KB blob: 30,000 values, the last one repeated (quadratic duplicate check: 53 s)."""
    doc = dict(forest_doc)
    values = [f"v{i}" for i in range(30_000)] + ["v29999"]
    doc["schema"] = {
        "attributes": [{"name": "a", "type": "categorical", "values": values}],
        "label": doc["schema"]["label"],
    }
    data = msgpack.packb(doc, use_bin_type=True)
    assert len(data) > 150_000
    _timed_refusal(data, "declared twice", wall_clock)


def test_many_attributes_with_a_late_duplicate_name_decode_fast(forest_doc, wall_clock):
    doc = dict(forest_doc)
    attrs = [{"name": f"a{i}", "type": "categorical", "values": ["x", "y"]} for i in range(12_000)]
    doc["schema"] = {"attributes": attrs + [attrs[0]], "label": doc["schema"]["label"]}
    _timed_refusal(msgpack.packb(doc, use_bin_type=True), "unique", wall_clock)


def test_schema_duplicate_check_is_linear(wall_clock):
    with wall_clock.within(LIMIT), pytest.raises(SchemaError, match="declared twice"):
        Schema.from_dict(
            {
                "attributes": [{"name": "a", "type": "categorical", "values": list(range(200_000)) + [199_999]}],
                "label": {"name": "c", "values": [0, 1]},
            }
        )


def _kanon_blob(forest_doc: dict, k, beta, epsilon) -> bytes:
    doc = dict(forest_doc)
    doc["params"] = {**doc["params"], "mechanism": "kanon", "k": k, "beta": beta}
    doc["privacy"] = {**doc["privacy"], "epsilon": epsilon}
    return msgpack.packb(doc, use_bin_type=True)


@pytest.mark.parametrize("beta", [1e-8, 1e-6])
def test_kanon_blob_with_tiny_beta_decodes_fast(forest_doc, beta, wall_clock):
    """K-anon parameters that made kanon_delta run 5-65 s."""
    eps = 2 * 1.0000001 * -math.log1p(-beta)  # two trees (no prior stump in forest_doc), each just above the floor
    data = _kanon_blob(forest_doc, 3, beta, eps)
    assert len(data) < 1000
    with wall_clock.within(LIMIT):
        f = PrivateForest.from_bytes(data)
    assert 0 < f.delta < 1


def test_kanon_blob_with_an_unbounded_scan_is_refused_fast(forest_doc, wall_clock):
    _timed_refusal(_kanon_blob(forest_doc, 10**7, 0.999999, 28.0), "would scan", wall_clock)


@pytest.mark.parametrize("fmt", [[1, 2], {"a": 1}, [[1]], None, 3])
def test_format_of_the_wrong_type_is_a_value_error(forest_doc, fmt):
    data = msgpack.packb({**forest_doc, "format": fmt}, use_bin_type=True)
    for decode in (PrivateForest.from_bytes, load_model, blob.format_of):
        with pytest.raises(ValueError, match="format"):
            decode(data)
    with pytest.raises(blob.BlobError):
        blob.loads(data, "streamdp.forest", 1)


@pytest.mark.parametrize("bad", [1e308, 1e199, 1e154, -1.0, float("nan")])
def test_a_learner_blob_with_an_absurd_own_var_is_refused(bad):
    """Own_var 1e308 passed (finite), overflowed in estimation and made every prediction the
    uniform distribution, silently."""
    import warnings

    from streamdp.learners import DPEA
    from streamdp.privacy.mechanisms import NotPrivateWarning
    from streamdp.records.datasets import load

    ds = load("congressional-voting")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        m = DPEA(ds.schema, max_depth=3, epsilon=1.0, noise_seed=1).fit(ds.X, ds.y)
    good = m.to_bytes()
    assert (load_model(good).predict(ds.X[:5]) == m.predict(ds.X[:5])).all()
    doc = msgpack.unpackb(good, raw=False)

    def own_var_of(d):  # the one tree's own_var record, wherever the learner's format keeps it
        if isinstance(d, dict):
            if "own_var" in d:
                return d
            for v in d.values():
                found = own_var_of(v)
                if found is not None:
                    return found
        if isinstance(d, list):
            for v in d:
                found = own_var_of(v)
                if found is not None:
                    return found
        return None

    tree = own_var_of(doc)
    arr = blob.unpack_array(tree["own_var"], "own_var", "<f8", 1).copy()
    arr[-1] = bad
    tree["own_var"] = {"dtype": "<f8", "shape": [arr.size], "data": arr.tobytes()}
    tampered = msgpack.packb(doc, use_bin_type=True)
    if 0 <= bad < 1e200 / (2 * arr.size):  # within the bound: loads, and every estimate stays finite
        p = load_model(tampered).predict_proba(ds.X)  #
        assert np.all(np.isfinite(p)) and np.allclose(p.sum(axis=1), 1.0)
        return
    with pytest.raises(ValueError, match="own_var"):
        load_model(tampered)
