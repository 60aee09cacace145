"""PrivateForestClassifier settings against each other in river's own loop, several private draws each (issue 15).

    python benchmarks/studies/river_grid.py '{"label": {"kw": {...}, "E": {...}}, ...}' DRAWS [NAME ...]
    # e.g. '{"h3": {"kw": {"height": 3}}, "snr4": {"E": {"SNR_MIN": 4.0}}}' 5
    # prints one line per setting and stream; results/river_grid.log keeps the runs quoted in river_eval.md

``kw``: keyword arguments of ``PrivateForestClassifier`` (defaults otherwise, epsilon 1); ``E``:
constants of :mod:`streamdp.estimation` replaced for that setting (``SNR_MIN``, ``PRIOR_WEIGHT``,
``MIN_WEIGHT``: the one-record path reads them at call time). Progressive validation
(``river.evaluate.progressive_val_score``, accuracy) over the first 10,000 records of the streams of
``river_eval.py``; mean and minimum over DRAWS private draws, beside river's running majority.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from river import dummy, evaluate, metrics  # noqa: E402

import streamdp.estimation as E  # noqa: E402
from benchmarks.studies.river_eval import streams  # noqa: E402
from streamdp.river import PrivateForestClassifier  # noqa: E402
from streamdp.river.schemas import schema_for  # noqa: E402

warnings.simplefilter("ignore")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    grid, draws, only = json.loads(argv[0]), int(argv[1]), argv[2:]
    print(f"# {argv[0]} {draws} draws; load {os.getloadavg()[0]:.1f} at start", flush=True)
    data = {}
    for name, ds in streams(10_000).items():
        if not only or name in only:
            data[name] = (list(itertools.islice(ds, 10_000)), schema_for(ds))
    majority = {
        n: evaluate.progressive_val_score(d, dummy.PriorClassifier(), metrics.Accuracy()).get()
        for n, (d, _) in data.items()
    }
    for label, cfg in grid.items():
        saved = {k: getattr(E, k) for k in cfg.get("E", {})}
        for k, v in cfg.get("E", {}).items():
            setattr(E, k, v)
        try:
            for name, (d, schema) in data.items():
                accs = [
                    evaluate.progressive_val_score(
                        d, PrivateForestClassifier(schema, epsilon=1.0, **cfg.get("kw", {})), metrics.Accuracy()
                    ).get()
                    for _ in range(draws)
                ]
                print(
                    f"{label} | {name} | mean {np.mean(accs):.3f} | min {min(accs):.3f} | majority {majority[name]:.3f}"
                    f"{' | min below majority' if min(accs) < majority[name] else ''}",
                    flush=True,
                )
        finally:
            for k, v in saved.items():
                setattr(E, k, v)
    print(f"# load {os.getloadavg()[0]:.1f} at end", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
