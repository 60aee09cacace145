"""The budgeted default draw against the single-height leaf-budget rule it replaces, on the same splits.

Before: every tree drawn at one height, the tallest (from half the attributes where all are categorical, from
the deepest a tree can be otherwise) whose drawn trees all stay within ``leaf_budget`` (re-implemented here from
the former ``ForestStructure.draw``). After: ``PrivateForest.create(schema)``'s budgeted draw, each branch as deep
as its tree's leaf budget (2**18 leaves over the trees) holds. Also the budgeted draw within the former budget
(2**17), and with 5 trees (fewer, each with twice the epsilon and twice the budget).

Accuracy: the one-shot fit (pruned, the defaults) on ``--seeds`` random hold-out thirds per dataset and
epsilon 0.5 / 1 / 2, every variant on the same splits; mean, min and the mean paired difference after - before
with its standard error. Datasets: the bundled UCI sets (whole) and the small numeric ones of
``accuracy_small_data`` (synthetic, river's Phishing, Bananas and ImageSegments). Sizes: the default draw's
time (the least of 3) and blob (every leaf cell filled, as a fit that keeps every leaf) over schemas of 1-100 attributes
(numeric, binary, 5 and 50 values, mixed) with 2, 10 and 50 classes, before and after.

    python benchmarks/studies/budgeted_draw.py [--seeds 10]

Writes ``results/budgeted_draw.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.common import machine, sh, write_results  # noqa: E402
from benchmarks.studies.accuracy_small_data import load_encoded  # noqa: E402
from streamdp import PrivateForest  # noqa: E402
from streamdp.forest.draw import draw_forest  # noqa: E402
from streamdp.forest.heights import DEFAULT_CELL_BUDGET, deepest_height, default_height, fitting_height  # noqa: E402
from streamdp.forest.limits import DEFAULT_MAX_CELLS, MAX_HEIGHT  # noqa: E402
from streamdp.forest.structure import ForestStructure  # noqa: E402
from streamdp.records.schema import Schema  # noqa: E402

DATASETS = (
    "uci-adult",
    "uci-nursery-all",
    "uci-mushroom",
    "uci-congressional-voting",
    "uci-tic-tac-toe",
    "synth-linear",
    "synth-blobs",
    "synth-rules",
    "river-phishing",
    "river-bananas",
    "river-imagesegments",
)
EPSILONS = (0.5, 1.0, 2.0)
VARIANTS = ("before", "budgeted, former budget", "after", "after, 5 trees")


def fewest_leaves(schema: Schema, height: int) -> int:
    """The former rule's bound: fewest leaves a tree of ``height`` can have."""
    arities = sorted(int(a) for a in schema.arities[schema.is_categorical])
    has_numeric = not bool(np.all(schema.is_categorical))
    leaves = 1
    for _ in range(height):
        if arities and (arities[0] <= 2 or not has_numeric):
            leaves *= arities.pop(0)
        elif has_numeric:
            leaves *= 2
        else:
            break
    return leaves


#: The former leaf budget over the trees (the cell budget is unchanged).
FORMER_LEAF_BUDGET = 2**17


def former_budget(schema: Schema, n_trees: int) -> int:
    """The former ``leaf_budget``: 2**17 leaves over the trees, and the cell budget."""
    return max(2, min(FORMER_LEAF_BUDGET // n_trees, DEFAULT_CELL_BUDGET // (schema.n_classes * (n_trees + 1))))


def single_height_draw(schema: Schema, n_trees: int) -> ForestStructure:
    """The former default: the tallest single height whose drawn trees all stay within the former leaf budget."""
    rng = np.random.default_rng()
    guard = DEFAULT_MAX_CELLS // (schema.n_classes * n_trees)
    height = default_height(schema.n_attributes) if bool(np.all(schema.is_categorical)) else MAX_HEIGHT
    height = min(height, deepest_height(schema))
    budget = min(guard, former_budget(schema, n_trees))
    height = fitting_height(schema, height, n_trees)
    while height > 1 and fewest_leaves(schema, height) > budget:
        height -= 1
    drawn = draw_forest(schema, n_trees, height, rng, budget)
    while isinstance(drawn, int) and height > 1:
        height -= 1
        drawn = draw_forest(schema, n_trees, height, rng, budget)
    if isinstance(drawn, int):
        drawn = draw_forest(schema, n_trees, 1, rng, guard)
    assert not isinstance(drawn, int)
    return ForestStructure(*drawn[:5], int(height))


def budgeted_draw(schema: Schema, n_trees: int, budget: int) -> ForestStructure:
    """The budgeted draw (the new default's) within another leaf budget."""
    height = default_height(schema.n_attributes) if bool(np.all(schema.is_categorical)) else MAX_HEIGHT
    height = min(height, deepest_height(schema))
    guard = DEFAULT_MAX_CELLS // (schema.n_classes * n_trees)
    drawn = draw_forest(schema, n_trees, height, np.random.default_rng(), guard, room=budget)
    assert not isinstance(drawn, int)
    return ForestStructure(*drawn[:5], drawn[5])


def create(variant: str, schema: Schema, eps: float) -> PrivateForest:
    if variant in ("before", "budgeted, former budget"):
        draw = (
            single_height_draw(schema, 10)
            if variant == "before"
            else budgeted_draw(schema, 10, former_budget(schema, 10))
        )
        return PrivateForest(schema, draw.with_stumps(1, schema.n_attributes), epsilon=eps, prior_trees=1)
    return PrivateForest.create(schema, n_trees=5 if "5 trees" in variant else 10, epsilon=eps)


def load_dataset(name: str, rng: np.random.Generator):
    if name in ("uci-adult", "uci-mushroom", "uci-nursery-all"):  # whole (accuracy_small_data subsamples)
        from streamdp.records.datasets import load

        ds = load(name.removeprefix("uci-").removesuffix("-all"))
        enc = ds.schema.encode(ds.X, ds.y)
        return ds.schema, enc.X, np.asarray(enc.y)
    return load_encoded(name, rng)


def accuracy(seeds: int, datasets: list[str]) -> list[dict]:
    rows = []
    for name in datasets:
        rng = np.random.default_rng(sum(map(ord, name)))
        schema, X, y = load_dataset(name, rng)
        splits = []
        for _ in range(seeds):
            perm = rng.permutation(len(y))
            splits.append((perm[len(y) // 3 :], perm[: len(y) // 3]))
        for eps in EPSILONS:
            acc: dict[str, list[float]] = {v: [] for v in VARIANTS}
            heights: dict[str, list[int]] = {v: [] for v in VARIANTS}
            majority = []
            for tr, te in splits:
                majority.append(float((y[te] == np.bincount(y[tr]).argmax()).mean()))
                for v in VARIANTS:
                    f = create(v, schema, eps)
                    heights[v].append(f.height)
                    f.fit_encoded(X[tr], y[tr])
                    p = f.proba_from_leaves(f.structure.apply(X[te], schema.is_categorical)).argmax(axis=1)
                    acc[v].append(float((p == y[te]).mean()))
            row = {"dataset": name, "rows": len(y), "epsilon": eps, "majority": float(np.mean(majority))}
            for v in VARIANTS:
                row[v] = {"mean": float(np.mean(acc[v])), "min": float(min(acc[v])), "drawn heights": heights[v]}
                if v != "before":
                    d = np.array(acc[v]) - np.array(acc["before"])
                    row[v]["minus before"] = float(d.mean())
                    row[v]["se"] = float(d.std(ddof=1) / np.sqrt(d.size))
            rows.append(row)
            print(name, eps, {v: round(row[v]["mean"], 3) for v in VARIANTS}, flush=True)
    return rows


SWEEP = {
    "numeric": lambda m: ["num"] * m,
    "binary": lambda m: [2] * m,
    "five values": lambda m: [5] * m,
    "fifty values": lambda m: [50] * m,
    "mixed": lambda m: [["num", 2, 7, 50, 3][i % 5] for i in range(m)],
}


def sweep_schema(kinds: list, n_classes: int) -> Schema:
    attributes = [
        {"name": f"a{i}", "type": "numeric", "min": -i, "max": 1.0 + i}
        if k == "num"
        else {"name": f"a{i}", "type": "categorical", "values": list(range(k))}
        for i, k in enumerate(kinds)
    ]
    return Schema.from_dict({"attributes": attributes, "label": {"name": "y", "values": list(range(n_classes))}})


def sizes() -> list[dict]:
    rows = []
    for kind, kinds in SWEEP.items():
        for m in (1, 3, 10, 30, 64, 100):
            for n_classes in (2, 10, 50):
                schema = sweep_schema(kinds(m), n_classes)
                row: dict = {"kind": kind, "attributes": m, "classes": n_classes}
                for v in ("before", "after"):
                    secs, cpu = [], []
                    for _ in range(3):  # the least of 3 draws: the machine is shared
                        start, start_cpu = time.perf_counter(), time.process_time()
                        f = create(v, schema, 1.0)
                        secs.append(time.perf_counter() - start)
                        cpu.append(time.process_time() - start_cpu)
                    f._counts[f.real_cells] = 1  # a fit that keeps every leaf: every cell nonzero
                    row[v] = {
                        "draw s": min(secs),
                        "draw cpu s": min(cpu),
                        "blob MB": len(f.to_bytes()) / 1e6,
                        "height": f.height,
                        "leaves": int(f.structure.n_leaves[: f.n_trees].sum()),
                    }
                rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--datasets", nargs="*", default=list(DATASETS))
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    info = {
        "command": f"python benchmarks/studies/budgeted_draw.py --seeds {args.seeds}",
        "git": sh("git rev-parse --short HEAD"),
        "machine": machine(),
        "uptime_start": sh("uptime"),
    }
    size_rows = sizes()
    acc_rows = accuracy(args.seeds, args.datasets)
    info["uptime_end"] = sh("uptime")
    m = info["machine"]
    lines = [
        "# The budgeted default draw against the single-height rule",
        "",
        f"`{info['command']}`; git {info['git']}; {m['nproc']} x {m['cpu']}.",
        f"Load at start: `{info['uptime_start']}`; at end: `{info['uptime_end']}`.",
        "",
        f"## One-shot fit at the defaults: accuracy on a hold-out third, {args.seeds} splits, mean (min)",
        "",
        "after - before: mean paired difference (standard error). Drawn heights: the range over the splits.",
        "",
        "| dataset | rows | epsilon | majority | before | budgeted, 2**17 | - before | after (2**18) | - before "
        "| after, 5 trees | - before | drawn heights before / after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(r: dict, v: str) -> str:
        return f"{r[v]['mean']:.3f} ({r[v]['min']:.3f})"

    def diff(r: dict, v: str) -> str:
        return f"{r[v]['minus before']:+.3f} ({r[v]['se']:.3f})"

    def hrange(hs: list[int]) -> str:
        return f"{min(hs)}" if min(hs) == max(hs) else f"{min(hs)}-{max(hs)}"

    for r in acc_rows:
        lines.append(
            f"| {r['dataset']} | {r['rows']} | {r['epsilon']:g} | {r['majority']:.3f} | {cell(r, 'before')} "
            f"| {cell(r, 'budgeted, former budget')} | {diff(r, 'budgeted, former budget')} "
            f"| {cell(r, 'after')} | {diff(r, 'after')} | {cell(r, 'after, 5 trees')} | {diff(r, 'after, 5 trees')} "
            f"| {hrange(r['before']['drawn heights'])} / {hrange(r['after']['drawn heights'])} |"
        )
    lines += [
        "",
        "## Default draw over schemas of 1-100 attributes (10 trees, one prior stump)",
        "",
        "Worst over the attribute counts and class counts of each kind; draw time: the least of 3 draws (wall "
        "clock; the machine is shared, see the load); blob with every leaf cell filled.",
        "",
        "| schema | before: max draw s | before: max blob MB | after: max draw s | after: max blob MB "
        "| after: heights | after: most leaves (10 trees) |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind in SWEEP:
        rs = [r for r in size_rows if r["kind"] == kind]
        hs = [r["after"]["height"] for r in rs]
        lines.append(
            f"| {kind} | {max(r['before']['draw s'] for r in rs):.3f} | {max(r['before']['blob MB'] for r in rs):.2f} "
            f"| {max(r['after']['draw s'] for r in rs):.3f} | {max(r['after']['blob MB'] for r in rs):.2f} "
            f"| {min(hs)}-{max(hs)} | {max(r['after']['leaves'] for r in rs):,} |"
        )
    lines.append("")
    write_results("budgeted_draw", info, [*acc_rows, *size_rows], lines)


if __name__ == "__main__":
    main()
