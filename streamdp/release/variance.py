"""The noise variance of a stream model's published counts: public (epsilon, mechanism, policy, releases only).

What the estimators (:mod:`streamdp.estimation`) and ``model show`` read; no data enters it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

from streamdp.estimation import cell_variance
from streamdp.privacy.secure_random import NearlyExactWarning
from streamdp.release.octaves import UNITS, tree_variance_factor
from streamdp.release.policy import ReleasePolicy

__all__ = [
    "published_variance",
    "fixed_horizon_variance",
    "class_total_sd",
    "release_cell_sd",
    "NEARLY_EXACT_SD",
    "nearly_exact_epsilon",
    "largest_noisy_epsilon",
    "nearly_exact_words",
    "warn_nearly_exact",
]

#: One release's noise sd on a count below which the released counts are nearly exact: half a record.
NEARLY_EXACT_SD = 0.5


def _per_tree(epsilon: float, budget: str, n_trees: int, prior_trees: int) -> float:
    """Each tree's epsilon, as the budget shares the model's (per record) ``epsilon`` over its trees and stumps."""
    return epsilon / (n_trees + prior_trees) if budget == "split" else epsilon


def release_cell_sd(
    policy: ReleasePolicy,
    epsilon: float,
    mechanism: str,
    budget: str,
    n_trees: int,
    prior_trees: int,
    *,
    first: bool = False,
) -> float:
    """Standard deviation of the noise one release draws on one random tree's count (a cell), from the model's
    public parameters: ``epsilon`` per record (``epsilon / K`` with a privacy id), shared by the budget, at the
    policy's epsilon of one draw (:meth:`~streamdp.release.policy.ReleasePolicy.node_epsilon`; ``first``: the
    model's first release, :meth:`~streamdp.release.policy.ReleasePolicy.first_node_epsilon`, larger under
    ``grow``, whose probe spends part of the trees' budget). Geometric or Laplace noise.
    Why: ``model show`` reports the scale the releases draw at, by their rule, not a copy of it.

    >>> round(release_cell_sd(ReleasePolicy("window"), 1.0, "laplace", "split", 3, 1), 3)  # sqrt(2) / 0.25
    5.657
    >>> round(release_cell_sd(ReleasePolicy("grow"), 1.0, "laplace", "split", 3, 1, first=True), 3)  # / 0.225
    6.285
    """
    per_tree = _per_tree(epsilon, budget, n_trees, prior_trees)
    node = policy.first_node_epsilon(per_tree) if first else policy.node_epsilon(per_tree)
    return math.sqrt(cell_variance(mechanism, node))


def nearly_exact_epsilon(policy: ReleasePolicy, mechanism: str, budget: str, n_trees: int, prior_trees: int) -> float:
    """The largest epsilon (per record, as :func:`release_cell_sd` takes it; 3 significant digits, rounded down)
    whose releases still draw noise of sd at least :data:`NEARLY_EXACT_SD` on a random tree's count: a model with
    a larger epsilon releases nearly exact counts. Public parameters only; geometric or Laplace noise.
    Why: a declared budget is its owner's choice, but ``model create`` and ``model show`` say when it is this large.

    >>> nearly_exact_epsilon(ReleasePolicy("window"), "laplace", "split", 1, 1)  # 2 trees x 2 sqrt(2)
    5.65
    """

    return largest_noisy_epsilon(lambda eps: release_cell_sd(policy, eps, mechanism, budget, n_trees, prior_trees))


def largest_noisy_epsilon(sd_at: Callable[[float], float]) -> float:
    """The largest epsilon (3 significant digits, rounded down) at which ``sd_at(epsilon)``, the noise sd on one
    released count (falling as epsilon grows), is still at least :data:`NEARLY_EXACT_SD`: the rule of
    :func:`nearly_exact_epsilon`, for any release whose count noise is a public function of its epsilon (a batch
    job's learner too). Why: one rule for "nearly exact" wherever a budget is declared.

    >>> largest_noisy_epsilon(lambda eps: 1.0 / eps)  # sd 1/eps >= 0.5 up to eps 2
    2.0
    """

    def noisy(eps: float) -> bool:
        return sd_at(eps) >= NEARLY_EXACT_SD

    lo, hi = 1e-12, 1e12  # noisy(lo), not noisy(hi): the sd falls as epsilon grows
    for _ in range(200):  # bisection on a log scale
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if noisy(mid) else (lo, mid)
    step = 10.0 ** (math.floor(math.log10(lo)) - 2)
    return round(math.floor(lo / step) * step, 12)


def nearly_exact_words(epsilon: str, sd: float, above: float) -> str:
    """The one wording of a nearly exact release (``model create``/``show``, the library, batch jobs): ``epsilon``
    as the caller names it, one release's noise ``sd`` on a count, and :func:`largest_noisy_epsilon`'s ``above``.

    >>> print(nearly_exact_words("epsilon=50", 0.057, 5.65))  # doctest: +ELLIPSIS
    epsilon=50 releases nearly exact counts: ... sd 0.057, below half a record; an epsilon of 5.65 or less ...
    """
    return (
        f"{epsilon} releases nearly exact counts: each release's noise on a count has sd {sd:.2g}, below half a "
        f"record; an epsilon of {above:g} or less would add at least that much"
    )


def warn_nearly_exact(
    who: str,
    epsilon: float,
    mechanism: str,
    budget: str,
    n_trees: int,
    prior_trees: int,
    *,
    policy: ReleasePolicy | None = None,
    stacklevel: int = 2,
) -> bool:
    """Warn (:class:`~streamdp.privacy.NearlyExactWarning`) when a model of these public parameters releases
    nearly exact counts: one release's noise sd on a random tree's count (:func:`release_cell_sd`, ``policy``
    default ``batch``: one draw per release at the per-tree epsilon) below :data:`NEARLY_EXACT_SD`. The message
    names ``who`` (what the user made), the sd and :func:`nearly_exact_epsilon`. Returns whether it warned.
    A finite epsilon with geometric or Laplace noise only: ``inf`` is :class:`~streamdp.privacy.NotPrivateWarning`'s,
    k-anonymity draws no such noise. ``stacklevel`` as for :func:`warnings.warn`, counted from the caller.
    Why: a declared budget is the owner's choice, but nearly exact counts must not pass unnoticed; the library
    says so where ``model create`` does (:func:`streamdp.service.noise_facts.release_noise`, the same rule).

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as got:
    ...     warnings.simplefilter("always")
    ...     warn_nearly_exact("PrivateForest.create", 50.0, "laplace", "split", 1, 1), warn_nearly_exact("f", 1.0, "laplace", "split", 1, 1)
    (True, False)
    >>> print(got[0].message)  # doctest: +ELLIPSIS
    PrivateForest.create: epsilon=50 releases nearly exact counts: ... sd 0.057, ...; an epsilon of 5.65 or less ...
    """
    if mechanism not in ("geometric", "laplace") or math.isinf(epsilon):
        return False
    if _per_tree(epsilon, budget, n_trees, prior_trees) < 1.0:  # sd above one record (and tiny epsilons' overflow)
        return False
    policy = policy or ReleasePolicy("batch")
    sd = release_cell_sd(policy, epsilon, mechanism, budget, n_trees, prior_trees)
    if sd >= NEARLY_EXACT_SD:
        return False
    above = nearly_exact_epsilon(policy, mechanism, budget, n_trees, prior_trees)
    warnings.warn(
        f"{who}: {nearly_exact_words(f'epsilon={epsilon:g}', sd, above)}",
        NearlyExactWarning,
        stacklevel=stacklevel + 1,
    )
    return True


def published_variance(policy: ReleasePolicy, t: int, variance: float) -> float:
    """Variance of one published cell after ``t`` releases (windows; batches for ``batch``).

    ``variance`` is :func:`streamdp.estimation.cell_variance` at ``policy.node_epsilon(...)`` (one draw).
    ``tree``: one draw's variance over ``UNITS**2`` is a node's of every unit (the plain window's), scaled by
    :func:`streamdp.release.tree.tree_variance_factor`. Rounding of the estimate to integers (geometric)
    adds at most 1/12 and is not included. A decayed ``window`` (``half_life``) is below ``t * variance``:
    :func:`streamdp.release.decay.decayed_variance` gives it from the released values.
    """
    if policy.kind != "tree":
        return t * variance
    if policy.fixed_horizon:
        return fixed_horizon_variance(policy.levels or 1, policy.estimator, t, variance)
    return tree_variance_factor(t) * variance / UNITS**2


def fixed_horizon_variance(levels: int, estimator: str, t: int, variance: float) -> float:
    """``Var S(t)`` of the fixed-horizon binary tree of earlier versions (``levels`` levels, each node at
    ``epsilon / levels``: ``variance`` is one node's; epochs of ``2**levels - 1`` windows, each finished
    epoch's estimated total carried). For stored models and for comparison."""
    tmax = 2**levels - 1
    epoch, u = divmod(t - 1, tmax)
    u += 1

    def one(u: int) -> float:
        if estimator == "decomposition":
            return bin(u).count("1") * variance
        return sum(2**lv / (2 ** (lv + 1) - 1) for lv in range(levels) if u >> lv & 1) * variance

    return epoch * one(tmax) + one(u)


def class_total_sd(
    policy: ReleasePolicy,
    releases: int,
    epsilon: float,
    mechanism: str,
    budget: str,
    n_trees: int,
    prior_trees: int,
    published: float | None = None,
) -> float | None:
    """Standard deviation of the noise on a stream model's estimate of one class's record count, from its
    prior stumps (public: the model's parameters and its release count; None for k-anonymity or without a stump).

    What the vote's prior rests on (:func:`streamdp.estimation.forest_prior`; the random trees' roots add
    little, each about its number of leaves times noisier, so this is an upper bound). The model can tell
    its majority class only once that class leads the next by several times ``sqrt(2)`` times this (at 3x
    it names the wrong one in about 0.1% of models); below, no estimate can keep the majority
    class's accuracy, the majority floor. Under the
    disjoint budget a stump counts ``1 / (n_trees + prior_trees)`` of the records, so its counts are scaled up
    (sampling error not included). ``published``: the published counts' noise variance per cell where it is not a
    function of the release count (a decayed model's, :mod:`streamdp.release.decay`; public).

    >>> round(class_total_sd(ReleasePolicy("window"), 47, 1.0, "geometric", "split", 10, 1), 1)  # Votes, 47 windows
    106.6
    """
    if mechanism == "kanon" or prior_trees < 1:
        return None
    if math.isinf(epsilon) or releases < 1:
        return 0.0
    trees = n_trees + prior_trees
    per_tree = _per_tree(epsilon, budget, n_trees, prior_trees)
    if published is None:
        published = published_variance(policy, releases, cell_variance(mechanism, policy.node_epsilon(per_tree)))
    v = published / prior_trees
    return math.sqrt(v) * (trees if budget == "disjoint" else 1.0)
