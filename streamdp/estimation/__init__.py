"""Noise-aware estimation: class distributions of tree nodes from released noisy counts.

Post-processing only: the rule reads released counts and the noise variance, which is public (it follows
from epsilon, the number of trees and the mechanism), so it spends no epsilon and changes no released number.

- :mod:`~streamdp.estimation.rule`: the pooled vote's posterior step, the per-tree shrink rule and the noise
  variance of a released cell;
- :mod:`~streamdp.estimation.prior`: class priors from released numbers;
- :mod:`~streamdp.estimation.nodes`: a released forest's node layout (:class:`ForestNodes`) and its vote;
- :mod:`~streamdp.estimation.trees`: the rule on a learner's tree;
- :mod:`~streamdp.estimation.one_record`: the rule for one record in plain Python (the river path);
- :mod:`~streamdp.estimation.prior_phase`: the schedule of a river classifier's prior phase.
"""

from streamdp.estimation.nodes import ForestNodes, forest_topology, tree_records
from streamdp.estimation.one_record import path_proba_one, posterior_one
from streamdp.estimation.prior import forest_prior, leaf_rule_proba, prior_from, release_prior
from streamdp.estimation.prior_phase import prior_phase_first, prior_phase_size
from streamdp.estimation.rule import (
    ESTIMATORS,
    KAPPA,
    MIN_WEIGHT,
    PRIOR_WEIGHT,
    SHARE_SPREAD,
    SNR_MIN,
    SNR_MIN_GROWN,
    cell_variance,
    node_distributions,
    posterior_step,
    seq_sum,
    shrink,
)
from streamdp.estimation.trees import (
    inverse_variance_mean,
    reachable,
    reachable_leaves,
    released_node_counts,
    tree_node_proba,
)

__all__ = [
    "KAPPA",
    "SHARE_SPREAD",
    "posterior_step",
    "posterior_one",
    "tree_records",
    "SNR_MIN",
    "SNR_MIN_GROWN",
    "PRIOR_WEIGHT",
    "MIN_WEIGHT",
    "ESTIMATORS",
    "seq_sum",
    "cell_variance",
    "node_distributions",
    "shrink",
    "prior_from",
    "forest_prior",
    "release_prior",
    "prior_phase_first",
    "prior_phase_size",
    "forest_topology",
    "ForestNodes",
    "leaf_rule_proba",
    "tree_node_proba",
    "released_node_counts",
    "inverse_variance_mean",
    "reachable",
    "reachable_leaves",
    "path_proba_one",
]
