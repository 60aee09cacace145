"""Accuracy of Private-RDT (Jagannathan et al.) and k-anon RDT (Waseda, Nojima & Wang Table 7).

Settings reproduced from Jagannathan et al., Section VI:

* Nursery (3 classes, as in its Table II: ``recommend`` and ``very_recom`` are
  merged into ``priority`` -- the paper does not say how it merged, this is our
  choice), Mushroom without the attribute with missing values (``stalk-root``),
  Congressional Votes with each missing vote replaced by that bill's majority vote.
* epsilon in {0.5, 0.75, 1, inf}; 10 trees (5 for Votes); height k/2 and a smaller one.
* 10 runs of stratified 10-fold cross-validation (Weka's default); we report the
  mean and the maximum run accuracy, as the paper's Figures 6-8 do.
* Update procedure (Section VI-B): each training fold is split into halves D1, D2;
  fit D1, then ``update`` with D2; compared with Private-RDT on D1 u D2 at the same epsilon.

Variants compared on the same folds and structures: mechanism geometric vs
laplace, budget split vs disjoint, vote proba vs majority (the vote is a
post-processing of the same released counts, so it is evaluated on the same
release).

Waseda, Nojima & Wang Table 7: mechanism="kanon", N_t = 10, N_t*epsilon = 2 (split budget,
epsilon per tree 0.2), beta in {0.01, 0.1, 0.4}, k in {5, 10, 20}, Nursery (3
classes) and Mushroom. beta = 0.4 needs epsilon >= -ln(0.6) = 0.511 per tree,
so the library refuses it at N_t*epsilon = 2 (the paper prints "-" for its
delta too); its accuracy does not depend on epsilon (sampling + threshold, no
noise), so it is measured with the smallest valid epsilon and marked.

diffprivlib's RandomForestClassifier runs in a separate venv (it needs
scikit-learn < 1.9) on the same folds: ``--dpl-python /tmp/dpl/bin/python``.

    python benchmarks/studies/accuracy_rdt.py                 # full (~5-10 min on 2 shared cores)
    python benchmarks/studies/accuracy_rdt.py --quick         # 1 run x 5 folds, smoke test
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from streamdp.forest.model import PrivateForest  # noqa: E402
from streamdp.forest.structure import ForestStructure  # noqa: E402
from streamdp.privacy.mechanisms import kanon_delta  # noqa: E402
from streamdp.records.datasets import load  # noqa: E402
from streamdp.records.schema import Schema  # noqa: E402

HERE = Path(__file__).resolve().parent
EPSILONS = [0.5, 0.75, 1.0, math.inf]
# dataset -> (n_trees, heights: k/2 (or the largest the size guard always accepts), a smaller one)
SETTINGS = {
    "nursery": (10, [4, 2]),
    "mushroom": (10, [6, 3]),
    "congressional-voting": (5, [8, 4]),
}
KANON = {"datasets": ["nursery", "mushroom"], "heights": [2, 3, 4, 5], "betas": [0.01, 0.1, 0.4], "ks": [5, 10, 20]}
# Waseda, Nojima & Wang, Table 7 (N_t = 10, N_t*eps = 2): (k, beta) -> (N_t*delta, ACC); k = 0 is RDT without pruning.
PAPER_T7 = {
    "nursery": {
        0: {b: (None, 0.971) for b in (0.01, 0.1, 0.4)},
        5: {0.01: ("5.52e-5", 0.942), 0.1: ("0.352", 0.958), 0.4: ("-", 0.972)},
        10: {0.01: ("1.08e-9", 0.774), 0.1: ("0.034", 0.969), 0.4: ("-", 0.971)},
        20: {0.01: ("7.00e-19", 0.383), 0.1: ("0", 0.965), 0.4: ("-", 0.963)},
    },
    "mushroom": {
        0: {b: (None, 0.945) for b in (0.01, 0.1, 0.4)},
        5: {0.01: ("5.52e-5", 0.900), 0.1: ("0.352", 0.942), 0.4: ("-", 0.914)},
        10: {0.01: ("1.08e-9", 0.833), 0.1: ("0.034", 0.930), 0.4: ("-", 0.933)},
        20: {0.01: ("7.00e-19", 0.631), 0.1: ("0", 0.913), 0.4: ("-", 0.932)},
    },
}


# --- data -------------------------------------------------------------------------------------------
def prepare(name: str) -> tuple[Schema, np.ndarray, np.ndarray]:
    """Jagannathan et al.'s preprocessing; returns the schema and the encoded X (codes), y."""
    ds = load(name)
    d = ds.schema.to_dict()
    X, y = ds.X.copy(), ds.y.copy()
    if name == "nursery":
        y = np.array(["priority" if v in ("recommend", "very_recom") else v for v in y], dtype=object)
        d["label"]["values"] = ["not_recom", "priority", "spec_prior"]
    elif name == "mushroom":
        j = [a["name"] for a in d["attributes"]].index("stalk-root")
        X = np.delete(X, j, axis=1)
        del d["attributes"][j]
    elif name == "congressional-voting":
        for j, a in enumerate(d["attributes"]):
            col = X[:, j]
            vals, cnt = np.unique(col[col != "?"], return_counts=True)
            col[col == "?"] = vals[cnt.argmax()]
            a["values"] = [v for v in a["values"] if v != "?"]
    schema = Schema.from_dict(d)
    enc = schema.encode(X, y)
    return schema, enc.X, enc.y


def stratified_folds(y: np.ndarray, n_folds: int, rng: np.random.Generator) -> np.ndarray:
    """Fold number of each record, classes spread evenly over the folds (like Weka's stratification)."""
    fold = np.empty(len(y), dtype=np.int64)
    offset = 0
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        fold[idx] = (np.arange(len(idx)) + offset) % n_folds
        offset += len(idx)
    return fold


# --- one fold -----------------------------------------------------------------------------------------
def accuracy(forest: PrivateForest, leaves_test: np.ndarray, y_test: np.ndarray) -> float:
    proba = forest.proba_from_leaves(leaves_test)  # the library's vote, on precomputed leaves
    return float((proba.argmax(axis=1) == y_test).mean())


def release(schema, structure, X, y, **kw) -> PrivateForest:
    f = PrivateForest(schema, structure, **kw)
    f.merge(f.noisy_delta_encoded(X, y))  # == fit on encoded records
    return f


def run_rdt_fold(schema, structure, Xtr, ytr, Xte, yte, rng) -> list[dict]:
    is_cat = schema.is_categorical
    lte = structure.apply(Xte, is_cat)
    half = rng.permutation(len(ytr))
    d1, d2 = half[: len(half) // 2], half[len(half) // 2 :]
    rows = []
    for eps in EPSILONS:
        for mech in ("geometric", "laplace"):
            if math.isinf(eps) and mech == "laplace":
                continue  # no noise: identical to geometric
            for budget in ("split", "disjoint"):
                f = release(schema, structure, Xtr, ytr, epsilon=eps, mechanism=mech, budget=budget)
                for vote in ("proba", "majority"):
                    f.vote = vote
                    rows.append(
                        dict(eps=eps, mech=mech, budget=budget, vote=vote, proc="fit", acc=accuracy(f, lte, yte))
                    )
            # update procedure: fit D1, update with D2 (same structure, same epsilon)
            f = release(schema, structure, Xtr[d1], ytr[d1], epsilon=eps, mechanism=mech)
            acc_d1 = accuracy(f, lte, yte)
            f.merge(f.noisy_delta_encoded(Xtr[d2], ytr[d2]))  # == update on encoded records
            rows.append(dict(eps=eps, mech=mech, budget="split", vote="proba", proc="D1 only", acc=acc_d1))
            rows.append(
                dict(eps=eps, mech=mech, budget="split", vote="proba", proc="update", acc=accuracy(f, lte, yte))
            )
    return rows


def run_kanon_fold(schema, structure, Xtr, ytr, Xte, yte) -> list[dict]:
    lte = structure.apply(Xte, schema.is_categorical)
    T = structure.n_trees
    rows = []
    f0 = release(schema, structure, Xtr, ytr, epsilon=math.inf)
    rows.append(dict(k=0, beta=None, acc=accuracy(f0, lte, yte)))
    for beta in KANON["betas"]:
        eps_tree = max(2.0 / T, -math.log1p(-beta) * (1 + 1e-9))
        for k in KANON["ks"]:
            f = release(schema, structure, Xtr, ytr, epsilon=eps_tree * T, mechanism="kanon", k=k, beta=beta)
            rows.append(dict(k=k, beta=beta, acc=accuracy(f, lte, yte), total_eps=eps_tree * T, total_delta=f.delta))
    return rows


# --- aggregation ----------------------------------------------------------------------------------------
def summarise(rows: list[dict], keys: list[str]) -> list[dict]:
    """Per setting: the accuracy of each run (mean over its folds), then mean, sd and max over runs."""
    groups: dict[tuple, dict[int, list[float]]] = {}
    for r in rows:
        g = tuple(r[k] for k in keys)
        groups.setdefault(g, {}).setdefault(r["run"], []).append(r["acc"])
    out = []
    for g, runs in groups.items():
        per_run = np.array([np.mean(v) for v in runs.values()])
        out.append(
            {
                **dict(zip(keys, g)),
                "mean": float(per_run.mean()),
                "sd": float(per_run.std(ddof=1)) if len(per_run) > 1 else 0.0,
                "max": float(per_run.max()),
                "runs": len(per_run),
                "folds": sum(len(v) for v in runs.values()),
            }
        )
    return out


def fmt_eps(e: float) -> str:
    return "inf" if math.isinf(e) else f"{e:g}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 run x 5 folds everywhere, no diffprivlib, write to /tmp")
    ap.add_argument("--runs", type=int, default=10, help="runs of stratified k-fold CV (paper: 10)")
    ap.add_argument(
        "--runs-large", type=int, default=2, help="runs for settings with > 200k leaf cells (mushroom height 6)"
    )
    ap.add_argument("--kanon-runs", type=int, default=3)
    ap.add_argument("--folds", type=int, default=10)
    ap.add_argument(
        "--dpl-python", default="/tmp/dpl/bin/python", help="python of a venv with diffprivlib ('' to skip)"
    )
    ap.add_argument("--dpl-runs", type=int, default=1)
    ap.add_argument("--datasets", default=",".join(SETTINGS))
    ap.add_argument("--skip-kanon", action="store_true")
    ap.add_argument("--out", default=str(HERE.parent / "results" / "accuracy_rdt"))
    args = ap.parse_args(argv)
    if args.quick:
        args.runs = args.runs_large = args.kanon_runs = args.dpl_runs = 1
        args.folds = 5
        args.out = "/tmp/accuracy_rdt_quick"
    t_start = time.time()
    info = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cpu": subprocess.run(
            "lscpu | grep 'Model name' | head -1", shell=True, capture_output=True, text=True
        ).stdout.strip(),
        "uptime_start": subprocess.run("uptime", shell=True, capture_output=True, text=True).stdout.strip(),
        "args": vars(args),
    }
    print(info["uptime_start"], flush=True)
    data = {
        name: prepare(name)
        for name in set(args.datasets.split(",")) | (set() if args.skip_kanon else set(KANON["datasets"]))
    }
    rdt_rows, kanon_rows, splits = [], [], {}
    timings = {}
    for name in args.datasets.split(","):
        schema, X, y = data[name]
        n_trees, heights = SETTINGS[name]
        for h in heights:
            t0 = time.time()
            probe = ForestStructure.draw(schema, n_trees, h, seed=0)
            large = probe.n_trees * probe.max_leaves * schema.n_classes > 200_000
            runs = args.runs_large if large else args.runs
            for run in range(runs):
                # folds depend on (dataset, run) only: the same folds for every height and for diffprivlib
                fold = stratified_folds(y, args.folds, np.random.default_rng([run, sum(map(ord, name))]))
                rng = np.random.default_rng([run, 1000 + h, sum(map(ord, name))])
                splits[(name, run)] = fold
                for k in range(args.folds):
                    tr, te = fold != k, fold == k
                    structure = ForestStructure.draw(schema, n_trees, h, seed=int(rng.integers(2**63)))
                    for r in run_rdt_fold(schema, structure, X[tr], y[tr], X[te], y[te], rng):
                        rdt_rows.append({**r, "dataset": name, "height": h, "n_trees": n_trees, "run": run, "fold": k})
            timings[f"{name} h={h}"] = time.time() - t0
            print(f"{name} h={h}: {runs} runs x {args.folds} folds in {timings[f'{name} h={h}']:.1f}s", flush=True)
    if not args.skip_kanon:
        for name in KANON["datasets"]:
            schema, X, y = data[name]
            for h in KANON["heights"]:
                t0 = time.time()
                for run in range(args.kanon_runs):
                    fold = stratified_folds(y, args.folds, np.random.default_rng([run, sum(map(ord, name))]))
                    rng = np.random.default_rng([run, 2000 + h, sum(map(ord, name))])
                    for k in range(args.folds):
                        tr, te = fold != k, fold == k
                        structure = ForestStructure.draw(schema, 10, h, seed=int(rng.integers(2**63)))
                        for r in run_kanon_fold(schema, structure, X[tr], y[tr], X[te], y[te]):
                            kanon_rows.append({**r, "dataset": name, "height": h, "run": run, "fold": k})
                timings[f"kanon {name} h={h}"] = time.time() - t0
                print(f"kanon {name} h={h}: {time.time() - t0:.1f}s", flush=True)

    # diffprivlib on the same folds, in its own venv
    dpl = None
    if args.dpl_python and Path(args.dpl_python).exists() and not args.quick:
        t0 = time.time()
        with tempfile.TemporaryDirectory() as tmp:
            jobs = []
            for name in args.datasets.split(","):
                schema, X, y = data[name]
                n_trees, heights = SETTINGS[name]
                np.savez(
                    Path(tmp) / f"{name}.npz",
                    X=X,
                    y=y,
                    arities=schema.arities,
                    n_classes=schema.n_classes,
                    folds=np.stack([splits[(name, r)] for r in range(min(args.dpl_runs, args.runs_large))]),
                )
                jobs.append(
                    {
                        "dataset": name,
                        "npz": str(Path(tmp) / f"{name}.npz"),
                        "n_trees": n_trees,
                        "heights": heights,
                        "epsilons": [e if math.isfinite(e) else "inf" for e in EPSILONS],
                    }
                )
            (Path(tmp) / "jobs.json").write_text(json.dumps(jobs))
            res = subprocess.run(
                [args.dpl_python, str(HERE / "dpl_rf.py"), str(Path(tmp) / "jobs.json"), str(Path(tmp) / "out.json")],
                capture_output=True,
                text=True,
            )
            if res.returncode == 0:
                dpl = json.loads((Path(tmp) / "out.json").read_text())
            else:
                dpl = {"error": res.stderr[-2000:]}
        timings["diffprivlib"] = time.time() - t0
        print(f"diffprivlib: {timings['diffprivlib']:.1f}s", flush=True)

    for r in rdt_rows:
        r["eps"] = fmt_eps(r["eps"])
    rdt = summarise(rdt_rows, ["dataset", "height", "n_trees", "eps", "mech", "budget", "vote", "proc"])
    kan = summarise(kanon_rows, ["dataset", "height", "k", "beta"]) if kanon_rows else []
    for s in kan:  # privacy parameters of each k-anon setting (not data-dependent)
        if s["k"]:
            eps_tree = max(0.2, -math.log1p(-s["beta"]) * (1 + 1e-9))
            s["total_eps"] = 10 * eps_tree
            s["total_delta"] = min(1.0, 10 * kanon_delta(s["k"], s["beta"], eps_tree))
    dpl_sum = None
    if dpl and "rows" in dpl:
        dpl_sum = summarise([{**r, "eps": fmt_eps(float(r["eps"]))} for r in dpl["rows"]], ["dataset", "height", "eps"])
    info["uptime_end"] = subprocess.run("uptime", shell=True, capture_output=True, text=True).stdout.strip()
    info["runtime_s"] = time.time() - t_start
    info["timings_s"] = timings
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "machine": info,
        "rdt": rdt,
        "kanon": kan,
        "diffprivlib": dpl_sum,
        "diffprivlib_info": {k: v for k, v in (dpl or {}).items() if k != "rows"},
    }
    out.with_suffix(".json").write_text(json.dumps(doc, indent=1))
    print(f"wrote {out.with_suffix('.json')} in {info['runtime_s']:.0f}s")
    subprocess.run([sys.executable, str(HERE / "report_accuracy.py"), str(out.with_suffix(".json"))], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
