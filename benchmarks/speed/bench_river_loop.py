"""Throughput in river's own loop: ``river.evaluate.progressive_val_score`` over a materialised Agrawal stream.

    python benchmarks/speed/bench_river_loop.py [--n 20000] [--rounds 3] [--arf-n 3000]
    # writes results/river_loop.{md,json}

Models (issue 15): :class:`~streamdp.river.PrivateForestClassifier` (defaults,
epsilon 1, private: ``seed=None``; also without the compiled kernel, and with
``forest.estimator = "leaf"``, the rule before the noise-aware estimate), river's ``HoeffdingTreeClassifier()`` and
``ARFClassifier(n_models=10, seed=42)``, and ``dummy.NoChangeClassifier()`` (the
cost of river's loop itself). The machine is shared (2 cores, other jobs
running): the models are interleaved round by round, every round records the
load average, and the table reports medians. ARF runs on the first ``--arf-n``
records only (it is ~100x slower); samples/s are comparable across lengths
because every model's per-record cost is flat after the first release.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from river import datasets, dummy, evaluate, forest, metrics, tree  # noqa: E402

from benchmarks.common import write_keeping_reading  # noqa: E402
from streamdp.river import PrivateForestClassifier  # noqa: E402
from streamdp.river.schemas import agrawal_schema  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "results"


def leaf_rule() -> PrivateForestClassifier:
    """The forest predicting with the leaf rule (no noise-aware chain): what the estimate costs."""
    model = PrivateForestClassifier(agrawal_schema())
    model.forest.estimator = "leaf"
    return model


def python_path() -> PrivateForestClassifier:
    """The forest without the compiled kernel (streamdp.river.kernel): the plain-Python one-record path."""
    os.environ["STREAMDP_NO_KERNEL"] = "1"
    try:
        return PrivateForestClassifier(agrawal_schema())
    finally:
        del os.environ["STREAMDP_NO_KERNEL"]


def models() -> dict:
    return {
        "PrivateForestClassifier()": lambda: PrivateForestClassifier(agrawal_schema()),
        "PrivateForestClassifier(), plain Python (no kernel)": python_path,
        "PrivateForestClassifier(), estimator='leaf'": leaf_rule,
        "HoeffdingTreeClassifier()": lambda: tree.HoeffdingTreeClassifier(),
        "ARFClassifier(n_models=10, seed=42)": lambda: forest.ARFClassifier(n_models=10, seed=42),
        "NoChangeClassifier()": lambda: dummy.NoChangeClassifier(),
    }


def one_run(make, data) -> tuple[float, float, float]:
    """Samples per wall-clock second, per CPU second of this process, and the accuracy."""
    model = make()
    t0, c0 = time.perf_counter(), time.process_time()
    metric = evaluate.progressive_val_score(data, model, metrics.Accuracy())
    return len(data) / (time.perf_counter() - t0), len(data) / (time.process_time() - c0), metric.get()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--arf-n", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    data = list(datasets.synth.Agrawal(classification_function=0, seed=42).take(args.n))
    runs: dict = {name: [] for name in models()}
    loads = []
    for r in range(args.rounds):
        for name, make in models().items():
            load = os.getloadavg()[0]
            sps, cps, acc = one_run(make, data[: args.arf_n] if name.startswith("ARF") else data)
            runs[name].append({"samples_per_s": sps, "samples_per_cpu_s": cps, "accuracy": acc, "load1": load})
            loads.append(load)
            print(
                f"round {r}: {name:<52} {sps:10,.0f}/s  {cps:10,.0f}/CPU s  acc {acc:.4f}  load {load:.1f}", flush=True
            )
    med = {name: statistics.median(x["samples_per_s"] for x in rs) for name, rs in runs.items()}
    med_cpu = {name: statistics.median(x["samples_per_cpu_s"] for x in rs) for name, rs in runs.items()}
    forest_sps, forest_cps = med["PrivateForestClassifier()"], med_cpu["PrivateForestClassifier()"]
    rows = []
    for name, rs in runs.items():
        rows.append(
            {
                "model": name,
                "n": args.arf_n if name.startswith("ARF") else args.n,
                "median_samples_per_s": med[name],
                "median_samples_per_cpu_s": med_cpu[name],
                "runs": rs,
                "accuracy": statistics.median(x["accuracy"] for x in rs),
                "forest_speedup": forest_sps / med[name],
                "forest_speedup_cpu": forest_cps / med_cpu[name],
            }
        )
    doc = {
        "n": args.n,
        "arf_n": args.arf_n,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "load1_min": min(loads),
        "load1_max": max(loads),
        "rows": rows,
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "river_loop.json").write_text(json.dumps(doc, indent=1))
    lines = [
        "# River's own loop: progressive_val_score on Agrawal (function 0, seed 42)",
        "",
        f"`python benchmarks/speed/bench_river_loop.py --n {args.n} --rounds {args.rounds} --arf-n {args.arf_n}`; "
        f"{os.cpu_count()} cores shared with other jobs, 1-minute load average {min(loads):.1f} to {max(loads):.1f} "
        "during the runs (models interleaved round by round; medians). Per CPU second: this process's CPU time, "
        "which other jobs on the cores disturb less than the wall clock.",
        "",
        "| model | records | median samples/s | runs (samples/s, load) | median samples per CPU s | accuracy "
        "| PrivateForest speed-up (wall; CPU) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        rr = ", ".join(f"{x['samples_per_s']:,.0f} ({x['load1']:.1f})" for x in row["runs"])
        lines.append(
            f"| {row['model']} | {row['n']:,} | {row['median_samples_per_s']:,.0f} | {rr} | "
            f"{row['median_samples_per_cpu_s']:,.0f} | {row['accuracy']:.4f} | "
            f"{row['forest_speedup']:.1f}x; {row['forest_speedup_cpu']:.1f}x |"
        )
    write_keeping_reading(OUT / "river_loop.md", [*lines, ""])
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
