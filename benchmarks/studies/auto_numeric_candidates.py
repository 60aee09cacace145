"""Which candidates ``auto`` should offer on schemas with numeric attributes: DPEA (splits on categorical
attributes only) and DiffPC4.5 (splits on numeric ones too), against Private-RDT alone.

Datasets: UCI Adult (2,000-row subsample, 6 of 14 attributes numeric), river's Bananas (numeric), and
``accuracy_small_data.py``'s synth-linear and synth-rules with 3 uninformative categorical attributes appended
(``+cat``: most attributes numeric, the signal in numeric ones only; DPEA sees the 3 noise columns). Per
dataset and epsilon (0.5 / 1 / 2), ``--repeats`` x ``--folds``-fold CV, the same splits for every model:
the fixed learners at the whole epsilon, and ``AutoPrivateClassifier`` at its defaults with the candidate
lists named ``rdt``, ``rdt+dpea``, ``rdt+c45``, ``rdt+dpea+c45``.

    nice -n 10 python benchmarks/studies/auto_numeric_candidates.py [--repeats 1 --folds 5]

Writes ``results/auto_numeric_candidates.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from accuracy_small_data import load_encoded  # noqa: E402

DATASETS = ("uci-adult", "synth-linear+cat", "synth-rules+cat", "river-bananas")
EPSILONS = (0.5, 1.0, 2.0)
FIXED = ("private-rdt", "dpea", "diffp-c45")
LISTS = {
    "rdt": ["private-rdt"],
    "rdt+dpea": ["private-rdt", "dpea"],
    "rdt+c45": ["private-rdt", "diffp-c45"],
    "rdt+dpea+c45": ["private-rdt", "dpea", "diffp-c45"],
}


def load(name: str, rng: np.random.Generator):
    """(schema, X codes, y codes); ``+cat``: three uniform categorical attributes of arity 3 appended."""
    base = name.removesuffix("+cat")
    schema, X, y = load_encoded(base, rng)
    if base == name:
        return schema, X, y
    from streamdp.records.schema import Schema

    d = schema.to_dict()
    d["attributes"] = [
        *d["attributes"],
        *({"name": f"c{i}", "type": "categorical", "values": ["a", "b", "c"]} for i in range(3)),
    ]
    extra = rng.integers(0, 3, (len(y), 3)).astype(X.dtype)
    return Schema.from_dict(d), np.hstack([X, extra]), y


def scores(schema, X, y, train, test, eps: float) -> dict:
    from streamdp.learners.private_data import PrivateDataset
    from streamdp.learners.selection import AutoPrivateClassifier, fit_candidate, proba_encoded

    out: dict = {"majority": float((y[test] == np.bincount(y[train], minlength=schema.n_classes).argmax()).mean())}
    for name in FIXED:
        try:
            model = fit_candidate((name, {}), PrivateDataset(schema, X[train], y[train], epsilon=eps), eps)
        except ValueError:  # (a categorical-only learner refuses a schema without categorical attributes)
            out[name], out[f"{name}:refused"] = out["majority"], True
            continue
        out[name] = float((proba_encoded(model, X[test]).argmax(axis=1) == y[test]).mean())
    for label, names in LISTS.items():
        cands = [(n, {}) for n in names]
        clf = AutoPrivateClassifier(schema, epsilon=eps, candidates=cands)
        clf.fit(PrivateDataset(schema, X[train], y[train], epsilon=eps))
        out[label] = float((clf.predict_proba_encoded(X[test]).argmax(axis=1) == y[test]).mean())
        out[f"{label}:winner"] = clf.winner_[0]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--datasets", nargs="*", default=list(DATASETS))
    args = ap.parse_args()
    from common import machine, sh, write_results

    warnings.simplefilter("ignore")  # the fits' notices are not results
    info = {"machine": machine(), "git": sh("git rev-parse --short HEAD"), "uptime_start": sh("uptime")}
    info.update(repeats=args.repeats, folds=args.folds, epsilons=list(EPSILONS), data={})
    rows = []
    for name in args.datasets:
        rng = np.random.default_rng(sum(map(ord, name)))
        schema, X, y = load(name, rng)
        t0 = time.time()
        for split in range(args.repeats):
            perm = rng.permutation(len(y))
            for k, test in enumerate(np.array_split(perm, args.folds)):
                train = np.setdiff1d(perm, test)
                for eps in EPSILONS:
                    acc = scores(schema, X, y, train, np.sort(test), eps)
                    rows.append({"dataset": name, "split": split * args.folds + k, "epsilon": eps, "acc": acc})
        print(f"{name}: {len(y)} rows, {time.time() - t0:.0f} s", flush=True)
        info["data"][name] = {
            "rows": int(len(y)),
            "attributes": schema.n_attributes,
            "numeric": int((~schema.is_categorical).sum()),
        }
    info["uptime_end"] = sh("uptime")
    write_results("auto_numeric_candidates", info, rows, report(info, rows))


def report(info: dict, rows: list[dict]) -> list[str]:
    models = [*FIXED, *LISTS, "majority"]
    lines = [
        "# auto's candidates on schemas with numeric attributes",
        "",
        f"`nice -n 10 python benchmarks/studies/auto_numeric_candidates.py --repeats {info['repeats']} "
        f"--folds {info['folds']}`; git {info['git']}; {info['machine']['nproc']} x {info['machine']['cpu']}",
        f"load at start: {info['uptime_start']}",
        f"load at end: {info['uptime_end']}",
        "",
        "Mean test accuracy (the same splits for every model); auto columns name their candidate lists, "
        "winners counted per list.",
        "",
    ]
    for name, d in info["data"].items():
        lines += [
            f"## {name} ({d['rows']} rows, {d['attributes']} attributes of which {d['numeric']} numeric)",
            "",
            "| epsilon | " + " | ".join(models) + " | winners (rdt+dpea / rdt+c45) |",
            "|---|" + "---|" * (len(models) + 1),
        ]
        for eps in info["epsilons"]:
            rs = [r["acc"] for r in rows if r["dataset"] == name and r["epsilon"] == eps]
            means = " | ".join(f"{np.mean([r[m] for r in rs]):.3f}" for m in models)
            wins = " / ".join(
                ", ".join(
                    f"{w} {sum(r[f'{lst}:winner'] == w for r in rs)}" for w in sorted({r[f"{lst}:winner"] for r in rs})
                )
                for lst in ("rdt+dpea", "rdt+c45")
            )
            lines.append(f"| {eps:g} | {means} | {wins} |")
        lines.append("")
    return lines


if __name__ == "__main__":
    main()
