"""Multi-draw comparisons of two PrivateForestClassifier choices in river's own loop (issue 15).

    python benchmarks/studies/river_variants.py stump    [--draws 4] [--only NAME ...]
    python benchmarks/studies/river_variants.py variance [--draws 5] [--only NAME ...]
    python benchmarks/studies/river_variants.py prior    [--draws 8] [--only NAME ...]
    python benchmarks/studies/river_variants.py guard    [--draws 6] [--only NAME ...]
    python benchmarks/studies/river_variants.py window_prior [--draws 4] [--only NAME ...]
    python benchmarks/studies/river_variants.py window_phase [--draws 30] [--only NAME ...]
    # prints one line per stream and variant; results/river_variants.log keeps the runs quoted in
    # river_eval.md

``stump``: ``prior_trees=0`` against the default ``prior_trees=1``. ``variance``: estimation
weighing the counts by one release's noise variance (what the code did before
``PrivateForest.noise_variance``; reproduced here by overriding the property) against the
accumulated variance of the releases (the code now). ``prior``: the river forest before issue 15's
prior changes (no prior phase, the class prior from the summed counts: ``prior_records=0`` with the
release log switched off), with the release-weighted prior alone (``prior_records=0``), and the default
(prior phase and release-weighted prior). ``guard``: the default ``guard=0`` (the forest always votes, all of epsilon to
the trees) against ``guard=0.1`` (the prior guard), with the running majority beside. ``window_prior``:
PrivateWindowClassifier with each model's own class prior (before) against the prior pooled over the voting
models' windows (the code now). ``window_phase``: PrivateWindowClassifier as in round 2's fifth session
(no prior phase, uniform until a first window of 100 records closes, every voting model weighed alike), then
with the prior phase (``prior_records=100``), then with votes weighed by window size, then with the first
window of 200 records, each with every root shrunk toward the pooled prior by the Dirichlet weight (the rule
before); then the code now: every root is the pooled prior. The line also counts the draws below the
majority minus 0.01.
Progressive validation
(``river.evaluate.progressive_val_score``, accuracy) over the first 10,000 records of the
streams of ``river_eval.py``, epsilon 1, mean and minimum over ``--draws`` private draws.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from river import dummy, evaluate, metrics  # noqa: E402

import streamdp.forest.model as forest_module  # noqa: E402
from benchmarks.studies.river_eval import streams  # noqa: E402
from streamdp.river import PrivateForestClassifier  # noqa: E402
from streamdp.river.schemas import schema_for  # noqa: E402

warnings.simplefilter("ignore")


def _own_prior(learner):
    """A window model's class prior from its own leaves alone (PrivateWindowClassifier before the pooled prior)."""
    from streamdp.estimation import prior_from

    return prior_from(np.concatenate([t.counts[t.reachable_leaves()] for t in learner.trees_]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("compare", choices=("stump", "variance", "prior", "guard", "window_prior", "window_phase"))
    ap.add_argument("--draws", type=int, default=4)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args(argv)
    accumulated = forest_module.PrivateForest.noise_variance
    one_release = property(lambda self: np.full(self.structure.n_trees, self.cell_variance), accumulated.fset)
    log_prior = PrivateForestClassifier._log_prior
    majority = {}
    print(f"# {args.compare}, {args.draws} draws; load {os.getloadavg()[0]:.1f} at start", flush=True)
    for name, ds in streams(args.n).items():
        if args.only and name not in args.only:
            continue
        data = list(itertools.islice(ds, args.n))
        schema = schema_for(ds)
        majority[name] = evaluate.progressive_val_score(data, dummy.PriorClassifier(), metrics.Accuracy()).get()

        def measure(label: str, make) -> None:
            """One variant: ``make()`` a fresh classifier per draw, progressive accuracy, one line."""
            accs = [evaluate.progressive_val_score(data, make(), metrics.Accuracy()).get() for _ in range(args.draws)]
            below = sum(a < majority[name] - 0.01 for a in accs)
            print(
                f"{name} | {label} | mean {np.mean(accs):.3f} | min {min(accs):.3f} | "
                f"majority {majority[name]:.3f} | below {below}/{len(accs)}",
                flush=True,
            )

        if args.compare == "prior":
            for label, kw, log in (
                ("before: no phase, summed prior", {"prior_records": 0}, False),
                ("release prior, no phase", {"prior_records": 0}, True),
                ("phase + release prior (default)", {}, True),
            ):
                PrivateForestClassifier._log_prior = log_prior if log else (lambda self, *a: None)
                measure(label, lambda kw=kw: PrivateForestClassifier(schema, epsilon=1.0, **kw))
            PrivateForestClassifier._log_prior = log_prior
            continue
        if args.compare == "window_prior":
            from streamdp.learners._base import PrivateLearner
            from streamdp.river import PrivateWindowClassifier

            pooled = PrivateLearner.class_prior
            for label, prior in (("own prior (before)", _own_prior), ("pooled prior (now)", pooled)):
                PrivateLearner.class_prior = prior
                measure(label, lambda: PrivateWindowClassifier(schema, epsilon=1.0))
            PrivateLearner.class_prior = pooled
            continue
        if args.compare == "window_phase":
            import streamdp.estimation as estimation_module
            from streamdp.river import PrivateWindowClassifier

            weighted = PrivateWindowClassifier.vote_weights
            alike = property(lambda self: [1.0 / len(self._models)] * len(self._models))
            roots_prior = estimation_module.node_distributions

            def roots_shrunk(*a, roots_are_prior=False, **kw):
                return roots_prior(*a, **kw)  # a learner's root shrunk toward the prior (the rule before)

            for label, kw, weights, nodes in (
                (
                    "before: no phase, first 100, votes alike",
                    {"prior_records": 0, "first_window": 100},
                    alike,
                    roots_shrunk,
                ),
                ("+ prior phase 100", {"first_window": 100}, alike, roots_shrunk),
                ("+ votes by window size", {"first_window": 100}, weighted, roots_shrunk),
                ("+ first window 200", {}, weighted, roots_shrunk),
                ("+ roots are the pooled prior (now)", {}, weighted, roots_prior),
            ):
                PrivateWindowClassifier.vote_weights = weights
                estimation_module.node_distributions = nodes
                measure(label, lambda kw=kw: PrivateWindowClassifier(schema, epsilon=1.0, **kw))
            PrivateWindowClassifier.vote_weights = weighted
            estimation_module.node_distributions = roots_prior
            continue
        if args.compare == "stump":
            variants = [("prior_trees=0", {"prior_trees": 0}, accumulated), ("prior_trees=1", {}, accumulated)]
        elif args.compare == "guard":
            variants = [("guard=0 (default)", {"guard": 0}, accumulated), ("guard=0.1", {"guard": 0.1}, accumulated)]
        else:
            variants = [("one-release variance", {}, one_release), ("accumulated variance", {}, accumulated)]
        for label, kw, prop in variants:
            forest_module.PrivateForest.noise_variance = prop
            measure(label, lambda kw=kw: PrivateForestClassifier(schema, epsilon=1.0, **kw))
        forest_module.PrivateForest.noise_variance = accumulated
    print(f"# load {os.getloadavg()[0]:.1f} at end", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
