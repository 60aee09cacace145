"""Empirical epsilon audit of a person-unit stream model (fakeredis): neighbouring streams that differ in one
person's records, spread over several windows and pushed by another producer than the crowd's."""

from __future__ import annotations

import math

import numpy as np
import pytest

fakeredis = pytest.importorskip("fakeredis")
pytest.importorskip("lupa")

from streamdp.service.keys import Keys  # noqa: E402
from streamdp.service.producer import Producer  # noqa: E402
from streamdp.service.published import counts_from_bytes  # noqa: E402
from streamdp.service.registry import create_model  # noqa: E402
from streamdp.service.stream_worker import Worker  # noqa: E402
from tests.privacy.test_audit import epsilon_lower_bound  # noqa: E402
from tests.service.test_units import DS, _add_all  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.long]
EVERY = 10.0
K = 3
EPS = 1.0


def _releases(tmp_path, target: bool, n: int, unit: bool) -> np.ndarray:
    """``n`` trials on one model: in each, 4 windows of the crowd's batch (producer A); with ``target``, one
    person (a new id each trial, producer B) adds one record in each of windows 1-3 (K = 3 in all) and K more in
    window 4, which must be dropped. Returns, per trial and window, the released change of the target's cell
    minus the crowd's exact contribution."""
    key = tmp_path / "noise.key"
    if not key.exists():
        key.write_bytes(bytes(range(64)))
        key.chmod(0o600)
    r = fakeredis.FakeRedis(server=fakeredis.FakeServer(), version=(7, 0))
    kw = dict(privacy_id="user", max_records_per_id=K) if unit else {}
    spec = create_model(
        r, "m", DS.schema, n_trees=1, height=1, epsilon=EPS, seed=5, release="window", release_every=EVERY,
        noise_key_file=str(key), cadence="fixed", **kw,  # the clock's windows, every release merged
    )  # fmt: skip
    w = Worker(r, "m", block_ms=1, noise_key_file=str(key))
    crowd, person = Producer(r, "m"), Producer(r, "m")
    x = DS.X[:1]
    cells = np.flatnonzero(_exact(spec, x, DS.y[:1]).reshape(-1))  # the target's leaf and its prior stump's cell
    base = _exact(spec, DS.X[10:40], DS.y[10:40]).reshape(-1)[cells]
    start = float(r.hget(Keys("m").state, "release_start"))
    out = np.empty((n, 4, len(cells)), dtype=np.int64)
    prev = np.zeros(len(cells), dtype=np.int64)
    window = 0
    for t in range(n):
        for j in range(4):
            window += 1
            ids = [f"c{t}-{i}" for i in range(30)] if unit else None
            crowd.push(DS.X[10:40], DS.y[10:40], ids=ids, batch_id=f"c{t}-{j}")  # (the same records, new batches)
            if target:
                m = 1 if j < 3 else K
                person.push(
                    np.repeat(x, m, 0),
                    np.repeat(DS.y[:1], m),
                    ids=[f"target-{t}"] * m if unit else None,
                    batch_id=f"t{t}-{j}",
                )
            _add_all(w)
            assert w.closer.tick(start + window * EVERY + 0.001) == 1
            pub = counts_from_bytes(r.hget(Keys("m").pub_model, "counts"), spec).reshape(-1)[cells]
            out[t, j] = pub - prev - base
            prev = pub
    return out


def _exact(spec, X, y):
    from streamdp.forest.model import PrivateForest

    return PrivateForest(spec.schema, spec.structure, epsilon=math.inf).noisy_delta(X, y)


def _events(out: np.ndarray) -> list[int]:
    """Every cell of windows 1-3 at least t; the sum over windows and cells at least t (the target adds 1 to each
    cell of windows 1-3, nothing in window 4 once its records past K are dropped)."""
    low = out[:, :3].reshape(len(out), -1).min(axis=1)
    total = out.reshape(len(out), -1).sum(axis=1)
    last = out[:, 3].sum(axis=1)
    return (
        [int(np.sum(low >= t)) for t in range(-2, 3)]
        + [int(np.sum(total >= t)) for t in range(0, 16, 2)]
        + [int(np.sum(last >= t)) for t in range(0, 10, 2)]
    )


def test_empirical_epsilon_audit_of_one_person_over_several_windows(tmp_path):
    """The lower bound stays at or below the declared epsilon per person; the same streams on a model whose unit
    is a record (the control: the person's 6 records all counted, noise per record) give a bound well above it
    (near epsilon at these sample sizes), so the audit separates a missing bound or a missing K scaling from the
    model's own releases."""
    n = 600
    world0, world1 = _releases(tmp_path, False, n, True), _releases(tmp_path, True, n, True)
    lb = epsilon_lower_bound(_events(world0), _events(world1), n)
    print(f"\nperson-unit stream audit: lower bound {lb:.3f} at declared epsilon {EPS}")
    assert lb <= EPS, lb
    m = 400
    naive = epsilon_lower_bound(
        _events(_releases(tmp_path, False, m, False)), _events(_releases(tmp_path, True, m, False)), m
    )
    assert naive > max(lb, 0.0) + 0.5, (naive, lb)
