"""Short streams through the real service: `window` beside `grow` on Nursery's first N records (issue 13's floor).

A new user's trial pushed 600 Nursery records into a fresh model and fetched it: the default
``release="window"`` model predicted one class, below the majority share, where ``release="grow"``
scored well above it. This measures that setting: the first ``N`` training records of
``stream_batch_size.py``'s split (Nursery shuffled with seed 13, the last 648 held out), pushed in
batches of 100 into a model at epsilon 1 (10 trees, default height, 1 s windows), two worker
processes; accuracy of the published model on the 648 held-out records, ``--repeats`` fresh models
each. Prints a table and appends nothing: copy it into ``results/stream_small.log``.

    python benchmarks/studies/stream_small.py --repeats 3
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import sh  # noqa: E402
from benchmarks.studies.stream_batch_size import arguments, nursery_split, run_one  # noqa: E402

SIZES = (300, 600, 1200, 3000)
POLICIES = (("window", 1.0, 10, None), ("grow", 1.0, 10, None))


def main() -> int:
    args = arguments(__doc__)
    ds, train, test = nursery_split()
    majority = max(np.mean(ds.y[test] == c) for c in set(ds.y[test].tolist()))
    print(f"# benchmarks/studies/stream_small.py --repeats {args.repeats}; load at start {sh('uptime')}")
    print(f"# held-out majority share {majority:.3f}")
    print("| records | policy | accuracy: mean (min-max) | below the majority - 0.01 | releases |")
    print("|---|---|---|---|---|")
    for n in SIZES:
        for config in POLICIES:
            rows = [run_one(args.redis_url, ds, train[:n], test, 100, config) for _ in range(args.repeats)]
            acc = [r["accuracy"] for r in rows]
            below = sum(a < majority - 0.01 for a in acc)
            print(
                f"| {n:,} | {rows[0]['policy']} | {np.mean(acc):.3f} ({min(acc):.3f}-{max(acc):.3f}) | "
                f"{below} of {len(acc)} | {np.mean([r['releases'] for r in rows]):.0f} |",
                flush=True,
            )
    print(f"# load at end {sh('uptime')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
