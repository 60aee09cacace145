"""A windowed model's schedule in the service: the cadence's state in Redis, and releases left out of the estimate.

The pure rule is :mod:`streamdp.release.cadence`; here the closer (:mod:`.windows`) reads the stored schedule
(state field ``schedule``, JSON, also published on ``pub:model``: every field is a function of the clock, the
model's cadence and released values), moves it on with each release in the release's own MULTI/EXEC, and
releases a window whose released total cannot be told from an empty one's without changing the published
counts (:func:`release_left_out`). A model without a cadence (created with ``cadence="fixed"``, created before
the cadence, or one whose releases carry no record total: release ``tree``, k-anonymity, no prior stump) keeps
the clock's windows and merges every release.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import numpy as np
import redis

from streamdp.estimation import cell_variance
from streamdp.forest.model import PrivateForest
from streamdp.release.cadence import DEFAULT_MAX_LAG, GRACE, Cadence, Schedule, release_total, total_sd
from streamdp.release.continual import ReleasePolicy, window_end
from streamdp.service.connection import connect
from streamdp.service.history import append
from streamdp.service.keys import Keys, as_str
from streamdp.service.log import jlog

__all__ = ["WindowSchedule", "release_left_out", "CADENCES", "cadence_of", "cadence_fields", "load_cadence"]

log = logging.getLogger("streamdp.worker")


class WindowSchedule:
    """One model's window schedule as its closer sees it (``cached``: the last one read or written)."""

    def __init__(
        self,
        r: redis.Redis,
        keys: Keys,
        spec: PrivateForest,
        policy: ReleasePolicy,
        start: float,
        cadence: Cadence | None,
    ):
        self.r, self.keys, self.spec, self.policy, self.start = r, keys, spec, policy, start
        self.cadence = cadence if policy.kind in ("window", "grow") else None
        self.rows = spec.structure.n_trees  # trees and stumps: the disjoint budget's share of the records
        self.sd = 0.0  # the noise sd of a release's record total (public: the model's parameters)
        if self.cadence is not None:
            v = cell_variance(spec.mechanism, spec.epsilon_per_tree, spec.k)
            self.sd = total_sd(v, spec.schema.n_classes, spec.prior_trees, spec.budget, self.rows)
        self.cached: Schedule | None = None

    def read(self) -> Schedule:
        """The model's current schedule, from its state."""
        rel, raw = self.r.hmget(self.keys.state, "releases", "schedule")
        self.cached = self.of(int(rel or 0), raw)
        return self.cached

    def of(self, rel: int, raw: bytes | str | None) -> Schedule:
        """The schedule after ``rel`` releases: the stored one (cadence), or the clock's windows."""
        every = self.policy.release_every
        if self.cadence is None or raw is None:
            return Schedule(rel, window_end(rel + 1, self.start, every), every, 0, rel, 0.0, None)
        sched = Schedule.from_dict(json.loads(raw))
        if sched.released != rel:
            raise RuntimeError(f"the schedule is at window {sched.released}, the model released {rel}: corrupted state")
        return sched

    def next(self, sched: Schedule, stumps_delta: np.ndarray | None) -> Schedule:
        """The schedule once the open window is released, adding ``stumps_delta`` (``(P, C)``) to the prior stumps
        (no cadence: the clock's next window, the release merged)."""
        if self.cadence is None or stumps_delta is None:
            return self.of(sched.released + 1, None)
        total = release_total(stumps_delta, self.spec.budget, self.rows)
        return sched.after(total, self.sd, self.cadence, self.policy.release_every)

    def released_as(self, sched: Schedule, new: Schedule) -> None:
        """After a release: cache the new schedule and log a change of window length at INFO (public values).

        The line names the window released (``window``: the number ``streamdp model history`` shows), its noisy
        record count and whether it was merged, then the next window (``next_window``) and its new length
        (``length_s``, was ``was_s``)."""
        self.cached = new
        if self.cadence is not None and new.length != sched.length:
            jlog(
                log,
                logging.INFO,
                "worker.cadence",
                model=self.keys.name,
                window=new.released,
                noisy_records=round(new.last or 0.0, 1),
                merged=new.merged > sched.merged,
                next_window=new.released + 1,
                length_s=round(new.length, 6),
                was_s=round(sched.length, 6),
            )


def release_left_out(
    r: redis.Redis,
    keys: Keys,
    w: int,
    version: int,
    new: Schedule,
    noise_keys: list[str],
    noise_ttl_s: int = 0,
    history: dict[str, Any] | None = None,
) -> bool:
    """Release window ``w`` without merging it into the published counts (its released record total cannot be told
    from an empty release's: post-processing): the counts and version stay, the schedule moves on, the window's
    accumulator and stored noise go. One MULTI/EXEC under WATCH of the state, on the condition the closer's
    release has (``version``, ``w - 1`` released, ``w`` sealed, the same model); False otherwise."""
    with r.pipeline(transaction=True) as p:
        try:
            p.watch(keys.state)
            v, rel, open_, mid = p.hmget(keys.state, "version", "releases", "open", "model_id")
            if int(v or 0) != version or int(rel or 0) != w - 1 or int(open_ or 1) <= w:
                return False
            if mid is not None and as_str(mid) != keys.model_id:
                return False
            sched_b = json.dumps(new.to_dict())
            p.multi()
            p.hset(keys.state, mapping={"releases": w, "schedule": sched_b})
            p.hset(keys.pub_model, "schedule", sched_b)
            p.delete(keys.acc(w))
            for k in noise_keys:
                if noise_ttl_s:
                    p.expire(k, noise_ttl_s)
                else:
                    p.delete(k)
            p.hincrby(keys.stats, "windows_released", 1)
            p.hincrby(keys.stats, "windows_left_out", 1)
            p.hset(keys.stats, "last_release_ms", int(time.time() * 1000))
            if history is not None:  # (its public line: .history)
                append(p, keys, history)
            p.execute()
        except redis.WatchError:
            return False
    return True


#: The cadences a model may be created with (``create_model(cadence=)``, CLI ``--cadence``).
CADENCES = ("adaptive", "fixed")


def cadence_of(
    policy: ReleasePolicy, forest: PrivateForest, max_lag: float | None, mode: str | None = None
) -> Cadence | None:
    """The cadence of a new model (None: windows on the clock, every release merged); ``max_lag`` checked.

    ``mode``: ``"adaptive"`` (windows from the released record rate, noise-only releases left out; refused where
    the releases carry no record count), ``"fixed"`` (the clock's windows of ``release_every``, every release
    merged: idle windows add noise) or None (adaptive where the model can measure its releases, else fixed).
    """
    if mode is not None and mode not in CADENCES:
        raise ValueError(f"cadence must be one of {CADENCES}, got {mode!r}")
    if mode is not None and policy.kind == "batch":
        raise ValueError(
            "cadence (CLI --cadence) sets the windows of release='window', 'grow' or 'tree'; "
            "release='batch' releases each pushed batch"
        )
    if mode == "fixed":
        if max_lag is not None:
            raise ValueError(
                "max_lag (CLI --max-lag) bounds the adaptive cadence's windows; cadence='fixed' releases a window "
                "every release_every seconds"
            )
        return None
    measurable = forest.prior_trees >= 1 and forest.mechanism in ("geometric", "laplace")
    if policy.kind not in ("window", "grow") or not measurable:
        if max_lag is not None or mode == "adaptive":
            raise ValueError(
                ("max_lag (CLI --max-lag)" if max_lag is not None else "cadence='adaptive' (CLI --cadence adaptive)")
                + " needs release='window' or 'grow', a prior stump and geometric or laplace "
                "noise: window lengths follow the record count the stumps release"
            )
        return None
    cadence = Cadence(max(DEFAULT_MAX_LAG, policy.release_every) if max_lag is None else max_lag, grace=GRACE)
    if cadence.max_lag < policy.release_every:
        raise ValueError(
            f"max_lag (seconds) must be at least release_every ({policy.release_every:g}), got {max_lag!r}"
        )
    return cadence


def cadence_fields(cadence: Cadence | None, start: float, policy: ReleasePolicy) -> dict:
    """The state's and ``pub:model``'s cadence fields at creation: the rule and the first window (public)."""
    if cadence is None:
        return {}
    first = Schedule.first(start, policy.release_every)
    return {"cadence": json.dumps(cadence.to_dict()), "schedule": json.dumps(first.to_dict())}


def load_cadence(r: Any, name: str) -> Cadence | None:
    """The cadence of model ``name`` (None: a model whose windows follow the clock, every release merged)."""
    raw = connect(r).hget(Keys(name).state, "cadence")
    return None if raw is None else Cadence.from_dict(json.loads(raw))
