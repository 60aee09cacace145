"""Numeric thresholds where the data is: a share of epsilon on noisy histograms against uniform draws.

The one-shot fit ``PrivateForest.create(schema, epsilon=e, threshold_share=s).fit(train)`` at every other
default, for ``s`` in ``SHARES`` (0: thresholds uniform over the declared range), side by side on the same
splits, with IBM diffprivlib 0.6.6's ``RandomForestClassifier`` beside it (its own venv, ``--dpl-python``;
the ``[dpl]`` extra) and the majority class (the floor).

Datasets (none used to build the mechanism):

* ``conc-*``: synthetic numeric data declared over [0, 100] per attribute (a documented range), the records
  of each attribute in a random stretch of it (``narrow``: 3-20% of the range, ``wide``: 20-60%), skewed
  (Beta(2, 5)); the label a noisy rule on 3 attributes; 500-2,000 rows, 10-30 attributes, 2-3 classes,
  three seeds each;
* the synthetic sets and river's bundled numeric sets of ``accuracy_small_data`` (``synth-*``: ranges [0, 1]
  the data fills, the case where a histogram can only cost; ``river-bananas``, ``river-imagesegments``).

    python benchmarks/studies/numeric_thresholds.py [--folds 5] [--dpl-python /tmp/dplvenv/bin/python]

Writes ``results/numeric_thresholds.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

EPSILONS = (0.1, 0.5, 1.0, 2.0)
SHARES = (0.0, 0.05, 0.1, 0.2, 0.3)
#: (rows, attributes, classes) of the synthetic configurations, each at both spreads and three seeds.
CONFIGS = ((500, 10, 2), (1000, 20, 3), (2000, 30, 2), (600, 30, 2))
SPREADS = {"narrow": (3.0, 20.0), "wide": (20.0, 60.0)}
SEEDS = (1, 2, 3)
OTHERS = ("synth-linear", "synth-blobs", "synth-rules", "river-bananas", "river-imagesegments")


def concentrated(n: int, d: int, n_classes: int, spread: str, seed: int):
    """(schema, X codes, y codes): declared [0, 100], each attribute's records in a random stretch of it."""
    from streamdp.records.schema import Schema

    rng = np.random.default_rng(seed)
    w_lo, w_hi = SPREADS[spread]
    width = rng.uniform(w_lo, w_hi, d)
    start = rng.uniform(0, 100 - width)
    Z = rng.beta(2, 5, (n, d))
    X = start + width * Z
    score = Z[:, 0] + Z[:, 1] - Z[:, 2] + rng.normal(0, 0.1, n)
    y = np.searchsorted(np.quantile(score, np.linspace(0, 1, n_classes + 1)[1:-1]), score)
    flip = rng.random(n) < 0.1
    y = np.where(flip, rng.integers(0, n_classes, n), y)
    attributes = [{"name": f"x{i}", "type": "numeric", "min": 0, "max": 100} for i in range(d)]
    schema = Schema.from_dict({"attributes": attributes, "label": {"name": "y", "values": list(range(n_classes))}})
    enc = schema.encode(X, y)
    return schema, enc.X, enc.y


def load(name: str):
    if name.startswith("conc-"):
        _, spread, n, d, c, seed = name.split("-")
        return concentrated(int(n), int(d), int(c), spread, int(seed))
    from accuracy_small_data import load_encoded

    return load_encoded(name, np.random.default_rng(sum(map(ord, name))))


def names() -> list[str]:
    conc = [f"conc-{s}-{n}-{d}-{c}-{seed}" for s in SPREADS for n, d, c in CONFIGS for seed in SEEDS]
    return conc + list(OTHERS)


def scores(schema, X, y, train, test, eps: float, shares=SHARES) -> dict:
    from streamdp import PrivateForest

    out = {}
    for share in shares:
        f = PrivateForest.create(schema, epsilon=eps, threshold_share=share).fit_encoded(X[train], y[train])
        leaves = f.structure.apply(X[test], schema.is_categorical)
        out[f"{share:g}"] = float((f.proba_from_leaves(leaves).argmax(axis=1) == y[test]).mean())
    out["majority"] = float((y[test] == np.bincount(y[train], minlength=schema.n_classes).argmax()).mean())
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--shares", type=float, nargs="*", default=list(SHARES))
    ap.add_argument("--datasets", nargs="*", default=None)
    ap.add_argument("--dpl-python", default="/tmp/dplvenv/bin/python")
    ap.add_argument("--stem", default="numeric_thresholds")
    args = ap.parse_args()
    from accuracy_small_data import run_dpl
    from common import machine, sh, write_results

    warnings.simplefilter("ignore")  # the fits' notices are not results
    info = {"machine": machine(), "git": sh("git rev-parse --short HEAD"), "uptime_start": sh("uptime")}
    info.update(folds=args.folds, repeats=args.repeats, epsilons=list(EPSILONS), shares=list(args.shares))
    rows, dpl_jobs, tmp = [], [], tempfile.mkdtemp()
    t_all = time.time()
    for name in args.datasets or names():
        schema, X, y = load(name)
        rng = np.random.default_rng(sum(map(ord, name)) + 7)
        splits = []
        for _ in range(args.repeats):
            perm = rng.permutation(len(y))
            splits += [(np.setdiff1d(perm, test), np.sort(test)) for test in np.array_split(perm, args.folds)]
        lo = np.array([getattr(a, "min", 0.0) for a in schema.attributes], dtype=float)
        hi = np.array([getattr(a, "max", max(getattr(a, "arity", 2) - 1, 1)) for a in schema.attributes], dtype=float)
        npz = str(Path(tmp, f"{name}.npz"))
        np.savez(npz, X=X, y=y, lo=lo, hi=hi)
        dpl_jobs.append(
            {
                "dataset": name,
                "npz": npz,
                "n_classes": schema.n_classes,
                "train": [s[0].tolist() for s in splits],
                "test": [s[1].tolist() for s in splits],
            }
        )
        for split, (train, test) in enumerate(splits):
            for eps in EPSILONS:
                rows.append(
                    {
                        "dataset": name,
                        "split": split,
                        "epsilon": eps,
                        "acc": scores(schema, X, y, train, test, eps, args.shares),
                    }
                )
        info.setdefault("data", {})[name] = {
            "rows": int(len(y)),
            "attributes": schema.n_attributes,
            "classes": schema.n_classes,
        }
        print(f"{name}: {time.time() - t_all:.0f} s", flush=True)
    dpl = run_dpl(args.dpl_python, dpl_jobs) if Path(args.dpl_python).exists() else "no diffprivlib venv"
    if isinstance(dpl, str):
        info["dpl"], dpl = dpl, []
    info["uptime_end"] = sh("uptime")
    write_results(args.stem, info, rows + [{"dpl": True, **r} for r in dpl], report(info, rows, dpl))


def _group(name: str) -> str:
    if name.startswith("conc-"):
        return "-".join(name.split("-")[:2])
    return name


def report(info: dict, rows: list[dict], dpl: list[dict]) -> list[str]:
    shares = [f"{s:g}" for s in info["shares"]]
    cols = [*shares, "dpl", "majority"]
    lines = [
        "# Numeric thresholds where the data is",
        "",
        f"`python benchmarks/studies/numeric_thresholds.py --folds {info['folds']} --repeats {info.get('repeats', 1)} "
        f"--shares {' '.join(f'{s:g}' for s in info['shares'])}`; git {info['git']}; "
        f"{info['machine']['nproc']} x {info['machine']['cpu']}",
        f"load at start: {info['uptime_start']}",
        f"load at end: {info['uptime_end']}",
        "",
        f"Mean test accuracy over {info.get('repeats', 1)} x {info['folds']}-fold CV of the default one-shot fit with `threshold_share` "
        "0 (uniform thresholds) and above; `dpl`: diffprivlib's forest on the same splits and bounds. "
        "`conc-narrow` / `conc-wide`: the synthetic concentrated sets, averaged over configurations and seeds.",
        "",
    ]
    if info.get("dpl"):
        lines += [f"diffprivlib: {info['dpl']}", ""]
    groups = sorted({_group(r["dataset"]) for r in rows}, key=lambda g: (not g.startswith("conc"), g))
    cells = []
    for g in groups:
        sets = sorted({r["dataset"] for r in rows if _group(r["dataset"]) == g})
        lines += [
            f"## {g} ({len(sets)} sets)",
            "",
            f"| epsilon | {' | '.join(cols)} | best share |",
            "|---|" + "---|" * (len(cols) + 1),
        ]
        for eps in info["epsilons"]:
            rs = [r for r in rows if _group(r["dataset"]) == g and r["epsilon"] == eps]
            acc = {c: float(np.mean([r["acc"][c] for r in rs])) for c in (*shares, "majority")}
            d = [r["acc"] for r in dpl if _group(r["dataset"]) == g and r["epsilon"] == eps]
            if d:
                acc["dpl"] = float(np.mean(d))
            best = max(shares, key=lambda s: acc[s])
            lines.append(f"| {eps:g} | {' | '.join(f'{acc[c]:.3f}' if c in acc else '-' for c in cols)} | {best} |")
            cells.append(acc)
        lines.append("")
    lines += [
        "## Over every group and epsilon",
        "",
        "| share | mean accuracy | minus uniform | cells worse than uniform by > 0.01 |",
        "|---|---|---|---|",
    ]
    for s in shares:
        diff = [c[s] - c["0"] for c in cells]
        lines.append(
            f"| {s} | {np.mean([c[s] for c in cells]):.3f} | {np.mean(diff):+.3f} | {sum(x < -0.01 for x in diff)} of {len(cells)} |"
        )
    if any("dpl" in c for c in cells):
        lines.append(f"| dpl | {np.mean([c['dpl'] for c in cells if 'dpl' in c]):.3f} | | |")
    return [*lines, ""]


if __name__ == "__main__":
    main()
