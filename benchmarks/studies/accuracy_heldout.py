"""Defaults on held-out data: sets no default was tuned on, the one-shot fit beside diffprivlib.

Datasets (none used to choose a default; docs/decisions/019-low-epsilon-defaults.md was tuned on
``accuracy_small_data`` alone):

* scikit-learn's bundled Wine (178 x 13 numeric, 3 classes), Breast Cancer (569 x 30 numeric, 2 classes) and
  Digits (1,797 x 64, 10 classes). Domains are declared from the documentation, never from the records: each
  attribute's published minimum and maximum (the ``Summary Statistics`` table of the dataset's description)
  rounded outward to the order of magnitude of its published range (Wine's proline 278-1680: [0, 2000]);
  Digits' pixels are counts of 0..16 by construction (its description), declared [0, 16].
* UCI Car Evaluation (1,728 x 6 categorical, 4 classes), when a copy is given (``--car PATH``, the UCI file
  ``car.data``, with or without a header row): values and classes as the UCI description lists them.

Per dataset and epsilon (0.1 / 0.5 / 1 / 2), over ``--repeats`` x ``--folds``-fold CV (the same splits for
every model):

* ``fit``: ``PrivateForest.create(schema, epsilon=e).fit(train)``, the default one-shot fit;
* ``fit T10``: the same with ``n_trees=10`` given, every drawn tree kept (the default before decision 019);
* ``dpl``: IBM diffprivlib 0.6.6 ``RandomForestClassifier(epsilon=e, bounds=declared, classes=declared)`` at
  its defaults, in its own venv (``--dpl-python``); categorical attributes as their codes;
* ``majority``: the training folds' most frequent class (not private: the floor a model must hold).

    python benchmarks/studies/accuracy_heldout.py [--repeats 2 --folds 5] [--car car.data]

Writes ``results/accuracy_heldout.{json,md}``.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy_small_data import EPSILONS, cv_splits, dpl_job, run_dpl  # noqa: E402

CAR_VALUES = {
    "buying": ["vhigh", "high", "med", "low"],
    "maint": ["vhigh", "high", "med", "low"],
    "doors": ["2", "3", "4", "5more"],
    "persons": ["2", "4", "more"],
    "lug_boot": ["small", "med", "big"],
    "safety": ["low", "med", "high"],
}
CAR_CLASSES = ["unacc", "acc", "good", "vgood"]


def published_ranges(descr: str, n: int) -> list[tuple[float, float]]:
    """The first ``n`` rows ``name: min max ...`` of a scikit-learn description's Summary Statistics table,
    rounded outward to the order of magnitude of each range."""
    table = descr[descr.index(":Summary Statistics:") :]
    rows = re.findall(r"^[^\n:=]+:\s+(-?[\d.]+)\s+(-?[\d.]+)", table, flags=re.M)[:n]
    if len(rows) != n:
        raise ValueError(f"found {len(rows)} published ranges, expected {n}")
    out = []
    for lo, hi in ((float(a), float(b)) for a, b in rows):
        step = 10.0 ** math.floor(math.log10(hi - lo))
        out.append((round(math.floor(lo / step) * step, 12), round(math.ceil(hi / step) * step, 12)))
    return out


def _numeric_schema(names: list[str], ranges: list[tuple[float, float]], n_classes: int):
    from streamdp.records.schema import Schema

    attributes = [{"name": f"x{i}", "type": "numeric", "min": lo, "max": hi} for i, (lo, hi) in enumerate(ranges)]
    return Schema.from_dict({"attributes": attributes, "label": {"name": "y", "values": list(range(n_classes))}})


def load_encoded(name: str, car: str | None):
    """(schema, X codes, y codes) of a held-out dataset, with its declared domains."""
    if name == "uci-car":
        from streamdp.records.schema import Schema

        rows = [r.split(",") for r in Path(str(car)).read_text().split() if r and not r.startswith("buying")]
        schema = Schema.from_dict(
            {
                "attributes": [{"name": k, "type": "categorical", "values": v} for k, v in CAR_VALUES.items()],
                "label": {"name": "class", "values": CAR_CLASSES},
            }
        )
        X = np.array([r[:6] for r in rows], dtype=object)
        y = np.array([r[6] for r in rows], dtype=object)
    else:
        from sklearn import datasets

        d = {"sk-wine": datasets.load_wine, "sk-breast-cancer": datasets.load_breast_cancer}.get(name)
        d = d() if d else datasets.load_digits()
        n_attr = d.data.shape[1]
        ranges = [(0.0, 16.0)] * n_attr if name == "sk-digits" else published_ranges(d.DESCR, n_attr)
        schema = _numeric_schema(list(d.feature_names), ranges, len(d.target_names))
        X, y = d.data.astype(float), d.target.astype(int)
    enc = schema.encode(X, y)
    return schema, enc.X, np.asarray(enc.y)


DATASETS = ("sk-wine", "sk-breast-cancer", "sk-digits", "uci-car")


def scores(schema, X, y, train, test, eps: float) -> dict:
    from streamdp import PrivateForest

    Xtr, ytr, Xte, yte = X[train], y[train], X[test], y[test]
    out, secs = {}, {}
    for col, kw in (("fit", {}), ("fit T10", {"n_trees": 10})):
        t = time.perf_counter()
        f = PrivateForest.create(schema, epsilon=eps, **kw).fit_encoded(Xtr, ytr)
        pred = f.proba_from_leaves(f.structure.apply(Xte, schema.is_categorical)).argmax(axis=1)
        out[col], secs[col] = float((pred == yte).mean()), time.perf_counter() - t
        if col == "fit":
            out["fit trees"] = float(f.n_trees)
    out["majority"] = float((yte == np.bincount(ytr, minlength=schema.n_classes).argmax()).mean())
    return {"acc": out, "seconds": secs}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--datasets", nargs="*", default=list(DATASETS))
    ap.add_argument("--car", default=None, help="UCI car.data (skipped when not given)")
    ap.add_argument("--dpl-python", default="/tmp/dplvenv/bin/python")
    ap.add_argument("--stem", default="accuracy_heldout")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from common import machine, sh, write_results

    warnings.simplefilter("ignore")
    info = {"machine": machine(), "git": sh("git rev-parse --short HEAD"), "uptime_start": sh("uptime")}
    info.update(repeats=args.repeats, folds=args.folds, epsilons=list(EPSILONS))
    names = [n for n in args.datasets if n != "uci-car" or args.car]
    rows, jobs, tmp = [], [], tempfile.mkdtemp()
    for name in names:
        rng = np.random.default_rng(sum(map(ord, name)))
        schema, X, y = load_encoded(name, args.car)
        splits = cv_splits(len(y), args.repeats, args.folds, rng)
        jobs.append(dpl_job(name, schema, X, y, splits, tmp))
        t0 = time.time()
        for split, (train, test) in enumerate(splits):
            for eps in EPSILONS:
                rows.append({"dataset": name, "split": split, "epsilon": eps, **scores(schema, X, y, train, test, eps)})
        print(f"{name}: {len(y)} rows x {schema.n_attributes}, {time.time() - t0:.0f} s", flush=True)
        info.setdefault("data", {})[name] = {
            "rows": int(len(y)),
            "attributes": schema.n_attributes,
            "numeric": int((~schema.is_categorical).sum()),
            "classes": schema.n_classes,
            "declared": [[float(a), float(b)] for a, b in zip(*(np.load(jobs[-1]["npz"])[k] for k in ("lo", "hi")))],
        }
    dpl = run_dpl(args.dpl_python, jobs) if Path(args.dpl_python).exists() else "no diffprivlib venv"
    if isinstance(dpl, str):
        info["dpl"], dpl = dpl, []
    info["uptime_end"] = sh("uptime")
    write_results(args.stem, info, rows + [{"dpl": True, **r} for r in dpl], report(info, rows, dpl))


def report(info: dict, rows: list[dict], dpl: list[dict]) -> list[str]:
    n = info["repeats"] * info["folds"]
    lines = [
        "# Defaults on held-out data",
        "",
        f"`python benchmarks/studies/accuracy_heldout.py --repeats {info['repeats']} --folds {info['folds']}`; "
        f"git {info['git']}; {info['machine']['nproc']} x {info['machine']['cpu']}",
        f"load at start: {info['uptime_start']}",
        f"load at end: {info['uptime_end']}",
        "",
        f"Mean test accuracy over {info['repeats']} x {info['folds']}-fold CV ({n} splits, the same for every "
        "model); in brackets the lowest split. `fit`: the default one-shot fit; `fit T10`: every one of 10 drawn "
        "trees kept (the default before decision 019); `trees`: the mean count the default fit kept; "
        "`fit - dpl`: the default fit minus diffprivlib's forest.",
        "",
    ]
    if info.get("dpl"):
        lines += [f"diffprivlib: {info['dpl']}", ""]
    cells = []
    for name, d in info["data"].items():
        lines += [
            f"## {name} ({d['rows']} rows, {d['attributes']} attributes of which {d['numeric']} numeric, "
            f"{d['classes']} classes)",
            "",
            "| epsilon | fit | fit T10 | dpl | majority | fit - dpl | trees | s fit / fit T10 |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for eps in EPSILONS:
            rs = [r for r in rows if r["dataset"] == name and r["epsilon"] == eps]
            acc = {m: np.array([r["acc"][m] for r in rs]) for m in ("fit", "fit T10", "majority", "fit trees")}
            d_acc = np.array([r["acc"] for r in dpl if r["dataset"] == name and r["epsilon"] == eps])
            if d_acc.size:
                acc["dpl"] = d_acc

            def cell(m: str) -> str:
                return f"{acc[m].mean():.3f} ({acc[m].min():.3f})" if m in acc else "-"

            gap = f"{acc['fit'].mean() - acc['dpl'].mean():+.3f}" if "dpl" in acc else "-"
            secs = " / ".join(f"{np.mean([r['seconds'][m] for r in rs]):.2f}" for m in ("fit", "fit T10"))
            lines.append(
                f"| {eps:g} | {' | '.join(cell(m) for m in ('fit', 'fit T10', 'dpl', 'majority'))} | {gap} "
                f"| {acc['fit trees'].mean():.1f} | {secs} |"
            )
            cells.append({m: float(a.mean()) for m, a in acc.items()})
        lines.append("")
    lines += [
        "## Over every dataset and epsilon",
        "",
        "| model | mean accuracy | mean minus dpl | cells below dpl - 0.01 | cells below majority - 0.01 |",
        "|---|---|---|---|---|",
    ]
    for m in ("fit", "fit T10", "dpl", "majority"):
        vals = [c for c in cells if m in c]
        if not vals:
            continue
        mean = np.mean([c[m] for c in vals])
        with_dpl = [c for c in vals if "dpl" in c]
        rel = f"{np.mean([c[m] - c['dpl'] for c in with_dpl]):+.3f}" if with_dpl else "-"
        below_dpl = f"{sum(c[m] < c['dpl'] - 0.01 for c in with_dpl)} of {len(with_dpl)}" if with_dpl else "-"
        below = sum(c[m] < c["majority"] - 0.01 for c in vals)
        lines.append(f"| {m} | {mean:.3f} | {rel} | {below_dpl} | {below} of {len(vals)} |")
    return [*lines, ""]


if __name__ == "__main__":
    main()
