"""Where the forest's time goes in river's loop: predict_one, learn_one and the releases, per record.

    python benchmarks/speed/river_loop_split.py > benchmarks/results/river_loop_split.log

PrivateForestClassifier() (defaults, private) on the first 20,000 records of
Agrawal (function 0, seed 42), predict then learn as ``progressive_val_score``
does, three runs; the releases (``_release``: tally, noise, merge) are timed
apart from ``learn_one``; the view's refresh after a release falls in the next
predict. Wall clock with the load average before and after (the machine is shared).
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from river import datasets  # noqa: E402

from streamdp.river import PrivateForestClassifier, kernel  # noqa: E402
from streamdp.river.schemas import agrawal_schema  # noqa: E402


def main() -> None:
    warnings.simplefilter("ignore")
    data = list(datasets.synth.Agrawal(classification_function=0, seed=42).take(20000))
    print(f"kernel built: {kernel.available()}; load average at start: {os.getloadavg()[0]:.2f}")
    for _ in range(3):
        m = PrivateForestClassifier(agrawal_schema())
        rel = [0.0]
        release = m._release

        def timed(release=release, rel=rel):
            t = time.perf_counter()
            release()
            rel[0] += time.perf_counter() - t

        m._release = timed
        tp = tl = 0.0
        for x, y in data:
            t0 = time.perf_counter()
            m.predict_one(x)
            t1 = time.perf_counter()
            m.learn_one(x, y)
            tl += time.perf_counter() - t1
            tp += t1 - t0
        n = len(data)
        print(
            f"predict_one {tp / n * 1e6:.2f} us (with the refresh after each release), learn_one "
            f"{(tl - rel[0]) / n * 1e6:.2f} us, releases {rel[0] / n * 1e6:.2f} us per record ({m.n_releases} releases)"
        )
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
