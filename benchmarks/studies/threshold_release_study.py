"""Where the oracle-quantile gain on Breast Cancer comes from, and private threshold releases that chase it (issue #33).

    python benchmarks/studies/threshold_release_study.py NAMES REPEATS VARIANTS [EPS]

NAMES: comma-separated ``tree_vote.py`` datasets; VARIANTS: comma-separated names of :data:`VARIANTS` (the first
is the reference of the paired differences); EPS: comma-separated epsilons (default 0.1,0.5,1,2). Cells come from
``tree_vote_explore.cells`` (the same splits for every variant, fresh noise per fit). Each variant replaces the
fit's threshold release (:func:`streamdp.forest.marginals.noisy_marginals`, called by the first release) and/or
its share; every fit is otherwise the default one-shot fit.

Oracles (not private, diagnosis only): ``oq`` the training deciles declared as ``quantiles`` (share 0, as in
/tmp/bc_oracle.py); ``exB`` the exact ``B``-bin histograms, no prior, drawn at a negligible share (1e-9: the
counts keep all of epsilon); ``exBs`` the same at the default share 0.2 (perfect placement, the share paid);
``pxB`` the exact pooled histogram (below) at a negligible share.

Private releases at the default share ``s = 0.2``: ``b16`` main before decision 030 (its 16 per-attribute
histograms); ``lib``: the library's release as it is on the branch that runs the study (on branch thr-place-pooled-impl:
``mix16r25``); ``bB`` main at ``B`` bins; ``poolB``: ONE
histogram of every numeric attribute's position in its declared range, summed over attributes (``B`` equal-width
bins of [0, 1]); a record adds 1 to ``d`` bins of it, L1 sensitivity ``d``, geometric noise at ``s eps / d`` per
bin: ``s eps``-DP, like main's ``d`` histograms, but ``d`` records' worth of signal per bin for the same noise
scale ``d / (s eps)``. Every attribute then draws from that shared shape over its own range (post-processing,
floor and prior as main). ``mixB``: half the share on the pooled histogram, half on main's per-attribute
histograms (sequential composition), the pooled shape as the prior of each attribute's noisy counts (its
``B * scale`` noise scales of prior mass spread by the pooled density instead of uniformly); ``mixBr25`` /
``mixBr75``: a quarter / three quarters of the share on the pooled histogram; ``tmp16``: ``mix16r25`` with a
prior half pooled shape, half uniform; ``post16`` / ``post16r5``: the pooled share a quarter / half, each
attribute's prior weighing the pooled shape against uniform by the likelihood of its own noisy counts;
``mix16x``: a share of 0.25, 0.05 of epsilon on the pooled histogram and main's 0.2 on the per-attribute ones.

Results and their reading: ``benchmarks/results/threshold_release_study.log``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
warnings.simplefilter("ignore")

from tree_vote_explore import EPS, cells  # noqa: E402

import streamdp.forest.first_release as fr  # noqa: E402
from streamdp import PrivateForest  # noqa: E402
from streamdp.forest import marginals as mg  # noqa: E402
from streamdp.records.domains import Numeric  # noqa: E402
from streamdp.records.schema import Schema  # noqa: E402

ORIG = mg.noisy_marginals


def _bins(X: np.ndarray, schema: Schema, bins: int) -> np.ndarray:
    """Each numeric attribute's equal-width bin index over its declared range, ``(n, d)``."""
    num = np.flatnonzero(~schema.is_categorical)
    r = np.array(mg._ranges(schema))
    pos = (np.asarray(X, dtype=np.float64)[:, num] - r[:, 0]) / (r[:, 1] - r[:, 0]) * bins
    return np.clip(np.floor(np.nan_to_num(pos, nan=bins / 2)), 0, bins - 1).astype(np.int64)


def prior(bins: int, p: float = 1.0):
    """Main's release at ``bins`` bins (floor 1, prior ``p`` noise scales); threshold_placement_explore's
    ``prior``, whose module no longer imports."""

    def release(X, schema, eps, rng):
        noisy = mg.noisy_histograms(X, schema, eps, rng, bins)
        scale = noisy.shape[0] / eps
        return mg.Marginals.from_weights(schema, np.maximum(noisy - scale, 0.0) + p * scale)

    return release


def exact(bins: int):
    def release(X, schema, eps, rng):
        b = _bins(X, schema, bins)
        return mg.Marginals.from_weights(schema, np.stack([np.bincount(c, minlength=bins) for c in b.T]))

    return release


def pooled_counts(X, schema, bins):
    """Every numeric attribute's bin counts summed over attributes: ``(bins,)``, L1 sensitivity ``d``."""
    return np.bincount(_bins(X, schema, bins).ravel(), minlength=bins)


def pooled_exact(bins: int):
    def release(X, schema, eps, rng):
        d = int((~schema.is_categorical).sum())
        return mg.Marginals.from_weights(schema, np.tile(pooled_counts(X, schema, bins), (d, 1)))

    return release


def pooled_density(X, schema, eps, rng, bins):
    """The pooled release at ``eps`` (geometric noise at ``eps / d`` per bin, sensitivity ``d``), floored and
    prior-weighted as main's, normalised to sum 1 (post-processing)."""
    d = int((~schema.is_categorical).sum())
    noisy = pooled_counts(X, schema, bins) + mg.geometric_noise((bins,), eps / d, rng)
    scale = d / eps
    w = np.maximum(noisy - mg.NOISE_FLOOR * scale, 0.0) + mg.NOISE_PRIOR * scale
    return w / w.sum()


def pooled(bins: int):
    def release(X, schema, eps, rng):
        d = int((~schema.is_categorical).sum())
        return mg.Marginals.from_weights(schema, np.tile(pooled_density(X, schema, eps, rng, bins), (d, 1)))

    return release


def mixed(bins: int, r: float = 0.5):
    """``r`` of the share on the pooled histogram, the rest on per-attribute histograms; the pooled shape as
    every attribute's prior (the same total prior mass as main's: ``bins`` noise scales)."""

    def release(X, schema, eps, rng):
        shape = pooled_density(X, schema, r * eps, rng, bins)
        ea = (1 - r) * eps
        noisy = mg.noisy_histograms(X, schema, ea, rng, bins)
        scale = noisy.shape[0] / ea
        w = np.maximum(noisy - mg.NOISE_FLOOR * scale, 0.0) + mg.NOISE_PRIOR * scale * bins * shape
        return mg.Marginals.from_weights(schema, w)

    return release


def tempered(bins: int, r: float, lam: float | None):
    """As :func:`mixed`, the prior ``lam`` of the pooled shape and ``1 - lam`` uniform; ``lam`` None: per
    attribute, the posterior weight of the pooled shape against uniform given the attribute's own noisy
    histogram (Gaussian likelihoods of its counts around its noisy total spread each way, noise variance
    ``2 scale**2``): post-processing of the two releases."""

    def release(X, schema, eps, rng):
        shape = pooled_density(X, schema, r * eps, rng, bins)
        ea = (1 - r) * eps
        noisy = mg.noisy_histograms(X, schema, ea, rng, bins).astype(np.float64)
        scale = noisy.shape[0] / ea
        if lam is None:
            n = np.maximum(noisy.sum(axis=1, keepdims=True), 0.0)
            ll_a = -(((noisy - n * shape) ** 2).sum(axis=1)) / (4 * scale**2)
            ll_u = -(((noisy - n / bins) ** 2).sum(axis=1)) / (4 * scale**2)
            w = 1.0 / (1.0 + np.exp(np.clip(ll_u - ll_a, -50, 50)))
        else:
            w = np.full(noisy.shape[0], lam)
        pri = w[:, None] * shape + (1 - w[:, None]) / bins
        return mg.Marginals.from_weights(schema, np.maximum(noisy - scale, 0.0) + scale * bins * pri)

    return release


def support(bins: int, r: float, z: float = 1.0):
    """``r`` of the share on the pooled histogram read only as a support: a bin whose noisy pooled count is at or
    below ``z`` of its noise scales holds (up to the noise) no value of any attribute, the pooled count being a
    sum of every attribute's count. Each attribute's prior is main's (one noise scale per bin) on the other bins
    and nothing on those (all bins if none passes); its own counts above the floor as main's. Post-processing."""

    def release(X, schema, eps, rng):
        d = int((~schema.is_categorical).sum())
        pe = r * eps
        pooled = pooled_counts(X, schema, bins) + mg.geometric_noise((bins,), pe / d, rng)
        on = pooled > z * d / pe
        on = on if on.any() else np.ones(bins, dtype=bool)
        ea = (1 - r) * eps
        noisy = mg.noisy_histograms(X, schema, ea, rng, bins)
        scale = noisy.shape[0] / ea
        return mg.Marginals.from_weights(schema, np.maximum(noisy - scale, 0.0) + scale * on[None, :])

    return release


def oracle_schema(schema: Schema, Xtr: np.ndarray) -> Schema:
    """The training deciles declared as quantiles (not private: the diagnosis's oracle)."""
    attrs = []
    for j, a in enumerate(schema.attributes):
        if not isinstance(a, Numeric):
            attrs.append(a)
            continue
        qs = [float(v) for v in np.unique(np.quantile(Xtr[:, j], np.linspace(0.1, 0.9, 9))) if a.min < v < a.max]
        attrs.append(Numeric(a.name, a.min, a.max, quantiles=qs or None))
    return Schema(attrs, schema.label)


FREE = 1e-9  # a share that costs the counts nothing measurable: the exact oracles' "free" release
#: name -> (release or None for main's, share or None for the default, oracle schema?)
VARIANTS = {
    "b16": (prior(16), None, False),
    "lib": (None, None, False),
    "s0": (None, 0.0, False),
    "oq": (None, None, True),
    "ex16": (exact(16), FREE, False),
    "ex64": (exact(64), FREE, False),
    "ex16s": (exact(16), 0.2, False),
    "px16": (pooled_exact(16), FREE, False),
    "px64": (pooled_exact(64), FREE, False),
    **{f"b{b}": (prior(b, 1.0), 0.2, False) for b in (8, 32, 64)},
    **{f"pool{b}": (pooled(b), 0.2, False) for b in (8, 16, 32, 64)},
    **{f"mix{b}": (mixed(b), 0.2, False) for b in (8, 16, 32)},
    **{f"mix{b}r75": (mixed(b, 0.75), 0.2, False) for b in (8, 16)},
    **{f"mix{b}r25": (mixed(b, 0.25), 0.2, False) for b in (8, 16)},
    "tmp16": (tempered(16, 0.25, 0.5), 0.2, False),
    "supp16": (support(16, 0.25), 0.2, False),
    "mix16x": (mixed(16, 0.2), 0.25, False),
    "supp16r5": (support(16, 0.5), 0.2, False),
    "supp16r5z2": (support(16, 0.5, 2.0), 0.2, False),
    "post16": (tempered(16, 0.25, None), 0.2, False),
    "post16r5": (tempered(16, 0.5, None), 0.2, False),
}


def main() -> None:
    names, reps, variants = sys.argv[1].split(","), int(sys.argv[2]), sys.argv[3].split(",")
    eps = tuple(map(float, sys.argv[4].split(","))) if len(sys.argv) > 4 else EPS
    import tree_vote_explore

    tree_vote_explore.EPS = eps
    rows, t = [], time.perf_counter()
    for s, X, y, tr, te, e, row in cells(names, reps):
        for v in variants:
            release, share, orc = VARIANTS[v]
            fr.noisy_marginals = release or ORIG
            sch = oracle_schema(s, X[tr]) if orc else s
            f = PrivateForest.create(sch, epsilon=e, threshold_share=share).fit_encoded(X[tr], y[tr])
            p = f.proba_from_leaves(f.structure.apply(X[te], sch.is_categorical)).argmax(axis=1)
            row[v] = float((p == y[te]).mean())
        rows.append(row)
    fr.noisy_marginals = ORIG
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"# {sys.argv[1:]} {time.perf_counter() - t:.0f}s; load at end: {load}")
    ref = variants[0]
    for name in names:
        for e in eps:
            rs = [r for r in rows if r["dataset"] == name and r["eps"] == e]
            out = []
            for v in variants:
                a = np.array([r[v] for r in rs])
                d = a - np.array([r[ref] for r in rs])
                out.append(
                    f"{v}={a.mean():.3f}"
                    + (f"({d.mean():+.3f}±{d.std(ddof=1) / np.sqrt(len(d)):.3f})" if v != ref else "")
                )
            print(f"{name:20s} {e:4g} n={len(rs)} " + " ".join(out), flush=True)
    if len(sys.argv) > 5:
        json.dump(rows, open(sys.argv[5], "w"))


if __name__ == "__main__":
    main()
