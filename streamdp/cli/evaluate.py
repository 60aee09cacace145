"""Progressive (test-then-train) evaluation of the private forest beside river's trees.

``streamdp evaluate [DATASET ...]``: the command line of
:func:`streamdp.evaluate.evaluate` (the computation, the dataset specs and the
models are described there); prints one table per dataset, optionally writes
plots and a JSON file of all results.

>>> _floats("0.5, 1,inf")
[0.5, 1.0, inf]
>>> _windows("none,10")
[None, 10]
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Callable
from typing import Any

from streamdp.cli.common import Progress, int_in

__all__ = ["add_parser", "evaluate"]


def _floats(s: str) -> list[float]:
    return [math.inf if v.strip() in ("inf", "Infinity") else float(v) for v in s.split(",") if v.strip()]


def _ints(s: str) -> list[int]:
    return [int(v) for v in s.split(",") if v.strip()]


def _windows(s: str) -> list[int | None]:
    return [None if w.strip() in ("", "none", "None") else int(w) for w in s.split(",")]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``streamdp evaluate`` on an ``argparse`` subparsers object."""
    p = subparsers.add_parser(
        "evaluate",
        help="progressive validation of the private forest beside river's HoeffdingTree and ARF",
        description=__doc__.split("\n\n")[0].replace("``", ""),
    )
    p.add_argument(
        "datasets",
        nargs="*",
        default=["uci:nursery"],
        help="agrawal:F, drift, stagger:F, led, uci:NAME (default uci:nursery, the whole UCI file)",
    )
    p.add_argument(
        "--n", type=int_in(1, 10**9), default=None, help="samples per synthetic stream (default 50,000; UCI: all)"
    )
    p.add_argument("--epsilons", type=_floats, default=[0.5, 1.0, 2.0])
    p.add_argument("--batch-sizes", type=_ints, default=[100, 1000, 10000])
    p.add_argument("--n-trees", type=int, default=10)
    p.add_argument(
        "--windows",
        type=_windows,
        default=[None],
        help="sliding windows in releases for the private forest, e.g. none,10",
    )
    p.add_argument("--height", type=int, default=None)
    p.add_argument("--references", default="ht,arf", help="comma list of ht, arf (empty: none)")
    p.add_argument(
        "--window-learners",
        default="",
        help="comma list of batch learners refit per disjoint window (streamdp.river.PrivateWindowClassifier): "
        "diffp-c45, diffp-id3, sulq-id3, hanisch-forest, dpea",
    )
    p.add_argument("--window-size", type=int_in(1, 10**9), default=5000, help="records per window fit (default 5,000)")
    p.add_argument("--nominal", action="store_true", help="give river's trees the nominal attributes")
    p.add_argument("--per-record", action="store_true", help="also time the private forest through the one-record loop")
    p.add_argument("--shuffle-seed", type=int, default=0)
    p.add_argument(
        "--repeats",
        type=int_in(1, 10**6),
        default=1,
        help="fresh private models per setting (accuracy mean and sd; samples/s median)",
    )
    p.add_argument(
        "--plot",
        metavar="FILE",
        default=None,
        help="draw the learning curves (cumulative and rolling accuracy against river's trees) to this PNG; "
        "with several datasets, one file each named FILE's stem + _DATASET (needs matplotlib: pip install "
        "'streamdp[bench]')",
    )
    p.add_argument("--plot-dir", default=None, help="write one PNG per dataset here (needs matplotlib)")
    p.add_argument("--json", default=None, help="write all results to this JSON file")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars on stderr")
    p.set_defaults(func=evaluate)
    return p


def _bars(label: str, total: int) -> Callable[[int], None]:
    """A progress bar on stderr for one model's run (river's references too): ``update(done)``, closed at total."""
    bar = Progress(total, f"records {label}")

    def update(done: int) -> None:
        bar.update(done)
        if done >= total:
            bar.close()

    return update


def _plot_paths(args: argparse.Namespace, dataset: str) -> list[str]:
    """Where ``--plot`` / ``--plot-dir`` put ``dataset``'s learning curves.

    >>> _plot_paths(argparse.Namespace(plot="c.png", plot_dir=None, datasets=["agrawal:0"]), "agrawal:0")
    ['c.png']
    >>> _plot_paths(argparse.Namespace(plot="out/c.png", plot_dir=None, datasets=["a", "uci:nursery"]), "uci:nursery")
    ['out/c_uci_nursery.png']
    """
    safe = dataset.replace(":", "_").replace("/", "_")
    paths = []
    if args.plot:
        stem, ext = os.path.splitext(args.plot)
        paths.append(args.plot if len(args.datasets) == 1 else f"{stem}_{safe}{ext or '.png'}")
    if args.plot_dir:
        paths.append(os.path.join(args.plot_dir, f"river_eval_{safe}.png"))
    return paths


def evaluate(args: argparse.Namespace) -> int:
    """``streamdp evaluate``: one table per dataset on stdout (and plots, JSON); a progress bar per model's run
    on stderr (``-q``: none). Returns the exit status."""
    from streamdp.river.evaluate import check_dataset, plot
    from streamdp.river.evaluate import evaluate as run_evaluation

    for ds in args.datasets:  # every name before the first run: a typo is refused at once
        check_dataset(ds)
    results = []
    refs = tuple(r for r in args.references.split(",") if r.strip())
    for ds in args.datasets:
        res = run_evaluation(
            ds,
            n=args.n,
            epsilons=args.epsilons,
            batch_sizes=args.batch_sizes,
            n_trees=args.n_trees,
            height=args.height,
            references=refs,
            nominal=args.nominal,
            shuffle_seed=args.shuffle_seed,
            per_record=args.per_record,
            repeats=args.repeats,
            windows=args.windows,
            window_learners=tuple(w.strip() for w in args.window_learners.split(",") if w.strip()),
            window_size=args.window_size,
            progress=None if args.quiet else _bars,
        )
        print(res.table())
        print()
        for path in _plot_paths(args, ds):
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            out = plot(res, path)
            if out:
                print(f"plot: {out}")
        results.append(res.to_json())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
        print(f"results: {args.json}")
    return 0
