"""Defaults on small data nobody tuned for: the one-shot fit, the streaming paths and diffprivlib, side by side.

Datasets (none used to choose a default): synthetic numeric data (500-2,000 rows, 10-30 attributes, ranges
declared as [0, 1] by construction, never read from the data), river's bundled Phishing, Bananas and
ImageSegments (their declared schemas, ``streamdp.river.schemas``; the larger two subsampled to 2,000 rows),
and the bundled UCI Congressional Voting, Tic-Tac-Toe and a random 2,000-row Nursery subsample.

Per dataset and epsilon (0.1 / 0.5 / 1 / 2), over ``--repeats`` x ``--folds``-fold CV (the same splits for
every model), at every model's defaults:

* ``fit``: ``PrivateForest.create(schema, epsilon=e).fit(train)``, the one-shot fit;
* ``update``: the same forest fitted on the first tenth of the training records, then 9 ``update``s;
* ``grow``: ``grow`` in 10 chunks;
* ``river``: ``PrivateForestClassifier(schema, epsilon=e)`` fed the training records (``learn_encoded``, then
  ``flush``), scored on the test fold;
* ``dpl``: IBM diffprivlib 0.6.6 ``RandomForestClassifier(epsilon=e, bounds=declared, classes=declared)`` at
  its defaults (10 trees, depth 5), in its own venv (``--dpl-python``; the ``[dpl]`` extra); categorical
  attributes as their codes with bounds (0, arity - 1);
* ``majority``: the training folds' most frequent class (not private: the floor a model must hold).

    python benchmarks/studies/accuracy_small_data.py [--repeats 2 --folds 5] [--dpl-python /tmp/dplvenv/bin/python]

Writes ``results/accuracy_small_data.{json,md}``. The venv runs this same file with ``--dpl-worker``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

EPSILONS = (0.1, 0.5, 1.0, 2.0)
METHODS = ("fit", "update", "grow", "river", "dpl", "majority")


# -- data ---------------------------------------------------------------------------------------------------
def _numeric_schema(d: int, n_classes: int):
    from streamdp.records.schema import Schema

    attributes = [{"name": f"x{i}", "type": "numeric", "min": 0.0, "max": 1.0} for i in range(d)]
    return Schema.from_dict({"attributes": attributes, "label": {"name": "y", "values": list(range(n_classes))}})


def synthetic(name: str):
    """(schema, X raw, y raw): fixed seeds; the ranges are [0, 1] by construction."""
    rng = np.random.default_rng({"synth-linear": 11, "synth-blobs": 12, "synth-rules": 13}[name])
    if name == "synth-linear":  # 1,000 x 20, two classes: a noisy linear rule on 3 attributes
        X = rng.uniform(0, 1, (1000, 20))
        y = (X[:, 0] + X[:, 1] + X[:, 2] - 1.5 + rng.normal(0, 0.25, 1000) > 0).astype(int)
        return _numeric_schema(20, 2), X, y
    if name == "synth-blobs":  # 500 x 10, three classes: Gaussian blobs, clipped into the declared range
        centers = rng.uniform(0.25, 0.75, (3, 10))
        y = rng.integers(0, 3, 500)
        X = np.clip(centers[y] + rng.normal(0, 0.2, (500, 10)), 0, 1)
        return _numeric_schema(10, 3), X, y
    # synth-rules: 2,000 x 30, two classes: an axis-aligned rule on 3 attributes, 10% of labels flipped
    X = rng.uniform(0, 1, (2000, 30))
    y = np.where(X[:, 1] > 0.3, X[:, 0] > 0.5, X[:, 2] > 0.7).astype(int)
    flip = rng.random(2000) < 0.1
    return _numeric_schema(30, 2), X, np.where(flip, 1 - y, y)


def load_encoded(name: str, rng: np.random.Generator):
    """(schema, X codes, y codes) of a dataset, in the schema's encoding."""
    if name.startswith("synth-"):
        schema, X, y = synthetic(name)
        enc = schema.encode(X, y)
        return schema, enc.X, enc.y
    if name.startswith("river-"):
        from river import datasets

        from streamdp.river.encoding import RecordEncoder
        from streamdp.river.schemas import schema_for

        ds = {"river-phishing": datasets.Phishing, "river-bananas": datasets.Bananas}.get(name)
        ds = ds() if ds else datasets.ImageSegments()
        schema = schema_for(ds)
        rows = list(ds)
        if len(rows) > 2000:
            rows = [rows[i] for i in np.sort(rng.choice(len(rows), 2000, replace=False))]
        encoder = RecordEncoder(schema)
        X, unknown = encoder.encode_many([x for x, _ in rows])
        y = encoder.encode_labels([label for _, label in rows])
        return schema, X[~unknown], np.asarray(y)[~unknown]
    from streamdp.records.datasets import load

    ds = load(name.removeprefix("uci-"))
    enc = ds.schema.encode(ds.X, ds.y)
    X, y = enc.X, enc.y
    if len(y) > 2000:  # Nursery: a random subsample (the file is sorted by attribute values)
        keep = np.sort(rng.choice(len(y), 2000, replace=False))
        X, y = X[keep], y[keep]
    return ds.schema, X, y


DATASETS = (
    "synth-linear",
    "synth-blobs",
    "synth-rules",
    "river-phishing",
    "river-bananas",
    "river-imagesegments",
    "uci-congressional-voting",
    "uci-tic-tac-toe",
    "uci-nursery",
)


# -- the streamdp models ------------------------------------------------------------------------------------
def _predict(forest, X: np.ndarray) -> np.ndarray:
    leaves = forest.structure.apply(X, forest.schema.is_categorical)
    return forest.proba_from_leaves(leaves).argmax(axis=1)


def streamdp_scores(schema, X, y, train, test, eps: float, fit_only: bool = False) -> dict:
    from streamdp import PrivateForest
    from streamdp.river import PrivateForestClassifier

    Xtr, ytr, Xte, yte = X[train], y[train], X[test], y[test]
    out, times = {}, {}
    chunks = np.array_split(np.arange(len(ytr)), 10)
    t = time.perf_counter()
    f = PrivateForest.create(schema, epsilon=eps).fit_encoded(Xtr, ytr)
    out["fit"], times["fit"] = float((_predict(f, Xte) == yte).mean()), time.perf_counter() - t
    out["majority"] = float((yte == np.bincount(ytr, minlength=schema.n_classes).argmax()).mean())
    if fit_only:
        return {"acc": out, "seconds": times}
    t = time.perf_counter()
    f = PrivateForest.create(schema, epsilon=eps).fit_encoded(Xtr[chunks[0]], ytr[chunks[0]])
    for c in chunks[1:]:
        f.update_encoded(Xtr[c], ytr[c])
    out["update"], times["update"] = float((_predict(f, Xte) == yte).mean()), time.perf_counter() - t
    t = time.perf_counter()
    f = PrivateForest.create(schema, epsilon=eps)
    for c in chunks:
        f.grow_encoded(Xtr[c], ytr[c])
    out["grow"], times["grow"] = float((_predict(f, Xte) == yte).mean()), time.perf_counter() - t
    t = time.perf_counter()
    model = PrivateForestClassifier(schema, epsilon=eps)
    model.learn_encoded(Xtr, ytr)
    model.flush()
    pred = model.predict_proba_encoded(Xte).argmax(axis=1)
    out["river"], times["river"] = float((pred == yte).mean()), time.perf_counter() - t
    out["river_one_class"] = float(len(np.unique(pred)) == 1 and np.bincount(ytr).argmax() != pred[0])
    return {"acc": out, "seconds": times}


# -- diffprivlib (run by its venv's python) -----------------------------------------------------------------
def dpl_worker(jobs_path: str, out_path: str) -> None:
    from diffprivlib.accountant import BudgetAccountant
    from diffprivlib.models import RandomForestClassifier
    from diffprivlib.utils import PrivacyLeakWarning

    warnings.simplefilter("error", PrivacyLeakWarning)  # bounds and classes are declared: no leak allowed
    rows = []
    for job in json.load(open(jobs_path)):
        d = np.load(job["npz"])
        X, y, lo, hi = d["X"], d["y"], d["lo"], d["hi"]
        for split, (train, test) in enumerate(zip(job["train"], job["test"])):
            for eps in EPSILONS:
                clf = RandomForestClassifier(
                    epsilon=eps, bounds=(lo, hi), classes=list(range(job["n_classes"])), accountant=BudgetAccountant()
                )
                clf.fit(X[train], y[train])
                acc = float((clf.predict(X[test]) == y[test]).mean())
                rows.append({"dataset": job["dataset"], "split": split, "epsilon": eps, "acc": acc})
    json.dump(rows, open(out_path, "w"))


def cv_splits(n: int, repeats: int, folds: int, rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
    """``repeats`` x ``folds``-fold (train, test) index pairs over ``n`` rows, the same for every model."""
    splits = []
    for _ in range(repeats):
        perm = rng.permutation(n)
        for test in np.array_split(perm, folds):
            splits.append((np.setdiff1d(perm, test), np.sort(test)))
    return splits


def dpl_job(name: str, schema, X: np.ndarray, y: np.ndarray, splits: list, tmp: str) -> dict:
    """diffprivlib's job for one dataset: its codes saved for the venv, the declared bounds (categorical codes:
    0 to arity - 1) and the splits."""
    cat = schema.is_categorical
    lo = np.array([0.0 if c else a.min for a, c in zip(schema.attributes, cat)], dtype=float)
    hi = np.array([max(a.arity - 1, 1) if c else a.max for a, c in zip(schema.attributes, cat)], dtype=float)
    npz = str(Path(tmp, f"{name}.npz"))
    np.savez(npz, X=X, y=y, lo=lo, hi=hi)
    return {
        "dataset": name,
        "npz": npz,
        "n_classes": schema.n_classes,
        "train": [s[0].tolist() for s in splits],
        "test": [s[1].tolist() for s in splits],
    }


def run_dpl(python: str, jobs: list[dict]) -> list[dict] | str:
    with tempfile.TemporaryDirectory() as tmp:
        jp, op = Path(tmp, "jobs.json"), Path(tmp, "out.json")
        jp.write_text(json.dumps(jobs))
        done = subprocess.run([python, __file__, "--dpl-worker", str(jp), str(op)], capture_output=True, text=True)
        if done.returncode:
            return f"diffprivlib failed: {done.stderr.strip()[-500:]}"
        return json.loads(op.read_text())


# -- the run ------------------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--datasets", nargs="*", default=list(DATASETS))
    ap.add_argument("--dpl-python", default="/tmp/dplvenv/bin/python")
    ap.add_argument("--stem", default="accuracy_small_data")
    ap.add_argument("--dpl-worker", nargs=2)
    ap.add_argument("--fit-only", action="store_true", help="skip the streaming paths (update, grow, river)")
    args = ap.parse_args()
    if args.dpl_worker:
        return dpl_worker(*args.dpl_worker)

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from common import machine, sh, write_results

    warnings.simplefilter("ignore")  # the fits' notices (a forest holding a release, NotPrivate) are not results
    info = {"machine": machine(), "git": sh("git rev-parse --short HEAD"), "uptime_start": sh("uptime")}
    info.update(repeats=args.repeats, folds=args.folds, epsilons=list(EPSILONS), fit_only=args.fit_only)
    rows, dpl_jobs = [], []
    tmp = tempfile.mkdtemp()
    for name in args.datasets:
        rng = np.random.default_rng(sum(map(ord, name)))  # a fixed seed per dataset
        schema, X, y = load_encoded(name, rng)
        splits = cv_splits(len(y), args.repeats, args.folds, rng)
        dpl_jobs.append(dpl_job(name, schema, X, y, splits, tmp))
        t0 = time.time()
        for split, (train, test) in enumerate(splits):
            for eps in EPSILONS:
                r = streamdp_scores(schema, X, y, train, test, eps, args.fit_only)
                rows.append({"dataset": name, "split": split, "epsilon": eps, **r})
        print(f"{name}: {len(y)} rows x {schema.n_attributes}, {time.time() - t0:.0f} s", flush=True)
        info.setdefault("data", {})[name] = {
            "rows": int(len(y)),
            "attributes": schema.n_attributes,
            "numeric": int((~schema.is_categorical).sum()),
            "classes": schema.n_classes,
        }
    dpl = run_dpl(args.dpl_python, dpl_jobs) if Path(args.dpl_python).exists() else "no diffprivlib venv"
    if isinstance(dpl, str):
        info["dpl"] = dpl
        dpl = []
    info["uptime_end"] = sh("uptime")
    write_results(args.stem, info, rows + [{"dpl": True, **r} for r in dpl], report(info, rows, dpl))


def report(info: dict, rows: list[dict], dpl: list[dict]) -> list[str]:
    n = info["repeats"] * info["folds"]
    lines = [
        "# Defaults on small data nobody tuned for",
        "",
        f"`python benchmarks/studies/accuracy_small_data.py --repeats {info['repeats']} --folds {info['folds']}"
        f"{' --fit-only' if info.get('fit_only') else ''}`; "
        f"git {info['git']}; {info['machine']['nproc']} x {info['machine']['cpu']}",
        f"load at start: {info['uptime_start']}",
        f"load at end: {info['uptime_end']}",
        "",
        f"Mean test accuracy over {info['repeats']} x {info['folds']}-fold CV ({n} splits, the same for every "
        "model); in brackets the lowest split. `fit - dpl`: the one-shot fit minus diffprivlib's forest. "
        "`river 1-class`: splits where the river forest predicted one minority class for every test record.",
        "",
    ]
    if info.get("dpl"):
        lines += [f"diffprivlib: {info['dpl']}", ""]
    summary = []
    for name, d in info["data"].items():
        lines += [
            f"## {name} ({d['rows']} rows, {d['attributes']} attributes of which {d['numeric']} numeric, "
            f"{d['classes']} classes)",
            "",
            "| epsilon | fit | update | grow | river | dpl | majority | fit - dpl | river 1-class | s fit/upd/grow/river |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for eps in EPSILONS:
            rs = [r for r in rows if r["dataset"] == name and r["epsilon"] == eps]
            acc = {
                m: np.array([r["acc"][m] for r in rs])
                for m in ("fit", "update", "grow", "river", "majority")
                if all(m in r["acc"] for r in rs)
            }
            d_acc = np.array([r["acc"] for r in dpl if r["dataset"] == name and r["epsilon"] == eps])
            if d_acc.size:
                acc["dpl"] = d_acc

            def cell(m: str) -> str:
                return f"{acc[m].mean():.3f} ({acc[m].min():.3f})" if m in acc else "-"

            secs = "/".join(
                f"{np.mean([r['seconds'][m] for r in rs]):.2f}" if m in rs[0]["seconds"] else "-"
                for m in ("fit", "update", "grow", "river")
            )
            gap = f"{acc['fit'].mean() - acc['dpl'].mean():+.3f}" if "dpl" in acc else "-"
            one = int(sum(r["acc"].get("river_one_class", 0) for r in rs))
            lines.append(
                f"| {eps:g} | {' | '.join(cell(m) for m in ('fit', 'update', 'grow', 'river', 'dpl', 'majority'))} "
                f"| {gap} | {one} | {secs} |"
            )
            summary.append({m: float(a.mean()) for m, a in acc.items()})
        lines.append("")
    lines += [
        "## Over every dataset and epsilon",
        "",
        "| model | mean accuracy | mean minus fit | cells below majority - 0.01 |",
        "|---|---|---|---|",
    ]
    for m in ("fit", "update", "grow", "river", "dpl", "majority"):
        vals = [s for s in summary if m in s]
        if not vals:
            continue
        mean = np.mean([s[m] for s in vals])
        rel = np.mean([s[m] - s["fit"] for s in vals])
        below = sum(s[m] < s["majority"] - 0.01 for s in vals)
        lines.append(f"| {m} | {mean:.3f} | {rel:+.3f} | {below} of {len(vals)} |")
    return [*lines, ""]


if __name__ == "__main__":
    main()
