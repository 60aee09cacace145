"""A worker started late: its missed windows' noise against the records it finds waiting (issue 13).

Votes (all-categorical: the default ``grow`` release, epsilon 1, 1 s windows) is created, 300 shuffled records
are pushed at once, and one worker (the service's ``Worker`` and ``WindowCloser``, on fakeredis; the clock is
the schedule's, set explicitly) releases them (a) on time: the records' window, then nothing else due;
(b) on time, then idle: the same, then ``--missed`` empty windows; (c) late: a worker started ``--missed``
windows after the push (it releases the missed, empty windows, then adds the waiting records). Accuracy on the
other 135 records, against their majority share; ``--draws`` shuffles, each a fresh model. ``z``: how many
standard deviations of the released prior's noise (every tree's root pooled by inverse variance, as
estimation pools them; ``streamdp model show`` prints the stumps' alone, an upper bound) separate the training
records' top two class counts (the analysis reads the true counts, the model never does): below about 3 no estimate can reliably name the majority class
(``stream_floor_identifiable.py``).

    python benchmarks/studies/late_worker.py > benchmarks/results/late_worker.log
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import fakeredis  # noqa: E402

from streamdp.records.datasets import load  # noqa: E402
from streamdp.service.consumer import Consumer  # noqa: E402
from streamdp.service.producer import Producer  # noqa: E402
from streamdp.service.registry import create_model, load_policy  # noqa: E402
from streamdp.service.stream_worker import Worker  # noqa: E402

CASES = ("on time", "on time, then idle", "late")


def run(case: str, missed: int, seed: int) -> tuple[float, float, int, float, bool]:
    """Held-out accuracy, its majority share, the releases of one model, z of its released prior and whether
    that prior names another class than the training records' majority."""
    ds = load("congressional-voting")
    idx = np.random.default_rng(seed).permutation(len(ds.y))
    te, tr = idx[:135], idx[135:]
    r = fakeredis.FakeRedis(server=fakeredis.FakeServer(), version=(7, 0))
    create_model(r, "m", ds.schema, epsilon=1.0, release_every=1.0)
    Producer(r, "m").push(ds.X[tr], ds.y[tr])
    w = Worker(r, "m", block_ms=1)
    start = load_policy(r, "m")[1]
    w.closer.now = lambda: start + (missed + 0.5 if case == "late" else 0.5)  # (a step ticks first, then reads)
    while w.step(block_ms=1):
        pass
    w.closer.tick(start + (1.5 if case == "on time" else missed + 1.5))
    f = Consumer(r, "m").latest()
    majority = max(float(np.mean(ds.y[te] == c)) for c in set(ds.y))
    top = sorted((int(np.sum(ds.y[tr] == c)) for c in set(ds.y)), reverse=True)
    # the prior's noise as the model pools it: every tree's root (stump included), inverse-variance weighted
    # (estimation.forest_prior); class_total_sd, the stumps' alone, is its upper bound
    sd = float(np.sqrt(1.0 / np.sum(1.0 / f.node_variance[:, 0])))
    z = (top[0] - top[1]) / (np.sqrt(2) * sd)
    wrong = ds.schema.label.values[int(np.argmax(f.prior()))] != max(set(ds.y), key=lambda c: np.sum(ds.y[tr] == c))
    return float(np.mean(f.predict(ds.X[te]) == ds.y[te])), majority, f.n_releases, z, wrong


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--missed", type=int, default=46)
    ap.add_argument("--draws", type=int, default=100)
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    print(
        f"# python benchmarks/studies/late_worker.py --missed {a.missed} --draws {a.draws}; git "
        f"{subprocess.getoutput('git rev-parse --short HEAD')}; load at start: {subprocess.getoutput('uptime')}"
    )
    print(
        "| case | releases | z of the released prior | accuracy per draw | mean | draws at or below the majority + 0.01 "
        "| below the majority - 0.01 | wrong priors | expected wrong priors, sum of Phi(-z) |",
        "|---|---|---|---|---|---|---|---|---|",
        sep="\n",
    )
    for case in CASES:
        runs = [run(case, a.missed, s) for s in range(a.draws)]
        accs = [x[0] for x in runs]
        low = sum(acc <= maj + 0.01 for acc, maj, *_ in runs)
        below = sum(acc < maj - 0.01 for acc, maj, *_ in runs)
        wrong = sum(x[4] for x in runs)
        zs = [x[3] for x in runs]
        print(
            f"| {case} | {runs[0][2]} | {min(zs):.1f}-{max(zs):.1f} | {' '.join(f'{x:.3f}' for x in accs)} | "
            f"{np.mean(accs):.3f} | {low} of {a.draws} | {below} of {a.draws} | {wrong} of {a.draws} | "
            f"{sum(0.5 * math.erfc(z / math.sqrt(2)) for z in zs):.1f} |",
            flush=True,
        )
    maj = [run("on time", 1, s)[1] for s in range(a.draws)]
    print(
        f"\n# held-out majority per draw: {' '.join(f'{m:.3f}' for m in maj)}; load at end: "
        f"{subprocess.getoutput('uptime')}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
