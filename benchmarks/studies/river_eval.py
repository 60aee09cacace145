"""River datasets at epsilon 1: the private classifiers beside river's trees and the majority class.

    python benchmarks/studies/river_eval.py [--n 10000] [--only NAME ...]
    # writes results/river_eval.{md,json}

Every river classification dataset that needs no download (Phishing, Bananas,
ImageSegments, Shuttle: the first ``--n`` records of each) and synthetic
streams of ``--n`` records: Agrawal (function 0), SEA (variant 0), Hyperplane
(10 features, no drift), and two drifting streams: Hyperplane with moving
weights (``mag_change=0.001``, 2 drifting features) and ``ConceptDriftStream``
(Agrawal function 0 to function 2 at n/2, width n/20). Each model runs through
``river.evaluate.progressive_val_score`` (test-then-train, accuracy) on the
materialised stream: ``PrivateForestClassifier`` and ``PrivateWindowClassifier``
with their defaults at epsilon 1 (private: ``seed=None``, so one draw of
structure and noise each), river's ``HoeffdingTreeClassifier()``,
``ARFClassifier(n_models=10, seed=42)`` and ``dummy.PriorClassifier()`` (the
majority class so far). Schemas: :func:`streamdp.river.schemas.schema_for`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from river import datasets, dummy, evaluate, forest, metrics, tree  # noqa: E402
from river.datasets import synth  # noqa: E402

from benchmarks.common import write_keeping_reading  # noqa: E402
from streamdp.river import PrivateForestClassifier, PrivateWindowClassifier  # noqa: E402
from streamdp.river.schemas import schema_for  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "results"


def streams(n: int) -> dict:
    return {
        "Phishing": datasets.Phishing(),
        "Bananas": datasets.Bananas(),
        "ImageSegments": datasets.ImageSegments(),
        "Shuttle": datasets.Shuttle(),
        "Agrawal f0": synth.Agrawal(classification_function=0, seed=42),
        "SEA v0": synth.SEA(variant=0, seed=42),
        "Hyperplane": synth.Hyperplane(seed=42, n_features=10),
        "Hyperplane drift": synth.Hyperplane(seed=42, n_features=10, n_drift_features=2, mag_change=0.001),
        "Agrawal f0->f2 drift": synth.ConceptDriftStream(
            stream=synth.Agrawal(classification_function=0, seed=42),
            drift_stream=synth.Agrawal(classification_function=2, seed=42),
            position=n // 2,
            width=n // 20,
            seed=42,
        ),
    }


def models(schema) -> dict:
    return {
        "PrivateForest": lambda: PrivateForestClassifier(schema, epsilon=1.0),
        "PrivateWindow": lambda: PrivateWindowClassifier(schema, epsilon=1.0),
        "HoeffdingTree": lambda: tree.HoeffdingTreeClassifier(),
        "ARF(10)": lambda: forest.ARFClassifier(n_models=10, seed=42),
        "Majority": lambda: dummy.PriorClassifier(),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    results, t_start = [], time.time()
    load_start = os.getloadavg()
    for name, ds in streams(args.n).items():
        if args.only and name not in args.only:
            continue
        schema = schema_for(ds)
        data = list(ds.take(args.n))
        row = {"dataset": name, "n": len(data), "models": {}}
        for mname, make in models(schema).items():
            model = make()
            load = os.getloadavg()[0]
            t0 = time.perf_counter()
            acc = evaluate.progressive_val_score(data, model, metrics.Accuracy()).get()
            secs = time.perf_counter() - t0
            row["models"][mname] = {"accuracy": acc, "samples_per_s": len(data) / secs, "load1": load}
            print(f"{name:<22} {mname:<14} acc {acc:.4f}  {len(data) / secs:9,.0f}/s  load {load:.1f}", flush=True)
        results.append(row)
    doc = {
        "n": args.n,
        "load_start": load_start,
        "load_end": os.getloadavg(),
        "seconds": time.time() - t_start,
        "rows": results,
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "river_eval.json").write_text(json.dumps(doc, indent=1))
    names = list(models(None))
    lines = [
        "# River datasets at epsilon 1: private classifiers beside river's trees",
        "",
        f"`python benchmarks/studies/river_eval.py --n {args.n}` (progressive validation, accuracy; samples/s in "
        f"river's loop). 2 shared cores; 1-minute load average {load_start[0]:.1f} at start, "
        f"{doc['load_end'][0]:.1f} at end; {doc['seconds']:.0f} s in all. Private models: one private draw "
        "(structure and noise) each, defaults, epsilon 1.",
        "",
        "| dataset | records | " + " | ".join(names) + " | forest >= majority | forest within 10 pts of HT |",
        "|---|---|" + "---|" * len(names) + "---|---|",
    ]
    for r in results:
        m = r["models"]
        cells = [f"{m[k]['accuracy']:.3f} ({m[k]['samples_per_s']:,.0f}/s)" for k in names]
        f, ht, maj = m["PrivateForest"]["accuracy"], m["HoeffdingTree"]["accuracy"], m["Majority"]["accuracy"]
        lines.append(
            f"| {r['dataset']} | {r['n']:,} | "
            + " | ".join(cells)
            + f" | {'yes' if f >= maj else 'NO'} | {'yes' if f >= ht - 0.10 else 'no'} |"
        )
    write_keeping_reading(OUT / "river_eval.md", [*lines, ""])
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
