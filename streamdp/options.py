"""The options of a model as users type them: the one list of each.

:class:`streamdp.PrivateForest` checks its arguments against these, the CLI
offers them, a stream model's release policy is one of ``RELEASES`` and a
learner's scorer one of ``SCORERS``. This module is light to import (no numpy)
and imports nothing of streamdp, so every layer may read it.

>>> "geometric" in MECHANISMS and "window" in RELEASES
True
"""

__all__ = [
    "MECHANISMS",
    "VOTES",
    "FOREST_VOTES",
    "BUDGETS",
    "RELEASES",
    "SCORERS",
    "MAX_PRIOR_TREES",
    "PRUNE_PROBE",
    "DEFAULT_THRESHOLD_SHARE",
    "DEFAULT_N_TREES",
]

MECHANISMS = ("geometric", "laplace", "kanon")
VOTES = ("proba", "majority")
#: A :class:`streamdp.PrivateForest`'s votes: ``VOTES`` and ``"trees"`` (each tree's leaf estimate, leaning on the pooled
#: one by its noise, averaged over the trees: :meth:`streamdp.estimation.ForestNodes.tree_mean`), the default of a
#: forest created without a tree count (docs/decisions/026-tree-mean-vote.md). The river paths and the service's
#: models take ``VOTES`` only.
FOREST_VOTES = (*VOTES, "trees")
BUDGETS = ("split", "disjoint")
RELEASES = ("batch", "window", "tree", "grow")
SCORERS = ("infogain", "gini", "max", "gainratio")
#: Upper bound on prior stumps, a forest's or HanischForest's (each takes a share of the budget; more than a few
#: only add noise).
MAX_PRIOR_TREES = 16
#: Share of each tree's budget a grown release's first release spends probing where the records are (0: no
#: probe); :mod:`streamdp.forest.pruning` explains the probe.
PRUNE_PROBE = 0.1
#: Share of a forest's epsilon its trees' first release (a one-shot fit, or a stream's first release:
#: :mod:`streamdp.forest.first_release`) spends on noisy histograms of the numeric attributes, to draw thresholds
#: where the records are (:mod:`streamdp.forest.marginals`), by default: for a schema with a numeric attribute that
#: declares no quantiles; 0 otherwise (docs/decisions/017-numeric-thresholds.md, 021-stream-thresholds.md).
DEFAULT_THRESHOLD_SHARE = 0.2
#: Random trees a forest draws when no count is given; its one-shot fit keeps as many of them as the released
#: signal carries (:mod:`streamdp.forest.sizing`, docs/decisions/019-low-epsilon-defaults.md).
DEFAULT_N_TREES = 10
