"""Continual release of running counts in memory: the reference the service mirrors, step by step.

>>> c = Counter(ReleasePolicy("tree"), shape=(2,), epsilon=float("inf"), rng=SecureRandom())
>>> for w in range(1, 40):
...     c.add(np.array([w, 1]))
...     published = c.close()
>>> published.tolist()   # no noise at epsilon=inf: the exact running sum
[780, 39]
"""

from __future__ import annotations

import numpy as np

from streamdp.privacy.mechanisms import SecureRandom
from streamdp.release.decay import DecayedCounts
from streamdp.release.noisy import noisy_node, window_delta
from streamdp.release.policy import ReleasePolicy
from streamdp.release.schedule import windows_due
from streamdp.release.tree import TreeState

__all__ = ["Counter"]


class Counter:
    """Continual release of running counts in memory: the steps the service performs, in order.

    ``add`` puts an exact tally into the open window (``batch``: noises and merges it at
    once); ``close`` releases the open window; ``tick(now)`` closes every window due by
    ``now`` on the public schedule starting at ``start``. ``published`` is what consumers see;
    with a ``half_life`` (``window``) it is the decayed counts (:mod:`streamdp.release.decay`).
    """

    def __init__(
        self,
        policy: ReleasePolicy,
        shape: tuple,
        epsilon: float,
        rng: SecureRandom,
        mechanism: str = "geometric",
        real: np.ndarray | None = None,
        start: float = 0.0,
        k: int | None = None,
    ):
        policy.check_mechanism(mechanism)
        self.policy, self.shape, self.rng, self.mechanism, self.real, self.start = (
            policy,
            tuple(shape),
            rng,
            mechanism,
            real,
            start,
        )
        self.k = k
        self.epsilon_node = policy.node_epsilon(epsilon)
        dtype = np.float64 if mechanism == "laplace" else np.int64
        self.published = np.zeros(self.shape, dtype)
        self.releases = 0
        self.window: np.ndarray | None = None  # SECRET: the open window's exact tally
        self.state = TreeState.empty(policy, self.shape) if policy.kind == "tree" else None
        self.decayed = DecayedCounts(policy) if policy.half_life is not None else None

    def add(self, tally: np.ndarray, now: float | None = None) -> None:
        if now is not None:
            self.tick(now)
        tally = np.asarray(tally, dtype=np.int64)
        if self.policy.kind == "batch":
            self.published = self.published + noisy_node(
                tally, self.epsilon_node, self.mechanism, self.rng, self.real, self.k
            )
            self.releases += 1
        else:
            self.window = tally if self.window is None else self.window + tally

    def tick(self, now: float) -> None:
        if self.policy.kind != "batch":
            for _ in windows_due(now, self.start, self.policy.release_every, self.releases):
                self.close()

    def close(self) -> np.ndarray:
        if self.policy.kind == "window":
            delta = window_delta(
                self.window, self.shape, self.epsilon_node, self.mechanism, self.rng, self.real, self.k
            )
            if self.decayed is None:
                self.published = self.published + delta
            else:
                decayed = self.decayed.update(delta)
                dtype = self.published.dtype
                self.published = np.rint(decayed).astype(dtype) if dtype.kind in "iu" else decayed.astype(dtype)
        elif self.policy.kind == "tree":
            assert self.state is not None
            exact = self.state.closing_sums(self.window)
            noisy = {n: noisy_node(x, self.epsilon_node, self.mechanism, self.rng, self.real) for n, x in exact.items()}
            self.state = self.state.advance(self.window, noisy)
            self.published = self.state.published(self.published.dtype)
        else:
            raise ValueError(f"release={self.policy.kind!r} has no windows to close here")
        self.window = None
        self.releases += 1
        return self.published
