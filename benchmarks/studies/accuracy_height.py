"""Accuracy against height, before and after noise-aware estimation (issue 13, section 1).

    python benchmarks/studies/accuracy_height.py [--reps 2] [--quick]
    # writes results/accuracy_height.{json,md,png}

For every shared dataset (Nursery with 3 classes as in Jagannathan et al., Mushroom
without stalk-root, Congressional Votes, Tic-Tac-Toe, Adult with its numeric
attributes) and the synthetic 4-class ``skewed`` data (70% majority), at
epsilon 0.5, 1 and 2 and every height from 1 to the number of attributes (up
to the size guard):

* PrivateForest (10 trees, split budget, probability vote, geometric noise):
  ``leaf`` = the rule before (a leaf's clipped counts, Fan et al.'s pooled
  vote), ``shrink`` = :mod:`streamdp.estimation` on the published leaf
  counts (release (a)), and ``levels`` = a simulation of release (b): every
  level of every tree noised with ``epsilon_tree / (h + 1)`` and combined
  bottom-up by inverse variance (Hay et al.'s first pass; the top-down pass
  is not simulated), then the same rule. (b) is simulated here only: the
  library does not release it.
* HanischForest (10 trees) and DPEA (one-step, ``embed_depth=1``) at max_depth
  1..min(8, attributes): ``leaf`` vs ``shrink`` on the same fit (HanischForest:
  ``leaf`` is Hanisch's rule, each tree's largest noisy leaf count then a majority
  vote; ``shrink`` the default, the trees' evidence pooled, ``vote="proba"``).

Evaluation: one fixed hold-out split (2/3 train, 1/3 test), ``--reps``
repetitions with a new structure and new noise each (not 10x10 CV: the full
grid would take hours on the shared 2-core machine). The variance table
compares (a) and (b) per depth on the tallest Nursery forest, in units of the
leaf cell variance ``s^2`` of release (a).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import machine, sh, write_keeping_reading  # noqa: E402
from benchmarks.studies.accuracy_rdt import prepare  # noqa: E402
from streamdp.estimation import ForestNodes, prior_from  # noqa: E402
from streamdp.forest.model import PrivateForest  # noqa: E402
from streamdp.forest.structure import ForestStructure, TooLargeError  # noqa: E402
from streamdp.learners import DPEA, HanischForest  # noqa: E402
from streamdp.privacy.mechanisms import NotPrivateWarning, SecureRandom, geometric_noise  # noqa: E402
from streamdp.records.datasets import load, skewed  # noqa: E402
from streamdp.records.schema import Categorical  # noqa: E402

warnings.simplefilter("ignore", NotPrivateWarning)
OUT = Path(__file__).resolve().parents[1] / "results"
EPS = (0.5, 1.0, 2.0)
N_TREES = 10
MAX_CELLS = 2**23  # smaller than the library's guard, to bound the run time
DATASETS = ("nursery", "mushroom", "congressional-voting", "tic-tac-toe", "adult", "skewed")


def data(name: str):
    """(schema, encoded X, y codes)."""
    if name in ("nursery", "mushroom", "congressional-voting"):
        return prepare(name)
    ds = skewed(6000) if name == "skewed" else load(name)
    enc = ds.schema.encode(ds.X, ds.y)
    return ds.schema, enc.X, enc.y


def split(n: int, rng) -> tuple[np.ndarray, np.ndarray]:
    perm = rng.permutation(n)
    return perm[n // 3 :], perm[: n // 3]


def levels_nodes(forest: PrivateForest, X: np.ndarray, y: np.ndarray, rng: SecureRandom) -> ForestNodes:
    """Release (b), simulated: exact counts at every node, each level noised with eps_tree/(h+1), bottom-up combined."""
    s = forest.structure
    exact = PrivateForest(forest.schema, s, epsilon=np.inf, budget=forest.budget, noise_seed=0)
    exact.merge(exact.noisy_delta_encoded(X, y))
    ex = ForestNodes.build(s.feature, s.child, s.leaf, exact.counts, 0.0)
    h = int(ex.depth.max())
    eps_level = forest.epsilon_per_tree / (h + 1)
    a = np.exp(-eps_level)
    sb2 = 2 * a / (1 - a) ** 2
    yb = ex.y + geometric_noise(ex.y.shape, eps_level, rng)
    C = yb.shape[1]
    z, vz = np.zeros_like(yb), np.zeros(len(yb))
    S, VS = np.zeros_like(yb), np.zeros(len(yb))
    for d in range(h, -1, -1):
        nodes = np.flatnonzero(ex.depth == d)
        inner = VS[nodes] > 0
        w_own = 1.0 / sb2
        w_kids = np.where(inner, 1.0 / np.where(inner, VS[nodes], 1.0), 0.0)
        z[nodes] = (yb[nodes] * w_own + S[nodes] * w_kids[:, None]) / (w_own + w_kids)[:, None]
        vz[nodes] = 1.0 / (w_own + w_kids)
        up = nodes[ex.parent[nodes] >= 0]
        np.add.at(S, ex.parent[up], z[up])
        np.add.at(VS, ex.parent[up], vz[up])
    roots = ex.depth == 0
    return ForestNodes(z, vz * C, ex.parent, ex.depth, ex.leaf_node, prior_from(z[roots]))


def variance_table(schema, height: int, seed: int = 0) -> list[dict]:
    """Per depth, median over nodes of tree 0: Var of one cell, in units of s^2 (release (a)'s leaf cell)."""
    s = ForestStructure.draw(schema, 1, height, seed=seed, max_cells=MAX_CELLS)
    counts = np.zeros((1, s.max_leaves, schema.n_classes), dtype=np.int64)
    nodes = ForestNodes.build(s.feature, s.child, s.leaf, counts, 1.0 / schema.n_classes)  # var = L(u)
    L = nodes.var
    h = int(nodes.depth.max())
    vb = np.zeros(len(L))
    VS = np.zeros(len(L))
    sb2 = float(h + 1) ** 2
    for d in range(h, -1, -1):
        idx = np.flatnonzero(nodes.depth == d)
        wk = np.where(VS[idx] > 0, 1.0 / np.where(VS[idx] > 0, VS[idx], 1.0), 0.0)
        vb[idx] = 1.0 / (1.0 / sb2 + wk)
        up = idx[nodes.parent[idx] >= 0]
        np.add.at(VS, nodes.parent[up], vb[up])
    rows = []
    for d in range(h + 1):
        idx = nodes.depth == d
        rows.append(
            {
                "depth": d,
                "leaves_below": float(np.median(L[idx])),
                "a": float(np.median(L[idx])),
                "b": float(np.median(vb[idx])),
            }
        )
    return rows


def forest_rows(name, schema, X, y, tr, te, reps, heights) -> list[dict]:
    rows = []
    rng = SecureRandom()
    for h in heights:
        for eps in EPS:
            acc = {"leaf": [], "shrink": [], "levels": []}
            refused = False
            for r in range(reps):
                try:
                    f = PrivateForest.create(
                        schema, N_TREES, h, eps, seed=1000 * h + r, max_cells=MAX_CELLS, prior_trees=0
                    )  # the numbers above: before prior stumps (prior_stumps.py)
                except TooLargeError:
                    refused = True
                    break
                f.merge(f.noisy_delta_encoded(X[tr], y[tr]))
                leaves = f.structure.apply(X[te], schema.is_categorical)
                for est in ("leaf", "shrink"):
                    f.estimator = est
                    acc[est].append(float((f.proba_from_leaves(leaves).argmax(1) == y[te]).mean()))
                p = levels_nodes(f, X[tr], y[tr], rng).path_proba(leaves)
                acc["levels"].append(float((p.argmax(1) == y[te]).mean()))
            if refused:
                print(f"  {name} forest h={h}: refused by the size guard", flush=True)
                return rows
            rows.append(
                {
                    "dataset": name,
                    "model": "PrivateForest",
                    "height": h,
                    "epsilon": eps,
                    **{k: float(np.mean(v)) for k, v in acc.items()},
                }
            )
            print(
                f"  {name} forest h={h} eps={eps}: " + " ".join(f"{k} {np.mean(v):.3f}" for k, v in acc.items()),
                flush=True,
            )
    return rows


def learner_rows(name, schema, Xraw, yraw, tr, te, reps, depths) -> list[dict]:
    rows = []
    n_cat = sum(isinstance(a, Categorical) for a in schema.attributes)
    for model, make in (
        ("HanischForest", lambda d, e: HanischForest(schema, epsilon=e, max_depth=d, n_trees=N_TREES)),
        ("DPEA", lambda d, e: DPEA(schema, max_depth=d, embed_depth=1, epsilon=e)),
    ):
        for d in depths:
            if d > n_cat:
                break
            for eps in EPS:
                acc = {"leaf": [], "shrink": []}
                try:
                    for _ in range(reps):
                        m = make(d, eps).fit(Xraw[tr], yraw[tr])
                        default_vote = m.vote
                        for est in acc:
                            m.estimator = est
                            if model == "HanischForest":  # the rule before: Hanisch's, each tree's leaf then a vote
                                m.set_params(vote="majority" if est == "leaf" else default_vote)
                            acc[est].append(float(m.score(Xraw[te], yraw[te])))
                except ValueError as e:  # Hanisch's leaf guard
                    print(f"  {name} {model} d={d}: {e}", flush=True)
                    break
                rows.append(
                    {
                        "dataset": name,
                        "model": model,
                        "height": d,
                        "epsilon": eps,
                        **{k: float(np.mean(v)) for k, v in acc.items()},
                    }
                )
                print(
                    f"  {name} {model} d={d} eps={eps}: " + " ".join(f"{k} {np.mean(v):.3f}" for k, v in acc.items()),
                    flush=True,
                )
    return rows


def raw_of(schema, X, y):
    """Declared values of encoded rows (the learners take raw values)."""
    cols = []
    for j, a in enumerate(schema.attributes):
        if isinstance(a, Categorical):
            vals = np.array(list(a.values), dtype=object)
            cols.append(vals[X[:, j].astype(int)])
        else:
            cols.append(X[:, j].astype(object))
    labels = np.array(list(schema.classes), dtype=object)
    return np.stack(cols, axis=1), labels[y]


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = ("PrivateForest", "HanischForest", "DPEA")
    names = [d for d in DATASETS if any(r["dataset"] == d for r in rows)]
    fig, axes = plt.subplots(len(models), len(names), figsize=(3.2 * len(names), 2.6 * len(models)), squeeze=False)
    for i, model in enumerate(models):
        for j, name in enumerate(names):
            ax = axes[i][j]
            for eps, color in zip(EPS, ("tab:red", "tab:orange", "tab:green")):
                rs = [r for r in rows if r["dataset"] == name and r.get("model") == model and r["epsilon"] == eps]
                if not rs:
                    continue
                hs = [r["height"] for r in rs]
                ax.plot(hs, [r["leaf"] for r in rs], ls="--", color=color, lw=1)
                ax.plot(hs, [r["shrink"] for r in rs], ls="-", color=color, lw=1.5, label=f"eps {eps:g}")
            maj = next((r["majority"] for r in rows if r["dataset"] == name and "majority" in r), None)
            if maj is not None:
                ax.axhline(maj, color="grey", lw=0.8, ls=":")
            ax.set_title(f"{model}\n{name}", fontsize=8)
            ax.tick_params(labelsize=7)
            if j == 0:
                ax.set_ylabel("accuracy (dashed: before)", fontsize=7)
            if i == len(models) - 1:
                ax.set_xlabel("height / max_depth", fontsize=7)
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="heights up to 4 only")
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--max-height", type=int, default=64, help="cap on the heights / depths swept")
    ap.add_argument(
        "--append",
        action="store_true",
        help="add to the rows already in results/accuracy_height.json (datasets run again are replaced)",
    )
    args = ap.parse_args(argv)
    t0 = time.time()
    info = {
        "machine": machine(),
        "uptime_start": sh("uptime"),
        "reps": args.reps,
        "n_trees": N_TREES,
        "max_cells": MAX_CELLS,
    }
    print(info["uptime_start"], flush=True)
    rows: list[dict] = []
    timing = {}
    old = None
    if args.append and (OUT / "accuracy_height.json").exists():
        old = json.loads((OUT / "accuracy_height.json").read_text())
        rows = [r for r in old["rows"] if r["dataset"] not in args.datasets.split(",")]
        timing = old["info"].get("timing", {})
    for name in args.datasets.split(","):
        t1 = time.time()
        schema, X, y = data(name)
        rng = np.random.default_rng(0)
        tr, te = split(len(y), rng)
        maj = float(np.bincount(y[te], minlength=schema.n_classes).max() / len(te))
        rows.append(
            {
                "dataset": name,
                "majority": maj,
                "n_attributes": schema.n_attributes,
                "n_train": len(tr),
                "n_test": len(te),
            }
        )
        top = min(4 if args.quick else schema.n_attributes, args.max_height)
        rows += forest_rows(name, schema, X, y, tr, te, args.reps, range(1, top + 1))
        Xraw, yraw = raw_of(schema, X, y)
        rows += learner_rows(name, schema, Xraw, yraw, tr, te, args.reps, range(1, min(8, top) + 1))
        timing[name] = time.time() - t1
    info["variance_nursery"] = variance_table(prepare("nursery")[0], 8)
    info["uptime_end"], info["seconds"], info["timing"] = sh("uptime"), time.time() - t0, timing
    if old is not None:
        info["earlier_runs"] = old["info"].get("earlier_runs", []) + [
            {k: old["info"][k] for k in ("uptime_start", "uptime_end", "seconds") if k in old["info"]}
        ]
        info["max_height"] = {
            **old["info"].get("max_height", {}),
            **{d: args.max_height for d in args.datasets.split(",")},
        }
    else:
        info["max_height"] = {d: args.max_height for d in args.datasets.split(",")}
    OUT.mkdir(exist_ok=True)
    (OUT / "accuracy_height.json").write_text(json.dumps({"info": info, "rows": rows}, indent=1))
    plot(rows, OUT / "accuracy_height.png")
    write_keeping_reading(OUT / "accuracy_height.md", report(rows, info))
    print(f"done in {time.time() - t0:.0f} s", flush=True)
    return 0


def report(rows: list[dict], info: dict) -> list[str]:
    L = [
        "# Accuracy against height: noise-aware estimation (issue 13)",
        "",
        "Generated by `python benchmarks/studies/accuracy_height.py` (see its docstring for the method).",
        "",
        "## Machine and run",
        "",
        f"- {info['machine']['nproc']} x {info['machine']['cpu']}, Python {info['machine']['python']}; "
        f"the machine is shared with other helpers' jobs",
        f"- load at start: `{info['uptime_start']}`; at end: `{info['uptime_end']}`",
        f"- total {info['seconds']:.0f} s (last run); per dataset: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in info["timing"].items()),
        *[
            f"- earlier run: load at start `{e.get('uptime_start')}`, at end `{e.get('uptime_end')}`"
            for e in info.get("earlier_runs", [])
        ],
        *(
            ["- heights capped per dataset: " + ", ".join(capped)]
            if (capped := [f"{k} {v}" for k, v in info.get("max_height", {}).items() if v < 64])
            else []
        ),
        f"- one hold-out split (2/3 train, 1/3 test), {info['reps']} repetitions per cell (new structure and noise "
        f"each), mean shown; fewer folds than the 10x10 CV of accuracy_rdt.md to fit the time. "
        f"{info['n_trees']} trees, split budget, probability vote for PrivateForest; forests above "
        f"max_cells={info['max_cells']:,} are skipped (marked by the table ending early).",
        "",
        "## Variance: release (a) leaf counts only vs (b) every level with eps/(h+1), consistent",
        "",
        "Nursery, one tree of height 8, median over the nodes of each depth; variance of one class cell in units "
        "of s^2, the variance of a leaf cell under (a). (a): `L(u)`; (b): leaves `(h+1)^2 = 81`, inner nodes "
        "`1 / (1/81 + 1/sum of children's)` (Hay et al.'s bottom-up pass).",
        "",
        "| depth | leaves below | (a) leaf sums | (b) levels, consistent |",
        "|---|---|---|---|",
    ]
    for v in info["variance_nursery"]:
        L.append(f"| {v['depth']} | {v['leaves_below']:.0f} | {v['a']:.0f} | {v['b']:.1f} |")
    L += ["", "## Results (accuracy on the hold-out set; before -> after)", ""]
    for name in DATASETS:
        meta = next((r for r in rows if r["dataset"] == name and "majority" in r), None)
        if meta is None:
            continue
        L += [
            f"### {name} (majority class {meta['majority']:.3f}, {meta['n_attributes']} attributes, "
            f"{meta['n_train']} train / {meta['n_test']} test)",
            "",
        ]
        for model in ("PrivateForest", "HanischForest", "DPEA"):
            rs = [r for r in rows if r["dataset"] == name and r.get("model") == model]
            if not rs:
                continue
            cols = "leaf -> shrink" + (" (levels, simulated)" if model == "PrivateForest" else "")
            L += [
                f"**{model}** ({cols})",
                "",
                "| height | " + " | ".join(f"eps {e:g}" for e in EPS) + " |",
                "|---|" + "---|" * len(EPS),
            ]
            for h in sorted({r["height"] for r in rs}):
                cells = []
                for e in EPS:
                    r = next((r for r in rs if r["height"] == h and r["epsilon"] == e), None)
                    if r is None:
                        cells.append("")
                        continue
                    c = f"{r['leaf']:.3f} -> **{r['shrink']:.3f}**"
                    if "levels" in r:
                        c += f" ({r['levels']:.3f})"
                    if r["shrink"] < meta["majority"] - 0.01:
                        c += " below prior"
                    cells.append(c)
                L.append(f"| {h} | " + " | ".join(cells) + " |")
            best_b = max(r["leaf"] for r in rs)
            best_a = max(r["shrink"] for r in rs)
            worst_b = min(r["leaf"] for r in rs)
            worst_a = min(r["shrink"] for r in rs)
            L += [
                "",
                f"Best over heights: before {best_b:.3f}, after {best_a:.3f}; worst: before {worst_b:.3f}, "
                f"after {worst_a:.3f}.",
                "",
            ]
    return L


if __name__ == "__main__":
    raise SystemExit(main())
