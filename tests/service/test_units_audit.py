"""Empirical epsilon audit of a person-unit stream model (fakeredis): neighbouring streams that differ in one
person's records, spread over several windows and pushed by another producer than the crowd's.

Each leaf cell of the model's tree is an independent trial: its noise is drawn apart from every other cell's,
and the crowd's exact contribution is subtracted. In every run of four windows, half of the leaves reached by
the data set's records get a person of their own (world 1: one record in each of windows 1-3, K = 3 in all,
then K more in window 4, which must be dropped) and half get none (world 0); the halves swap between runs. One
run of four windows so yields about a hundred trials per world, where one trial per run would need a hundred
times the windows."""

from __future__ import annotations

import math

import numpy as np
import pytest

fakeredis = pytest.importorskip("fakeredis")
pytest.importorskip("lupa")

from streamdp.forest.model import PrivateForest  # noqa: E402
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
EPS = 6.0  # per person: each window's noise at EPS / K per record


def _exact(spec, X, y):
    return PrivateForest(spec.schema, spec.structure, epsilon=math.inf).noisy_delta(X, y).reshape(-1)


def _leaves(spec) -> tuple[np.ndarray, np.ndarray]:
    """One record of the data set per leaf cell of the tree (the forest's first tree; its second is the prior
    stump, whose cells every record reaches), and those cells."""
    per_tree = spec.shape[1] * spec.shape[2]
    seen: dict[int, int] = {}
    for i in range(len(DS.y)):
        cell = int(np.flatnonzero(_exact(spec, DS.X[i : i + 1], DS.y[i : i + 1])[:per_tree])[0])
        seen.setdefault(cell, i)
    cells = sorted(seen)
    return np.array([seen[c] for c in cells]), np.array(cells)


def _trials(tmp_path, runs: int, unit: bool) -> tuple[np.ndarray, np.ndarray]:
    """``runs`` runs of four windows on one model. Returns, per world, the trials' residuals: per trial
    (a leaf cell in a run) and window, the released change of the cell minus the crowd's exact contribution."""
    key = tmp_path / "noise.key"
    if not key.exists():
        key.write_bytes(bytes(range(64)))
        key.chmod(0o600)
    r = fakeredis.FakeRedis(server=fakeredis.FakeServer(), version=(7, 0))
    kw = dict(privacy_id="user", max_records_per_id=K) if unit else {}
    eps = EPS  # (the control's unit is a record: its noise K times weaker per record, its records past K counted)
    spec = create_model(
        r, "m", DS.schema, n_trees=1, height=8, epsilon=eps, seed=5, release="window", release_every=EVERY,
        noise_key_file=str(key), cadence="fixed", **kw,  # the clock's windows, every release merged
    )  # fmt: skip
    w = Worker(r, "m", block_ms=1, noise_key_file=str(key))
    crowd, persons = Producer(r, "m"), Producer(r, "m")
    rows, cells = _leaves(spec)
    half = len(rows) // 2
    base = _exact(spec, DS.X[10:40], DS.y[10:40])[cells]
    start = float(r.hget(Keys("m").state, "release_start"))
    worlds: list[list[np.ndarray]] = [[], []]
    prev = np.zeros(len(cells), dtype=np.int64)
    window = 0
    for t in range(runs):
        target = np.arange(len(rows)) % 2 == t % 2
        target[np.flatnonzero(target)[half:]] = False  # the same number of trials in both worlds
        out = np.empty((len(cells), 4), dtype=np.int64)
        for j in range(4):
            window += 1
            ids = [f"c{t}-{j}-{i}" for i in range(30)] if unit else None
            crowd.push(DS.X[10:40], DS.y[10:40], ids=ids, batch_id=f"c{t}-{j}")
            idx = np.repeat(rows[target], 1 if j < 3 else K)
            pids = [f"p{t}-{i}" for i in idx] if unit else None
            persons.push(DS.X[idx], DS.y[idx], ids=pids, batch_id=f"p{t}-{j}")
            _add_all(w)
            assert w.closer.tick(start + window * EVERY + 0.001) == 1
            pub = counts_from_bytes(r.hget(Keys("m").pub_model, "counts"), spec).reshape(-1)[cells]
            out[:, j] = pub - prev - base
            prev = pub
        zero = ~target & (np.cumsum(~target) <= half)
        worlds[0].append(out[zero])
        worlds[1].append(out[target])
    return np.concatenate(worlds[0]), np.concatenate(worlds[1])


def _events(out: np.ndarray) -> list[int]:
    """The sum over windows 1-3 at least t, and at most -t (the person adds 1 to each window)."""
    first = out[:, :3].sum(axis=1)
    return [int(np.sum(first >= t)) for t in range(0, 14)] + [int(np.sum(first <= -t)) for t in range(0, 14)]


def _late(out: np.ndarray) -> list[int]:
    """Window 4 at least t, and at most -t (the person's records past K: nothing once they are dropped)."""
    return [int(np.sum(out[:, 3] >= t)) for t in range(0, 8)] + [int(np.sum(out[:, 3] <= -t)) for t in range(0, 8)]


def test_empirical_epsilon_audit_of_one_person_over_several_windows(tmp_path):
    """The lower bound stays at or below the declared epsilon per person and reaches a good part of what the
    leaf cells can show (the forest spends half of each release's budget on the tree's leaves, half on the
    prior stump, whose cells every record shares: a leaf cell carries EPS / 2 of the person's loss), so a
    release K times too weak would show; the person's records past K leave window 4 indistinguishable. The
    control (the same streams on a model whose unit is a record: noise K times weaker per record, the person's
    records past K counted) gives a bound well above the person-unit model's, and a window-4 bound well above
    zero."""
    w0, w1 = _trials(tmp_path, 100, True)
    n = len(w0)
    lb, late = epsilon_lower_bound(_events(w0), _events(w1), n), epsilon_lower_bound(_late(w0), _late(w1), n)
    print(f"\nperson-unit stream audit: {n} trials per world, lower bound {lb:.3f} (window 4: {late:.3f}) at "
          f"declared epsilon {EPS}")  # fmt: skip
    assert lb <= EPS and late <= 0.5, (lb, late)
    assert lb >= 1.0, lb  # (a third of what the leaves can show)
    c0, c1 = _trials(tmp_path, 10, False)
    all4 = [int(np.sum(c.sum(axis=1) >= t)) for c in (c0, c1) for t in range(0, 20)]
    naive = epsilon_lower_bound(all4[:20], all4[20:], len(c0))
    naive_late = epsilon_lower_bound(_late(c0), _late(c1), len(c0))
    print(f"record-unit control: {len(c0)} trials per world, lower bound {naive:.3f} (window 4: {naive_late:.3f})")
    assert naive > lb + 1.5 and naive_late > 1.0, (naive, naive_late, lb)
