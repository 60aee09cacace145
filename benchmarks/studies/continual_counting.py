"""Noise of one published cell against the number of windows: release="window" vs release="tree".

Runs the real code of :mod:`streamdp.release.continual` (no Redis), geometric noise from the
secure source, at epsilon 1 per tree, on an empty stream (the noise does not depend on
the data), with R independent cells as replicates: the measured sd at window T is
sqrt(mean(published(T)^2)) over the R cells. Configurations:

* window: :class:`Counter` (one window_delta per window, merged);
* tree, L=20 (the default, T_max = 1,048,575): the service's steps (closing_sums, one
  noisy_node per closing node, advance), both estimators advanced from the same noisy nodes;
* tree sized to the horizon (L = 4, 7, 10, 14), each run to its T_max.

Formulas (Dwork, Naor, Pitassi & Rothblum; Chan, Shi & Song): window sd = sqrt(T v(eps)), ~ sqrt(2T)/eps;
tree sd = sqrt(popcount(T) v(eps/L)) (decomposition), ~ sqrt(2L) L/eps at worst;
:func:`published_variance` gives the exact value for each (also Honaker's).

Run: python benchmarks/studies/continual_counting.py [--max-windows N] [--cells R]
(writes benchmarks/results/continual_counting.{json,md,png})
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import machine, sh, write_keeping_reading
from streamdp.estimation import cell_variance  # noqa: E402
from streamdp.privacy.mechanisms import SecureRandom
from streamdp.release.continual import Counter, ReleasePolicy, TreeState, noisy_node, published_variance

OUT = Path(__file__).resolve().parents[1] / "results"
EPS = 1.0


def checkpoints(max_t: int) -> list[int]:
    grid = {int(round(m * 10**d)) for d in range(1, 7) for m in (1, 2, 5)}
    grid |= {2**k - 1 for k in range(4, 21)}  # worst points of a tree (all bits set)
    return sorted(t for t in grid if t <= max_t)


def sd_of(a: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.asarray(a, dtype=np.float64) ** 2)))


def run_window(max_t: int, cells: int, marks: set[int]) -> dict[int, float]:
    c = Counter(ReleasePolicy("window"), (cells,), EPS, SecureRandom())
    out = {}
    for t in range(1, max_t + 1):
        c.close()
        if t in marks:
            out[t] = sd_of(c.published)
    return out


def run_tree(levels: int, max_t: int, cells: int, marks: set[int]) -> dict[str, dict[int, float]]:
    rng = SecureRandom()
    states = {
        e: TreeState.empty(ReleasePolicy("tree", levels=levels, estimator=e), (cells,))
        for e in ("honaker", "decomposition")
    }
    eps_node = states["honaker"].policy.node_epsilon(EPS)
    out: dict[str, dict[int, float]] = {e: {} for e in states}
    for t in range(1, max_t + 1):
        exact = states["honaker"].closing_sums(None)
        noisy = {n: noisy_node(x, eps_node, "geometric", rng) for n, x in exact.items()}  # drawn once, used twice
        for e in states:
            states[e] = states[e].advance(None, noisy)
            if t in marks:
                out[e][t] = sd_of(states[e].published())
    return out


def formula(kind: str, t: int, levels: int = 20, estimator: str = "honaker") -> float:
    p = ReleasePolicy(kind, levels=levels, estimator=estimator)
    return math.sqrt(published_variance(p, t, cell_variance("geometric", p.node_epsilon(EPS))))


def crossover(levels: int, estimator: str, max_t: int) -> dict:
    """From the exact formulas: first T where the tree's sd is below the window's, and the T from
    which it stays below up to max_t."""
    first, last_worse = None, 0
    vw = cell_variance("geometric", EPS)
    p = ReleasePolicy("tree", levels=levels, estimator=estimator)
    vt = cell_variance("geometric", p.node_epsilon(EPS))
    for t in range(1, max_t + 1):
        better = published_variance(p, t, vt) < t * vw
        if better and first is None:
            first = t
        if not better:
            last_worse = t
    return {"first_tree_better": first, "tree_always_better_from": last_worse + 1}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-windows", type=int, default=10**6)
    ap.add_argument("--cells", type=int, default=400)
    args = ap.parse_args()
    max_t, R = args.max_windows, args.cells
    info = {
        "machine": machine(),
        "uptime_start": sh("uptime"),
        "epsilon_per_tree": EPS,
        "cells": R,
        "mechanism": "geometric",
        "max_windows": max_t,
    }
    t0 = time.time()
    marks = set(checkpoints(max_t))
    res: dict[str, dict[int, float]] = {"window": run_window(max_t, R, marks)}
    print("window done", time.time() - t0, flush=True)
    for e, d in run_tree(20, min(max_t, 2**20 - 1), R, marks).items():
        res[f"tree L=20 {e}"] = d
    print("tree L=20 done", time.time() - t0, flush=True)
    for L in (4, 7, 10, 14):
        if 2**L - 1 <= max_t:
            for e, d in run_tree(L, 2**L - 1, R, marks).items():
                res[f"tree L={L} {e}"] = d
    info["uptime_end"], info["seconds"] = sh("uptime"), round(time.time() - t0, 1)
    info["crossover_formula"] = {
        f"L=20 {e}": crossover(20, e, min(max_t, 2**20 - 1)) for e in ("honaker", "decomposition")
    }
    rows = []
    for t in sorted(marks):
        row = {
            "T": t,
            "popcount": bin(t).count("1"),
            "window": res["window"].get(t),
            "window_formula": formula("window", t),
            "window_approx": math.sqrt(2 * t) / EPS,
        }
        for e in ("honaker", "decomposition"):
            row[f"tree20_{e}"] = res[f"tree L=20 {e}"].get(t)
            row[f"tree20_{e}_formula"] = formula("tree", t, 20, e)
        row["tree20_worst_approx"] = math.sqrt(2 * 20) * 20 / EPS
        rows.append(row)
    sized = [
        {
            "L": int(k.split()[1][2:]),
            "estimator": k.split()[2],
            "T": t,
            "sd": v,
            "formula": formula("tree", t, int(k.split()[1][2:]), k.split()[2]),
        }
        for k, d in res.items()
        if k.startswith("tree L=") and not k.startswith("tree L=20")
        for t, v in d.items()
    ]
    measured_cross = next(
        (
            r["T"]
            for r in rows
            if r["tree20_honaker"] is not None and r["window"] is not None and r["tree20_honaker"] < r["window"]
        ),
        None,
    )
    info["crossover_measured_first_checkpoint_L20_honaker"] = measured_cross
    (OUT / "continual_counting.json").write_text(json.dumps({**info, "rows": rows, "sized": sized}, indent=1))
    plot(rows, sized)
    write_md(info, rows, sized)


def plot(rows: list[dict], sized: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    T = np.array([r["T"] for r in rows])
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ax.loglog(T, [r["window"] for r in rows], "o", color="C0", label="window (measured)")
    ax.loglog(T, [r["window_formula"] for r in rows], "-", color="C0", alpha=0.6, label="window: sqrt(T v(eps))")
    for e, c in (("honaker", "C3"), ("decomposition", "C1")):
        ax.loglog(
            T,
            [r[f"tree20_{e}"] for r in rows],
            "s" if e == "honaker" else "^",
            color=c,
            label=f"tree L=20, {e} (measured)",
        )
        ax.loglog(T, [r[f"tree20_{e}_formula"] for r in rows], "-", color=c, alpha=0.4, label=f"tree L=20, {e} formula")
    ax.axhline(rows[0]["tree20_worst_approx"], color="grey", ls=":", label="sqrt(2L) L/eps, L=20 (worst)")
    for L in sorted({s["L"] for s in sized}):
        pts = [s for s in sized if s["L"] == L and s["estimator"] == "honaker"]
        if pts:
            ax.loglog(
                [p["T"] for p in pts],
                [p["sd"] for p in pts],
                "x",
                color="C2",
                label="tree sized to its horizon (L=4,7,10,14), honaker" if L == 4 else None,
            )
    ax.set_xlabel("windows T")
    ax.set_ylabel("sd of one published cell")
    ax.set_title(f"Continual counting at epsilon {EPS:g} per tree (geometric noise)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "continual_counting.png", dpi=110)


def write_md(info: dict, rows: list[dict], sized: list[dict]) -> None:
    f = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    lines = [
        "# Continual counting: sd of one published cell vs windows (benchmarks/studies/continual_counting.py)",
        "",
        f"Real code of streamdp.release.continual, epsilon {info['epsilon_per_tree']:g} per tree, geometric noise from the "
        f"secure source, {info['cells']} independent cells per point (sd precision about "
        f"+-{100 / math.sqrt(2 * info['cells']):.0f}%). {info['seconds']} s; "
        f"{info['machine']['nproc']} x {info['machine']['cpu']}.",
        "",
        f"Load at start `{info['uptime_start']}`, at end `{info['uptime_end']}`.",
        "",
        "| T | popcount | window | formula | sqrt(2T)/eps | tree L=20 Honaker | formula | "
        "tree L=20 decomposition | formula |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['T']:,} | {r['popcount']} | {f(r['window'])} | {f(r['window_formula'])} | "
            f"{f(r['window_approx'])} | {f(r['tree20_honaker'])} | {f(r['tree20_honaker_formula'])} | "
            f"{f(r['tree20_decomposition'])} | {f(r['tree20_decomposition_formula'])} |"
        )
    lines += [
        "",
        f"The usual worst-case tree approximation sqrt(2L) L/eps at L=20: {rows[0]['tree20_worst_approx']:.1f}.",
        "",
        "## Crossover (L=20)",
        "",
    ]
    for k, v in info["crossover_formula"].items():
        lines.append(
            f"- {k}, exact formulas: tree first below window at T = {v['first_tree_better']:,}; "
            f"always below from T = {v['tree_always_better_from']:,}."
        )
    lines.append(
        f"- Measured (first checkpoint where tree L=20 Honaker < window): "
        f"T = {info['crossover_measured_first_checkpoint_L20_honaker']}."
    )
    lines.append("- The usual rule of thumb: near L^3 = 8,000 windows.")
    lines += [
        "",
        "## Trees sized to the horizon (measured sd at T = T_max, the worst point; formula)",
        "",
        "| L | T_max | Honaker | formula | decomposition | formula | window at T_max (formula) |",
        "|---|---|---|---|---|---|---|",
    ]
    for L in sorted({s["L"] for s in sized}):
        tm = 2**L - 1
        h = next((s for s in sized if s["L"] == L and s["estimator"] == "honaker" and s["T"] == tm), None)
        d = next((s for s in sized if s["L"] == L and s["estimator"] == "decomposition" and s["T"] == tm), None)
        if h and d:
            lines.append(
                f"| {L} | {tm:,} | {h['sd']:.1f} | {h['formula']:.1f} | {d['sd']:.1f} | {d['formula']:.1f} | "
                f"{formula('window', tm):.1f} |"
            )
    lines.append("")
    write_keeping_reading(OUT / "continual_counting.md", lines)


if __name__ == "__main__":
    main()
