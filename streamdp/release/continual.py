"""Release policies and continual counting: when the stream model is noised and published.

One import for the service and the tests; each concept lives in its module:

* :mod:`streamdp.release.policy`: :class:`ReleasePolicy` (``batch``, ``window``, ``grow``, ``tree``;
  ``half_life`` for forgetting);
* :mod:`streamdp.release.schedule`: the public schedule of windows (the clock only);
* :mod:`streamdp.release.noisy`: :func:`noisy_node` and :func:`window_delta`, every release's one noise draw;
* :mod:`streamdp.release.tree`: ``tree``, continual counting with no horizon (Chan, Shi & Song's hybrid
  with plain windows first, Honaker's estimator) and its worker state :class:`TreeState`;
* :mod:`streamdp.release.variance`: the published counts' noise variance (public);
* :mod:`streamdp.release.decay`: exponentially decayed counts (post-processing of released deltas);
* :mod:`streamdp.release.counter`: :class:`Counter`, the in-memory reference of the service's steps.
"""

from __future__ import annotations

from streamdp.options import RELEASES
from streamdp.release.counter import Counter
from streamdp.release.decay import DecayedCounts, decay_factor, decayed_variance, released_records, variance_bound
from streamdp.release.noisy import NOISE_BLOCK, STREAM_CHUNK, RealRows, noisy_node, window_delta
from streamdp.release.policy import (
    DEFAULT_LEVELS,
    ESTIMATORS,
    HALF_LIFE_UNITS,
    MAX_LEVELS,
    MIN_RELEASE_EVERY,
    ReleasePolicy,
)
from streamdp.release.schedule import window_end, window_index, windows_closed, windows_due
from streamdp.release.tree import (
    PLAIN_OCTAVES,
    STATE_FORMAT,
    STATE_FORMAT_VERSION,
    UNITS,
    Node,
    TreeState,
    closing_nodes,
    node_units,
    node_windows,
    tree_variance_factor,
    window_units,
)
from streamdp.release.variance import class_total_sd, fixed_horizon_variance, published_variance

__all__ = [
    "RELEASES",
    "ReleasePolicy",
    "ESTIMATORS",
    "HALF_LIFE_UNITS",
    "MIN_RELEASE_EVERY",
    "DEFAULT_LEVELS",
    "MAX_LEVELS",
    "Node",
    "UNITS",
    "PLAIN_OCTAVES",
    "STATE_FORMAT",
    "STATE_FORMAT_VERSION",
    "node_units",
    "window_units",
    "window_index",
    "window_end",
    "windows_due",
    "windows_closed",
    "closing_nodes",
    "node_windows",
    "tree_variance_factor",
    "published_variance",
    "fixed_horizon_variance",
    "class_total_sd",
    "NOISE_BLOCK",
    "STREAM_CHUNK",
    "noisy_node",
    "RealRows",
    "window_delta",
    "TreeState",
    "DecayedCounts",
    "decay_factor",
    "decayed_variance",
    "released_records",
    "variance_bound",
    "Counter",
]
