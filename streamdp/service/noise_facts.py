"""The noise a stream model's releases draw, as ``show_model`` states it: from the model's public summary alone.

No data and no released value enters: the registry summary's parameters (epsilon, mechanism, budget, trees,
release policy, cadence, unit of privacy) decide every number here.
"""

from __future__ import annotations

from streamdp.release.cadence import Cadence, total_sd
from streamdp.release.policy import ReleasePolicy
from streamdp.release.variance import NEARLY_EXACT_SD, nearly_exact_epsilon, release_cell_sd

__all__ = ["release_noise", "NEARLY_EXACT_SD"]


def release_noise(info: dict, *, scheduled: bool) -> dict:
    """The noise facts of a geometric or Laplace stream model whose registry summary is ``info``:

    - ``cell_sd``: one release's noise sd on a random tree's count, as the releases draw it (the noise's epsilon:
      epsilon / K with a privacy id);
    - ``first_cell_sd``: the first release's, where it differs (``grow``: its probe spends part of the budget);
    - ``nearly_exact_above``: only where ``cell_sd`` is below :data:`NEARLY_EXACT_SD` (half a record: the released
      counts are nearly exact), the largest declared epsilon (per person with a privacy id) whose releases draw
      at least that much (:func:`~streamdp.release.variance.nearly_exact_epsilon`); absent for an infinite
      epsilon, which is not private at all;
    - ``merge_bar``: with a cadence (``scheduled``) and a prior stump, the noisy records a release must stand
      above to be merged alone.

    Why: ``model create`` and ``model show`` state the noise a model's declared budget buys, loudly when it buys
    almost none (a budget is the owner's choice; exact counts should not be a surprise).

    >>> info = {"release": ReleasePolicy("window").to_dict(), "epsilon": 50.0, "mechanism": "laplace",
    ...         "budget": "split", "n_trees": 1, "prior_trees": 1}
    >>> facts = release_noise(info, scheduled=False)
    >>> round(facts["cell_sd"], 3), facts["nearly_exact_above"]
    (0.057, 5.65)
    """
    out: dict = {}
    trees = info["n_trees"] + info.get("prior_trees", 0)
    eps = float(info.get("epsilon_per_record", info["epsilon"]))
    policy = ReleasePolicy.from_dict(info["release"])
    rest = (info["mechanism"], info["budget"], info["n_trees"], info.get("prior_trees", 0))
    out["cell_sd"] = release_cell_sd(policy, eps, *rest)
    if out["cell_sd"] < NEARLY_EXACT_SD and eps != float("inf"):
        k = (info.get("unit") or {}).get("max_records_per_id", 1)
        out["nearly_exact_above"] = float(f"{nearly_exact_epsilon(policy, *rest) * k:.12g}")
    first_sd = release_cell_sd(policy, eps, *rest, first=True)
    if first_sd != out["cell_sd"]:
        out["first_cell_sd"] = first_sd
    if scheduled and info.get("cadence") and info.get("prior_trees", 0):  # the cadence's merge bar
        cad = Cadence.from_dict(info["cadence"])
        sd = total_sd(out["cell_sd"] ** 2, info["n_classes"], info["prior_trees"], info["budget"], trees)
        out["merge_bar"] = cad.keep_z * sd  # noisy records a release must stand above to be merged alone
    return out
