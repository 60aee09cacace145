"""The ``streamdp`` command line."""

from __future__ import annotations

import argparse
import sys

import numpy as np


def _demo(args: argparse.Namespace) -> int:
    """Train on the bundled Congressional Votes data in batches and show accuracy per release."""
    from .datasets import load
    from .forest import PrivateForest

    ds = load("congressional-voting")
    rng = np.random.default_rng(args.shuffle_seed)
    idx = rng.permutation(len(ds.y))
    test, train = idx[:135], idx[135:]
    forest = PrivateForest.create(ds.schema, n_trees=5, height=4, epsilon=args.epsilon)
    print(f"{forest!r}\ntrain {len(train)} records in batches of {args.batch_size}, test on {len(test)}")
    for start in range(0, len(train), args.batch_size):
        b = train[start:start + args.batch_size]
        forest.update(ds.X[b], ds.y[b])
        acc = float((forest.predict(ds.X[test]) == ds.y[test]).mean())
        print(f"version {forest.version:3d}  records ~{forest.estimated_records():6.0f}  accuracy {acc:.3f}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="streamdp", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="train a private forest on a bundled dataset and print accuracy")
    d.add_argument("--epsilon", type=float, default=1.0)
    d.add_argument("--batch-size", type=int, default=50)
    d.add_argument("--shuffle-seed", type=int, default=0)
    d.set_defaults(func=_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
