"""Private learner selection (``auto``) against every fixed learner, on the small-data set and the UCI data.

Datasets: those of ``accuracy_small_data.py`` (synthetic numeric, river's Phishing, Bananas, ImageSegments,
UCI Congressional Voting, Tic-Tac-Toe, Nursery) plus the other shared UCI sets, Mushroom and Adult (each
subsampled to 2,000 rows, as that study does). Per dataset and epsilon (0.1 / 0.5 / 1 / 2), over
``--repeats`` x ``--folds``-fold CV (the same splits for every model):

* every fixed learner of the catalogue at its defaults, at the whole epsilon on the training folds
  (``private-rdt``, ``dpea``, ``hanisch-forest``, ``diffp-c45``, ``diffp-id3``, ``sulq-id3``), on every
  dataset: a learner that splits on categorical attributes only uses those it has (none: it predicts from
  the class counts), and HanischForest, which refuses a schema without one, is scored as the majority share;
* ``auto``: :class:`streamdp.learners.AutoPrivateClassifier` at its defaults, and the variants named by
  ``--variants`` (``sS``: selection share S; ``sS-all``: every fixed learner as a candidate; ``sS-dr``: DPEA and the forest; a
  tail ``-hH``: held-out share H).

    nice -n 10 python benchmarks/studies/learner_selection.py [--repeats 1 --folds 5]

Writes ``results/learner_selection.{json,md}``.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from accuracy_small_data import DATASETS, EPSILONS, load_encoded  # noqa: E402

ALL_DATASETS = (*DATASETS, "uci-mushroom", "uci-adult")
FIXED = ("private-rdt", "dpea", "hanisch-forest", "diffp-c45", "diffp-id3", "sulq-id3")


def _categorical_only() -> set[str]:
    """The catalogue's learners that split on categorical attributes only (never candidates on numeric data)."""
    from streamdp.learners.catalogue import algorithm

    return {a for a in FIXED if algorithm(a).categorical_only}


def _variant(name: str, schema) -> dict:
    """AutoPrivateClassifier parameters of a variant name (``auto``, ``auto-s0.3``, ``auto-s0.5-all``)."""
    if name == "auto":
        return {}
    m = re.fullmatch(r"auto-s([0-9.]+)(-all|-dr)?(?:-h([0-9.]+))?", name)
    if m is None:
        raise ValueError(f"unknown variant {name!r}")
    params: dict = {"selection_share": float(m.group(1))}
    if m.group(3):
        params["holdout_share"] = float(m.group(3))
    numeric = not bool(schema.is_categorical.all())
    if m.group(2) == "-all":
        params["candidates"] = [(a, {}) for a in FIXED if not (numeric and a in _categorical_only())]
    elif m.group(2) == "-dr":  # DPEA and the forest (the forest alone on numeric schemas)
        params["candidates"] = [("private-rdt", {})] + ([] if numeric else [("dpea", {})])
    return params


def scores(schema, X, y, train, test, eps: float, variants: list[str]) -> dict:
    from streamdp.learners.private_data import PrivateDataset
    from streamdp.learners.selection import AutoPrivateClassifier, fit_candidate, proba_encoded

    out, secs = {}, {}
    out["majority"] = float((y[test] == np.bincount(y[train], minlength=schema.n_classes).argmax()).mean())
    for name in FIXED:
        t = time.perf_counter()
        try:
            model = fit_candidate((name, {}), PrivateDataset(schema, X[train], y[train], epsilon=eps), eps)
        except ValueError:  # (HanischForest refuses a schema without categorical attributes)
            out[name], out[f"{name}:refused"] = out["majority"], True
            continue
        out[name] = float((proba_encoded(model, X[test]).argmax(axis=1) == y[test]).mean())
        secs[name] = time.perf_counter() - t
    for v in ["auto", *variants]:
        t = time.perf_counter()
        clf = AutoPrivateClassifier(schema, epsilon=eps, **_variant(v, schema))
        clf.fit(PrivateDataset(schema, X[train], y[train], epsilon=eps))
        assert clf.epsilon_spent_ == np.float64(eps) or abs(clf.epsilon_spent_ - eps) < 1e-9
        out[v] = float((clf.predict_proba_encoded(X[test]).argmax(axis=1) == y[test]).mean())
        out[f"{v}:winner"] = clf.winner_[0] + "".join(f" {k}={w}" for k, w in clf.winner_[1].items())
        secs[v] = time.perf_counter() - t
    return {"acc": out, "seconds": secs}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--datasets", nargs="*", default=list(ALL_DATASETS))
    ap.add_argument("--variants", nargs="*", default=[])
    ap.add_argument("--stem", default="learner_selection")
    args = ap.parse_args()
    from common import machine, sh, write_results

    warnings.simplefilter("ignore")  # the fits' notices are not results
    info = {"machine": machine(), "git": sh("git rev-parse --short HEAD"), "uptime_start": sh("uptime")}
    info.update(repeats=args.repeats, folds=args.folds, epsilons=list(EPSILONS), variants=args.variants)
    rows = []
    for name in args.datasets:
        rng = np.random.default_rng(sum(map(ord, name)))  # a fixed seed per dataset (that study's)
        schema, X, y = load_encoded(name, rng)
        t0 = time.time()
        for split in range(args.repeats):
            perm = rng.permutation(len(y))
            for k, test in enumerate(np.array_split(perm, args.folds)):
                train = np.setdiff1d(perm, test)
                for eps in EPSILONS:
                    r = scores(schema, X, y, train, np.sort(test), eps, args.variants)
                    rows.append({"dataset": name, "split": split * args.folds + k, "epsilon": eps, **r})
        print(f"{name}: {len(y)} rows x {schema.n_attributes}, {time.time() - t0:.0f} s", flush=True)
        info.setdefault("data", {})[name] = {
            "rows": int(len(y)),
            "attributes": schema.n_attributes,
            "numeric": int((~schema.is_categorical).sum()),
            "classes": schema.n_classes,
        }
    info["uptime_end"] = sh("uptime")
    write_results(args.stem, info, rows, report(info, rows))


def report(info: dict, rows: list[dict]) -> list[str]:
    autos = ["auto", *info["variants"]]
    models = [*FIXED, *autos, "majority"]
    lines = [
        "# Private learner selection against every fixed learner",
        "",
        f"`python benchmarks/studies/learner_selection.py --repeats {info['repeats']} --folds {info['folds']}"
        + (f" --variants {' '.join(info['variants'])}" if info["variants"] else "")
        + f"`; git {info['git']}; {info['machine']['nproc']} x {info['machine']['cpu']}",
        f"load at start: {info['uptime_start']}",
        f"load at end: {info['uptime_end']}",
        "",
        f"Mean test accuracy over {info['repeats']} x {info['folds']}-fold CV (the same splits for every model). "
        "Fixed learners at their defaults and the whole epsilon; `*`: the learner refused the schema and is "
        "scored as the majority share. `auto` winners: how often each candidate won.",
        "",
    ]
    cells = []
    for name, d in info["data"].items():
        lines += [
            f"## {name} ({d['rows']} rows, {d['attributes']} attributes of which {d['numeric']} numeric, "
            f"{d['classes']} classes)",
            "",
            "| epsilon | " + " | ".join(models) + " | auto winners |",
            "|---|" + "---|" * (len(models) + 1),
        ]
        for eps in info["epsilons"]:
            rs = [r for r in rows if r["dataset"] == name and r["epsilon"] == eps]
            mean = {m: float(np.mean([r["acc"][m] for r in rs])) for m in models}
            refused = {m for m in FIXED if rs[0]["acc"].get(f"{m}:refused")}
            wins: dict[str, int] = {}
            for r in rs:
                wins[r["acc"]["auto:winner"]] = wins.get(r["acc"]["auto:winner"], 0) + 1
            shown = ", ".join(f"{k} {v}" for k, v in sorted(wins.items(), key=lambda kv: -kv[1]))
            lines.append(
                f"| {eps:g} | "
                + " | ".join(f"{mean[m]:.3f}" + ("*" if m in refused else "") for m in models)
                + f" | {shown} |"
            )
            cells.append({**mean, "categorical": d["numeric"] == 0})
        lines.append("")
    for title, cs in (
        ("every dataset and epsilon", cells),
        ("the datasets of categorical attributes only (every learner uses every attribute)",
         [c for c in cells if c["categorical"]]),
    ):  # fmt: skip
        lines += [
            f"## Each fixed learner's mean against auto's: {title} ({len(cs)} cells)",
            "",
            "| learner | learner mean | " + " | ".join(f"{a} mean | {a} - learner" for a in autos) + " |",
            "|---|---|" + "---|---|" * len(autos),
        ]
        for m in FIXED:
            base = float(np.mean([c[m] for c in cs]))
            tail = " | ".join(
                f"{np.mean([c[a] for c in cs]):.3f} | {np.mean([c[a] for c in cs]) - base:+.3f}" for a in autos
            )
            lines.append(f"| {m} | {base:.3f} | {tail} |")
        lines.append("")
    below = {a: sum(c[a] < c["majority"] - 0.01 for c in cells) for a in autos}
    lines += ["Cells below the majority share - 0.01: " + ", ".join(f"{a} {n}" for a, n in below.items()), ""]
    return lines


if __name__ == "__main__":
    main()
