"""The lowest whole-process peak a stream worker of this design can have, beside worker_memory.md's measured one
(issue 14's "a worker's peak at most about 2x the counts it holds").

A worker routes records (it needs the structure's ``feature``, ``child`` and ``leaf`` arrays), knows which
cells are real (``PrivateForest.real_cells``, one byte a cell, kept by the window closer) and makes releases
(a release holds the counts it publishes and the tally it noises: two counts-sized arrays, since the noised
tally is stored whole before it is merged). So no worker process of this design peaks below the interpreter
with numpy, redis-py and streamdp imported, plus the structure routing needs, plus the real-cell mask, plus 2x
the counts. This script measures each term for bench_worker_memory.py's model (16 categorical attributes of 3-5
values, 10 trees and a prior stump, two classes) at ``--heights`` and prints the floor as a multiple of the
counts, in a fresh interpreter per height (RSS from /proc).

    python benchmarks/speed/worker_memory_floor.py > benchmarks/results/worker_memory_floor.log
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import sys
sys.path.insert(0, {root!r})
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) * 1024
import numpy, redis, streamdp, streamdp.service.stream_worker  # what a worker imports
base = rss()
from benchmarks.speed.bench_worker_memory import cat16
from streamdp.forest.structure import ForestStructure
s = ForestStructure.draw(cat16(), n_trees=11, height={h}, seed=1)  # 10 trees and the stump's row
routing = s.feature.nbytes + s.child.nbytes + s.leaf.nbytes
counts = s.n_trees * s.max_leaves * 2 * 8  # int64, two classes
print(base, routing + counts // 8, counts)  # the real-cell mask: a bool per cell
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heights", type=int, nargs="+", default=[8, 9, 10])
    a = ap.parse_args()
    mib = 2**20
    print(
        f"# python benchmarks/speed/worker_memory_floor.py --heights {' '.join(map(str, a.heights))}; load "
        f"{subprocess.getoutput('uptime')}"
    )
    print(
        "| height | counts | interpreter and imports | structure routing needs and the real-cell mask "
        "| floor: interpreter + structure + 2x counts | floor / counts |"
    )
    print("|---|---|---|---|---|---|")
    for h in a.heights:
        out = subprocess.run(
            [sys.executable, "-c", CHILD.format(root=str(ROOT), h=h)], capture_output=True, text=True, check=True
        ).stdout.split()
        base, routing, counts = map(int, out)
        floor = base + routing + 2 * counts
        print(
            f"| {h} | {counts / mib:.0f} MiB | {base / mib:.0f} MiB ({base / counts:.2f}x) | {routing / mib:.0f} MiB "
            f"({routing / counts:.2f}x) | {floor / mib:.0f} MiB | {floor / counts:.2f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
