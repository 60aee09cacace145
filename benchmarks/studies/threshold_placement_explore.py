"""Exploration harness for issue 33's threshold-placement lead (results: results/threshold_placement_explore.log).

    python benchmarks/studies/threshold_placement_explore.py [variants...]

Each variant replaces the fit's threshold release (:func:`streamdp.forest.marginals.noisy_marginals`, called by
the first release) with another release at the same share ``s * epsilon``; every fit is otherwise the default
one-shot fit. Sets: the narrow synthetic sets of ``numeric_pruning_explore.py`` (``narrow0..2``) and the numeric
sets of ``accuracy_small_data.py``; 2 x 5-fold CV, the same splits for every variant, fresh noise per fit.

* ``b16`` (main), ``b8``, ``b4``, ``b2``: equal-width noisy histograms, ``bins`` per attribute, the same
  floor / prior post-processing;
* ``dyad``: dyadic histograms at 2, 4 and 8 bins, each at a third of the share (sequential composition: the
  three levels together are ``s * epsilon``-DP); the density multiplies, down the levels, each bin's share of
  its parent from its (floored, prior-weighted) noisy count (post-processing);
* ``kKbB``: histograms of ``K`` attributes drawn at random (public coins) at ``eps / K`` each, the rest uniform;
* ``s0``: no share (uniform thresholds); ``s4bB``: share 0.4 at ``B`` bins;
* ``bBpP[fF]``: ``B`` bins, a prior of ``P`` noise scales (``p25`` = 0.25) and a floor of ``F`` (default 1);
* ``gBzZ``: ``B`` bins, a prior of 0.5 noise scales for an attribute whose released total exceeds ``Z`` noise
  standard deviations, else 1 (post-processing of the release); ``gm8zZ``: main's 16 bins, summed pairwise to
  8 where the gate passes; ``g16zZ``: 16 bins.

``b8p50`` and the gated ``g8z2`` were candidates (measured, not adopted: the log's conclusions). Every
variant here sets its bins, floor and prior itself, so ``b16`` stays main's release.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
warnings.simplefilter("ignore")

from numeric_pruning_explore import named  # noqa: E402

import streamdp.forest.first_release as fr  # noqa: E402
from streamdp import PrivateForest  # noqa: E402
from streamdp.forest import marginals as mg  # noqa: E402

EPSILONS = (0.1, 0.5, 1.0, 2.0)
ORIG = mg.noisy_marginals


def binned(bins: int):
    """Main's release before issue 33 (floor 1, prior 1 noise scale) at ``bins`` bins."""
    return prior(bins, 1.0)


def prior(bins: int, p: float, floor: float = 1.0):
    """``bins`` noisy bins as main's, post-processed with ``p`` noise scales of prior and ``floor`` of floor."""

    def release(X, schema, eps, rng):
        noisy = mg.noisy_histograms(X, schema, eps, rng, bins)
        scale = noisy.shape[0] / eps
        return mg.Marginals.from_weights(schema, np.maximum(noisy - floor * scale, 0.0) + p * scale)

    return release


def dyadic(levels=(2, 4, 8)):
    def release(X, schema, eps, rng):
        share = eps / len(levels)
        w = None
        for b in levels:
            noisy = mg.noisy_histograms(X, schema, share, rng, b)
            scale = noisy.shape[0] / share
            c = np.maximum(noisy - mg.NOISE_FLOOR * scale, 0.0) + 1.0 * scale
            if w is None:
                w = c / c.sum(axis=1, keepdims=True)
            else:
                pair = c.reshape(c.shape[0], -1, 2)
                frac = pair / pair.sum(axis=2, keepdims=True)
                w = (np.repeat(w, 2, axis=1).reshape(pair.shape) * frac).reshape(c.shape)
        return mg.Marginals.from_weights(schema, w)

    return release


def subset(k: int, bins: int):
    """Histograms of ``k`` numeric attributes drawn at random (public coins) at ``eps / k`` each (the one record's
    L1 change is ``k``: ``eps``-DP); the other attributes uniform (post-processing)."""

    def release(X, schema, eps, rng):
        d = int((~schema.is_categorical).sum())
        if k >= d:
            return prior(bins, 1.0)(X, schema, eps, rng)
        pick = np.sort(np.random.default_rng().choice(d, k, replace=False))
        num = np.flatnonzero(~schema.is_categorical)
        cols = X[:, num[pick]]
        noisy = mg.geometric_noise((k, bins), eps / k, rng) + np.stack(
            [
                np.bincount(
                    np.clip(np.floor((cols[:, j] - lo) / (hi - lo) * bins), 0, bins - 1).astype(int), minlength=bins
                )
                for j, (lo, hi) in enumerate(np.array(mg._ranges(schema))[pick])
            ]
        )
        scale = k / eps
        w = np.ones((d, bins))
        w[pick] = np.maximum(noisy - mg.NOISE_FLOOR * scale, 0.0) + 1.0 * scale
        return mg.Marginals.from_weights(schema, w)

    return release


def gated(bins: int, p: float, z: float, merge: bool = False):
    """Main's 16-bin release (``merge``) or a ``bins``-bin release; the prior ``p`` noise scales (and, with
    ``merge``, the 16 bins summed pairwise to 8) only for an attribute whose released noisy total exceeds
    ``z`` standard deviations of its noise (``sqrt(bins * 2) * scale``), else main's prior of 1 on the
    release. The gate reads the released histogram only (post-processing)."""

    def release(X, schema, eps, rng):
        nb = 16 if merge else bins
        noisy = mg.noisy_histograms(X, schema, eps, rng, nb).astype(np.float64)
        scale = noisy.shape[0] / eps
        ok = noisy.sum(axis=1) > z * np.sqrt(2.0 * nb) * scale
        base = np.maximum(noisy - scale, 0.0) + scale
        if merge:
            m = noisy.reshape(noisy.shape[0], -1, 2).sum(axis=2)
            weak = np.repeat(np.maximum(m - scale, 0.0) + p * scale, 2, axis=1) / 2
        else:
            weak = np.maximum(noisy - scale, 0.0) + p * scale
        return mg.Marginals.from_weights(schema, np.where(ok[:, None], weak, base))

    return release


VARIANTS = {
    "g8z2": gated(8, 0.5, 2.0),
    "g8z4": gated(8, 0.5, 4.0),
    "g16z3": gated(16, 0.5, 3.0),
    "gm8z3": gated(8, 0.5, 3.0, merge=True),
    "b16": binned(16),
    "b8": binned(8),
    "b4": binned(4),
    "b2": binned(2),
    "dyad": dyadic(),
    "k4b8": subset(4, 8),
    "b4p25": prior(4, 0.25),
    "b8p50": prior(8, 0.5),
    "b8p10": prior(8, 0.1),
    "b8p25": prior(8, 0.25),
    "b4p25f2": prior(4, 0.25, 2.0),
    "b16p25f2": prior(16, 0.25, 2.0),
    "b4f2": prior(4, 1.0, 2.0),
    "k8b8": subset(8, 8),
    "s0": None,
    "s4b4": binned(4),
    "s4b8": binned(8),
}
SHARE = {"s0": 0.0, "s4b4": 0.4, "s4b8": 0.4}
SETS = [
    "narrow0",
    "narrow1",
    "narrow2",
    "synth-blobs",
    "synth-linear",
    "synth-rules",
    "river-bananas",
    "river-imagesegments",
]


def main() -> None:
    args = sys.argv[1:]
    if args and args[0].startswith("sets="):
        SETS[:] = args.pop(0)[5:].split(",")
    variants = args or list(VARIANTS)
    res: dict = {}
    for name in SETS:
        schema, X, y = named(name)
        rng = np.random.default_rng(7)
        t = time.perf_counter()
        for _ in range(2):
            folds = np.array_split(rng.permutation(len(X)), 5)
            for k in range(5):
                te, tr = folds[k], np.concatenate([folds[j] for j in range(5) if j != k])
                for eps in EPSILONS:
                    for v in variants:
                        fr.noisy_marginals = VARIANTS[v] or ORIG
                        f = PrivateForest.create(schema, epsilon=eps, threshold_share=SHARE.get(v)).fit_encoded(
                            X[tr], y[tr]
                        )
                        p = f.proba_from_leaves(f.structure.apply(X[te], f.schema.is_categorical)).argmax(axis=1)
                        res.setdefault((name, eps, v), []).append(float((p == y[te]).mean()))
        for eps in EPSILONS:
            print(
                f"{name:22s} {eps:4g} " + " ".join(f"{v}={np.mean(res[(name, eps, v)]):.3f}" for v in variants),
                flush=True,
            )
        print(f"# {name}: {time.perf_counter() - t:.0f}s", flush=True)
    for grp, names in (("narrow", SETS[:3]), ("tuning", SETS[3:]), ("all", SETS)):
        for eps in (*EPSILONS, None):
            es = EPSILONS if eps is None else (eps,)
            m = {v: np.mean([np.mean(res[(n, e, v)]) for n in names for e in es]) for v in variants}
            print(f"mean {grp:7s} {'all' if eps is None else eps:>4} " + " ".join(f"{v}={m[v]:.4f}" for v in variants))


if __name__ == "__main__":
    main()
