"""The streaming paths on small data beside the one-shot fit and the noise-equivalent fit of their release count.

r disjoint releases, each at the whole epsilon (parallel composition), sum to r times one release's noise
variance on every count: the same noise as ONE release at ``epsilon / sqrt(r)``. So the one-shot fit at
``epsilon / sqrt(r)`` (``fit/sqrt10``: ``update`` and ``grow`` in 10 chunks; ``fit/sqrt3``: the river
classifier's 2-4 tree releases of 350-1,600 training records, after its 100-record prior phase) is what a stream of r releases can expect at
best from the noise alone, whatever its structure (the fit prunes for its own noise).

Models, at their defaults, on the same splits (the datasets, loaders and splits of
``accuracy_small_data.py``):

* ``fit``: ``PrivateForest.create(schema, epsilon=e).fit_encoded(train)``;
* ``fit/sqrt10``, ``fit/sqrt3``: the same at ``e / sqrt(10)`` and ``e / sqrt(3)``;
* ``merge``: fit on the first tenth, then 9 disjoint chunks merged into its pruned trees as they are
  (``merge(noisy_delta_encoded)``: ``update`` before it grew cut trees);
* ``update``: fit on the first tenth, then 9 ``update_encoded`` (a grown release on cut trees);
* ``grow``: ``grow_encoded`` in 10 chunks;
* ``river``: ``PrivateForestClassifier(schema, epsilon=e)``, ``learn_encoded`` then ``flush``;
  ``river grow``: the same with ``grow=True`` (numeric schemas do not grow by default);
* ``majority``: the training folds' most frequent class (not private: the floor).

    python benchmarks/studies/stream_paths_small.py [--repeats 2 --folds 5] [--variants [RULE ...]]

Writes ``results/stream_paths_small.{json,md}``; with ``--variants``, the river column alone under the rules of
``river_floor_rules.py`` (all when none is named), one release read by every rule, in
``results/stream_paths_small_rules.{json,md}`` (decision 029).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

EPSILONS = (0.1, 0.5, 1.0, 2.0)
MODELS = ("fit", "fit/sqrt10", "fit/sqrt3", "merge", "update", "grow", "river", "river grow", "majority")
STREAMING = ("merge", "update", "grow", "river", "river grow")


def scores(schema, X, y, train, test, eps: float) -> dict:
    """Test accuracy of every model of the module docstring on one split."""
    from streamdp import PrivateForest
    from streamdp.river import PrivateForestClassifier

    Xtr, ytr, Xte, yte = X[train], y[train], X[test], y[test]
    chunks = np.array_split(np.arange(len(ytr)), 10)

    def acc(f) -> float:
        leaves = f.structure.apply(Xte, f.schema.is_categorical)
        return float((f.proba_from_leaves(leaves).argmax(axis=1) == yte).mean())

    out = {}
    for name, e in (("fit", eps), ("fit/sqrt10", eps / math.sqrt(10)), ("fit/sqrt3", eps / math.sqrt(3))):
        out[name] = acc(PrivateForest.create(schema, epsilon=e).fit_encoded(Xtr, ytr))
    for name in ("merge", "update"):
        f = PrivateForest.create(schema, epsilon=eps).fit_encoded(Xtr[chunks[0]], ytr[chunks[0]])
        for c in chunks[1:]:
            if name == "merge":
                f.merge(f.noisy_delta_encoded(Xtr[c], ytr[c]))
            else:
                f.update_encoded(Xtr[c], ytr[c])
        out[name] = acc(f)
    f = PrivateForest.create(schema, epsilon=eps)
    for c in chunks:
        f.grow_encoded(Xtr[c], ytr[c])
    out["grow"] = acc(f)
    for name, kw in (("river", {}), ("river grow", {"grow": True})):
        model = PrivateForestClassifier(schema, epsilon=eps, **kw)
        model.learn_encoded(Xtr, ytr)
        model.flush()
        out[name] = float((model.predict_proba_encoded(Xte).argmax(axis=1) == yte).mean())
    out["majority"] = float((yte == np.bincount(ytr, minlength=schema.n_classes).argmax()).mean())
    return out


def river_variants(schema, X, y, train, test, eps: float, variants) -> dict:
    """``--variants``: the river classifier's test accuracy under each rule of :mod:`river_floor_rules` (one
    release, read by every rule), and the majority share."""
    from river_floor_rules import predictions

    from streamdp.river import PrivateForestClassifier

    model = PrivateForestClassifier(schema, epsilon=eps)
    model.learn_encoded(X[train], y[train])
    model.flush()
    out = {v: float((p == y[test]).mean()) for v, p in predictions(model, X[test], variants).items()}
    counts = np.bincount(y[train], minlength=schema.n_classes)
    out["majority"] = float((y[test] == counts.argmax()).mean())
    out["prior_names_majority"] = float(int(np.argmax(model.forest.prior())) == int(counts.argmax()))
    out["prior_z"] = prior_z(model, counts)
    return out


def prior_z(model, counts: np.ndarray) -> float:
    """The released prior's separation of the training set's top two classes: their exact margin over the noise
    sd of a difference of two of its pooled class totals (the analysis reads the exact counts; the model never
    does). Below about 3 no rule reading the released numbers names the majority reliably."""
    log = model.__dict__.get("_prior_log") or []
    if not log:
        return 0.0
    top = np.sort(counts)[::-1]
    sizes = np.array([size for _, size, _ in log])
    var = np.array([v for _, _, v in log])
    # release_prior's weights, noise-dominated: shares measured with variance v_j / n_j^2 each
    share_var = 1.0 / np.sum(1.0 / (var / sizes**2))
    return float((top[0] - top[1]) / counts.sum() / np.sqrt(2.0 * share_var))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--datasets", nargs="*", default=None)
    ap.add_argument(
        "--variants", nargs="*", default=None, help="the river column under river_floor_rules' variants, paired"
    )
    args = ap.parse_args()
    here = Path(__file__).resolve()
    sys.path.insert(0, str(here.parents[1]))
    sys.path.insert(0, str(here.parent))
    from accuracy_small_data import DATASETS, load_encoded
    from common import cv_splits, run_info, sh, write_results
    from river_floor_rules import VARIANTS

    variants = None if args.variants is None else tuple(args.variants) or VARIANTS

    warnings.simplefilter("ignore")  # the fits' notices are not results
    info = run_info(repeats=args.repeats, folds=args.folds, epsilons=list(EPSILONS), data={})
    rows = []
    for name in args.datasets or DATASETS:
        rng = np.random.default_rng(sum(map(ord, name)))  # the seed and splits of accuracy_small_data
        schema, X, y = load_encoded(name, rng)
        t0 = time.time()
        for split, train, test in cv_splits(len(y), args.repeats, args.folds, rng):
            for eps in EPSILONS:
                acc = (
                    scores(schema, X, y, train, test, eps)
                    if variants is None
                    else river_variants(schema, X, y, train, test, eps, variants)
                )
                rows.append({"dataset": name, "split": split, "epsilon": eps, "acc": acc})
        info["data"][name] = {"rows": int(len(y)), "attributes": schema.n_attributes, "classes": schema.n_classes}
        print(f"{name}: {time.time() - t0:.0f} s", flush=True)
    info["uptime_end"] = sh("uptime")
    if variants is not None:
        info["variants"] = list(variants)
        write_results("stream_paths_small_rules", info, rows, report(info, rows, (*variants, "majority")))
        return
    write_results("stream_paths_small", info, rows, report(info, rows))


def report(info: dict, rows: list[dict], models: tuple = MODELS) -> list[str]:
    from common import study_header

    MODELS = models  # noqa: N806 (the variants' columns under --variants)
    ref = "fit" if "fit" in models else "base"

    n = info["repeats"] * info["folds"]
    cmd = f"stream_paths_small.py --repeats {info['repeats']} --folds {info['folds']}"
    title, text = (
        "The streaming paths on small data, beside the fit at the noise of their release count",
        f"Mean test accuracy over {n} splits (the same for every model). `fit/sqrtR`: the one-shot fit at "
        "epsilon / sqrt(R), the noise of R full-budget releases in one. `merge`: fit on a tenth plus 9 deltas "
        "merged into its pruned trees; `update`: the same with `update` (a grown release on cut trees).",
    )
    extra = ()
    if ref == "base":
        cmd += f" --variants {' '.join(info['variants'])}"
        title = "The river classifier's floor: post-processing rules on the same releases"
        text = (
            f"Mean test accuracy over {n} splits of the river column (`PrivateForestClassifier(schema, epsilon=e)`, "
            "`learn_encoded` then `flush`), one release per split read by every rule of "
            "`benchmarks/studies/river_floor_rules.py`. `names`: the share of splits whose released prior names the "
            "training set's majority class; `z`: the median separation of the top two classes by the released "
            "prior's noise (exact shares over the noise sd: the analysis reads them, the model never does)."
        )
        extra = ("names", "z")
    lines = [
        *study_header(title, cmd, info),
        text,
        "",
        f"| dataset | epsilon | {' | '.join((*MODELS, *extra))} |",
        "|---|---|" + "---|" * (len(MODELS) + len(extra)),
    ]
    cells = []
    for name in info["data"]:
        for eps in EPSILONS:
            rs = [r["acc"] for r in rows if r["dataset"] == name and r["epsilon"] == eps]
            mean = {m: float(np.mean([r[m] for r in rs])) for m in MODELS}
            cells.append(mean)
            more = (
                [
                    f"{np.mean([r['prior_names_majority'] for r in rs]):.2f}",
                    f"{np.median([r['prior_z'] for r in rs]):.1f}",
                ]
                if extra
                else []
            )
            lines.append(f"| {name} | {eps:g} | {' | '.join([*(f'{mean[m]:.3f}' for m in MODELS), *more])} |")
    lines += [
        "",
        "## Over every dataset and epsilon",
        "",
        f"| model | mean accuracy | mean minus {ref} | cells within 0.02 of {ref} | cells below majority - 0.01 |",
        "|---|---|---|---|---|",
    ]
    for m in MODELS:
        gap = [c[m] - c[ref] for c in cells]
        below = sum(c[m] < c["majority"] - 0.01 for c in cells)
        within = sum(g >= -0.02 for g in gap)
        lines.append(
            f"| {m} | {np.mean([c[m] for c in cells]):.3f} | {np.mean(gap):+.3f} | {within} of {len(cells)} "
            f"| {below} of {len(cells)} |"
        )
    return [*lines, ""]


if __name__ == "__main__":
    main()
