"""The release policy of a stream model: which mechanism publishes its running counts, and how often.

Four kinds (:data:`streamdp.options.RELEASES`): ``batch`` (each pushed batch noised once),
``window`` (each window of ``release_every`` seconds noised once, :mod:`streamdp.release.noisy`),
``grow`` (``window``'s schedule on trees that deepen, :mod:`streamdp.forest.growth`) and ``tree``
(continual counting with no horizon, :mod:`streamdp.release.tree`). ``window`` may forget: with
``half_life`` its published counts decay (:mod:`streamdp.release.decay`).

>>> ReleasePolicy.from_dict(ReleasePolicy("tree", 2.0).to_dict())
ReleasePolicy(kind='tree', release_every=2.0, levels=None, estimator='honaker', half_life=None, half_life_unit='releases')
>>> print(ReleasePolicy("window", half_life=100.0))
window: every 1 s, counts decayed with a half-life of 100 releases
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamdp.options import PRUNE_PROBE, RELEASES
from streamdp.privacy.mechanisms import SecureRandom
from streamdp.release.noisy import noisy_node
from streamdp.release.octaves import UNITS
from streamdp.validation import Interval, check_epsilon, check_integer

__all__ = [
    "RELEASES",
    "ReleasePolicy",
    "probed_epsilon",
    "ESTIMATORS",
    "HALF_LIFE_UNITS",
    "MIN_RELEASE_EVERY",
    "DEFAULT_LEVELS",
    "MAX_LEVELS",
]

ESTIMATORS = ("honaker", "decomposition")
HALF_LIFE_UNITS = ("releases", "records")
#: The shortest window (seconds) a new model may have: each release writes the model's counts and adds a noise
#: draw to every count, so shorter windows only add noise. Models stored before the rule still load.
MIN_RELEASE_EVERY = 0.01
#: ``levels`` of the fixed-horizon binary tree that ``tree`` models stored by earlier versions ran (read only).
DEFAULT_LEVELS = 20
MAX_LEVELS = 48
_KEYS = {"kind", "release_every", "levels", "estimator"}
_DECAY_KEYS = {"half_life", "half_life_unit"}


def probed_epsilon(epsilon: float, probe: float = PRUNE_PROBE) -> float:
    """The epsilon a tree's leaves are noised at in a release that probes first: what the probe (``probe`` of the
    tree's ``epsilon``) leaves. The one rule: :func:`~streamdp.forest.growth.grown_release` noises by it and
    :meth:`~streamdp.release.policy.ReleasePolicy.first_node_epsilon` reports it (``model show``), so the noise
    a user is told is the noise drawn.

    >>> round(probed_epsilon(1.0), 12)
    0.9
    """
    return epsilon - probe * epsilon


@dataclass(frozen=True)
class ReleasePolicy:
    """How a stream model is released: ``kind`` in :data:`RELEASES`.

    ``release_every`` (seconds; ``window``, ``grow`` and ``tree``) is the public schedule.
    ``levels`` is ``None`` except for a ``tree`` model stored by an earlier version, which ran a
    fixed-horizon binary tree of ``levels`` levels: such a policy still loads (its published versions
    stay readable) but :class:`streamdp.release.tree.TreeState` refuses to continue it
    (:attr:`fixed_horizon`). ``estimator`` is ``"honaker"`` (a stored fixed-horizon tree may say
    ``"decomposition"``). ``half_life`` (``window`` only; ``None``: no forgetting) decays the published
    counts by half every ``half_life`` releases or records (``half_life_unit``), see
    :mod:`streamdp.release.decay`.

    Raises ValueError naming the setting that is out of range or belongs to another kind.
    """

    kind: str = "window"
    release_every: float = 1.0
    levels: int | None = None
    estimator: str = "honaker"
    half_life: float | None = None
    half_life_unit: str = "releases"

    def __post_init__(self) -> None:
        if self.kind not in RELEASES:
            raise ValueError(f"release must be one of {RELEASES}, got {self.kind!r}")
        # (the minimum, MIN_RELEASE_EVERY, is a rule for new models: registry.create_model; a stored policy loads)
        object.__setattr__(
            self,
            "release_every",
            Interval(float, 0, math.inf, closed="neither").check(self.release_every, "release_every"),
        )
        if self.levels is not None:
            if self.kind != "tree":
                raise ValueError(f"levels belongs to the fixed-horizon tree of earlier versions, not {self.kind!r}")
            object.__setattr__(self, "levels", check_integer(self.levels, "levels", high=MAX_LEVELS))
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {self.estimator!r}")
        if self.estimator != "honaker" and not self.fixed_horizon:
            raise ValueError(
                f"estimator {self.estimator!r} was the fixed-horizon tree's; release={self.kind!r} uses 'honaker'"
            )
        if self.half_life_unit not in HALF_LIFE_UNITS:
            raise ValueError(f"half_life_unit must be one of {HALF_LIFE_UNITS}, got {self.half_life_unit!r}")
        if self.half_life is not None:
            if self.kind != "window":
                raise ValueError(
                    f"half_life (forgetting) decays the released deltas of release='window', not {self.kind!r}"
                )
            object.__setattr__(
                self, "half_life", Interval(float, 0, math.inf, closed="neither").check(self.half_life, "half_life")
            )

    @property
    def fixed_horizon(self) -> bool:
        """Whether this is a stored ``tree`` policy of the fixed-horizon binary tree (no longer run)."""
        return self.kind == "tree" and self.levels is not None

    def node_epsilon(self, epsilon_per_tree: float) -> float:
        """The one rule from the model's per-tree epsilon to the epsilon of one noise draw.

        ``tree``: one *unit* of :data:`streamdp.release.tree.UNITS` per window (a node of ``c`` units
        is released as ``c`` times its sum noised at this epsilon, ``c * epsilon / UNITS``-DP);
        a stored fixed-horizon tree: ``epsilon / levels``; ``batch``, ``window`` and ``grow``: all of it.
        """
        check_epsilon(epsilon_per_tree, "epsilon_per_tree", allow_inf=True)
        if self.kind != "tree":
            return float(epsilon_per_tree)
        return epsilon_per_tree / (self.levels if self.levels is not None else UNITS)

    def first_node_epsilon(self, epsilon_per_tree: float) -> float:
        """The epsilon of one noise draw on a random tree's count in the model's first release: under ``grow`` what
        its probe leaves (:func:`probed_epsilon`: a fresh forest's first grown release
        probes where the records are first, unless the probe would split nothing), else :meth:`node_epsilon`.
        Why: ``model show`` states the noise the release draws, from the rule the release draws it by.

        >>> round(ReleasePolicy("grow").first_node_epsilon(1.0), 12), ReleasePolicy("window").first_node_epsilon(1.0)
        (0.9, 1.0)
        """
        node = self.node_epsilon(epsilon_per_tree)
        return probed_epsilon(node) if self.kind == "grow" else node

    def check_drawable(self, epsilon_per_tree: float, mechanism: str) -> None:
        """Refuse a per-tree epsilon whose smallest release (a node; a grown release's probe, ``PRUNE_PROBE`` of it)
        has noise the samplers cannot draw (a model so created would be charged, then every release fail).
        Draws one cell of noise on nothing: no data is read.

        >>> ReleasePolicy("window").check_drawable(1e-300, "geometric")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: its smallest release would be noised at epsilon 1e-300 per tree and node (...)
        """

        if math.isinf(epsilon_per_tree) or mechanism == "kanon":
            return
        smallest = self.node_epsilon(epsilon_per_tree) * (PRUNE_PROBE if self.kind == "grow" else 1.0)
        try:
            noisy_node(np.zeros((1, 1, 1), dtype=np.int64), smallest, mechanism, SecureRandom())
        except (ValueError, OverflowError, ZeroDivisionError, FloatingPointError) as e:
            raise ValueError(
                f"its smallest release would be noised at epsilon {smallest:g} per tree and node ({e})"
            ) from None

    def check_mechanism(self, mechanism: str) -> None:
        """Refuse a mechanism this policy has no privacy analysis for."""
        if self.kind in ("tree", "grow") and mechanism not in ("geometric", "laplace"):
            raise ValueError(f"release={self.kind!r} needs mechanism 'geometric' or 'laplace', got {mechanism!r}")

    def to_dict(self) -> dict:
        d: dict[str, Any] = {
            "kind": self.kind,
            "release_every": self.release_every,
            "levels": self.levels,
            "estimator": self.estimator,
        }
        if self.half_life is not None:
            d.update(half_life=self.half_life, half_life_unit=self.half_life_unit)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> ReleasePolicy:
        """The policy of :meth:`to_dict`; a stored policy of an earlier version (``levels`` set for every kind,
        a fixed-horizon ``tree``) loads too."""
        if not isinstance(d, dict) or not (set(d) == _KEYS or set(d) == _KEYS | _DECAY_KEYS):
            got = sorted(d) if isinstance(d, dict) else type(d).__name__
            raise ValueError(
                f"a release policy is a map of kind, release_every, levels, estimator "
                f"(and half_life, half_life_unit); got {got}"
            )
        d = dict(d)
        if d["kind"] != "tree":
            d["levels"] = None  # earlier versions stored the default levels with every kind
        return cls(**d)

    def __str__(self) -> str:
        if self.kind == "batch":
            return "batch: each pushed batch noised once (Jagannathan et al.)"
        if self.kind == "window":
            decay = (
                ""
                if self.half_life is None
                else f", counts decayed with a half-life of {self.half_life:g} {self.half_life_unit}"
            )
            return f"window: every {self.release_every:g} s{decay}"
        if self.kind == "grow":
            return f"grow: every {self.release_every:g} s, trees deepened as the released counts allow"
        if self.fixed_horizon:
            return (
                f"tree: every {self.release_every:g} s, fixed-horizon binary tree of L={self.levels} levels "
                "(an earlier version's; no longer run)"
            )
        return f"tree: every {self.release_every:g} s, continual counting with no horizon, honaker estimator"
