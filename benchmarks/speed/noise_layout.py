"""One window release's noise at height 10: the "blocks" layout beside the older "stream" layout, same run.

A window close noises the window's exact tally in place (:func:`streamdp.release.continual.noisy_node`, keyed as
the service draws it). "stream" (models created before the layout existed) draws one keyed stream in chunks
of 2^20 cells; "blocks" draws each 2^16-cell block from its own child generator, so no chunk size is part of
the draw. Times (median of ``--repeat``, the layouts interleaved) and the traced peak above the tally, in
units of the counts. bench_worker_memory.py's schema (16 categorical attributes, 10 trees), epsilon 1.

    python benchmarks/speed/noise_layout.py --height 10 --repeat 11
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import machine, sh, write_results  # noqa: E402
from benchmarks.speed.bench_worker_memory import cat16  # noqa: E402
from streamdp import PrivateForest  # noqa: E402
from streamdp.privacy.secure_random import LAYOUTS, SecureRandom  # noqa: E402
from streamdp.release.continual import noisy_node  # noqa: E402


def release(tally: np.ndarray, real: np.ndarray, layout: str, key: bytes, w: int) -> np.ndarray:
    """What the closer does with the window's exact tally: noise it in place."""
    return noisy_node(
        tally, 1.0, "geometric", SecureRandom.from_key(key, b"bench/window/%d" % w, layout), real, in_place=True
    )


def tally(shape: tuple) -> np.ndarray:
    return np.full(shape, 0, np.int64)  # written: its pages are mapped before the timing starts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--height", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=11)
    a = ap.parse_args()
    up0 = sh("uptime")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = PrivateForest.create(cat16(), n_trees=10, height=a.height, epsilon=1.0, seed=1)
    shape, real = f.shape, f.real_cells
    counts = f.counts.nbytes
    del f
    key = os.urandom(32)
    times: dict[str, list[float]] = {lay: [] for lay in LAYOUTS}
    for rep in range(a.repeat):
        for lay in LAYOUTS:
            x = tally(shape)
            t = time.perf_counter()
            release(x, real, lay, key, rep)
            times[lay].append(time.perf_counter() - t)
            del x
    peaks = {}
    for lay in LAYOUTS:
        x = tally(shape)
        tracemalloc.start()
        release(x, real, lay, key, 99)
        peaks[lay] = tracemalloc.get_traced_memory()[1] / counts
        tracemalloc.stop()
        del x
    up1 = sh("uptime")
    cells = int(np.prod(shape))
    rows = [
        {
            "layout": lay,
            "height": a.height,
            "cells": cells,
            "real_cells": int(real.sum()),
            "median_s": statistics.median(times[lay]),
            "times_s": times[lay],
            "peak_above_tally": peaks[lay],
        }
        for lay in LAYOUTS
    ]
    ratio = rows[1]["median_s"] / rows[0]["median_s"]
    lines = [
        "# One window release's noise: layout 'blocks' beside 'stream' (benchmarks/speed/noise_layout.py)",
        "",
        f"Height {a.height}, 10 trees, 16 categorical attributes: {cells:,} cells ({int(real.sum()):,} real), "
        f"counts {counts / 2**20:.0f} MiB; keyed noise drawn into the window's tally in place, as the closer "
        f"does; median of {a.repeat}, layouts interleaved. Peak: tracemalloc's peak above the tally, in counts.",
        "",
        f"Machine: {machine()['nproc']} x {machine()['cpu']}. Load: before `{up0}`; after `{up1}`.",
        "",
        "| layout | median s | M real cells/s | peak above the tally / counts |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['layout']} | {r['median_s']:.2f} | {r['real_cells'] / r['median_s'] / 1e6:.1f} | "
        f"{r['peak_above_tally']:.3f} |"
        for r in rows
    ]
    lines += ["", f"'stream' / 'blocks' time: {ratio:.2f}.", ""]
    write_results("noise_layout", {"machine": machine(), "uptime_start": up0, "uptime_end": up1}, rows, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
