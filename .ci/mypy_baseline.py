"""Run mypy over streamdp and compare its errors per file with the committed baseline.

The files in ``CLEAN`` (growing to the whole pure core: every package but river, service and
cli) must be clean; elsewhere a file may have no more errors than ``.ci/mypy-baseline.txt`` lists for it.
``--update`` rewrites the baseline (only ever to shrink it: commit the smaller one).
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
from pathlib import Path

BASELINE = Path(__file__).with_name("mypy-baseline.txt")
OUTSIDE_CORE = ("streamdp/river/", "streamdp/service/", "streamdp/cli/")
#: Files and packages already clean: they must stay at zero (the list grows until it is the whole core, then beyond).
CLEAN = (
    "streamdp/validation.py",
    "streamdp/options.py",
    "streamdp/blob.py",
    "streamdp/privacy/",
    "streamdp/records/coding.py",
    "streamdp/records/datasets.py",
    "streamdp/release/__init__.py",
    "streamdp/forest/__init__.py",
    "streamdp/forest/draw.py",
    "streamdp/forest/growth.py",
    "streamdp/forest/pruning.py",
    "streamdp/forest/routing.py",
    "streamdp/forest/tally.py",
    "streamdp/learners/__init__.py",
    "streamdp/learners/_base.py",
    "streamdp/learners/branch.py",
    "streamdp/learners/c45.py",
    "streamdp/learners/catalogue.py",
    "streamdp/learners/dpea.py",
    "streamdp/learners/hanisch.py",
    "streamdp/learners/id3.py",
    "streamdp/learners/private_subtree.py",
    "streamdp/learners/scorers.py",
    "streamdp/learners/tree.py",
    "streamdp/jobs/",
    "streamdp/river/encoding.py",
    "streamdp/river/evaluate.py",
    "streamdp/river/forest.py",
    "streamdp/river/forest_view.py",
    "streamdp/river/kernel.py",
    "streamdp/river/window.py",
    "streamdp/estimation/",
    "streamdp/records/",
    "streamdp/forest/model.py",
    "streamdp/forest/persistence.py",
    "streamdp/forest/releasing.py",
    "streamdp/forest/growing.py",
    "streamdp/forest/voting.py",
    "streamdp/learners/private_data.py",
    "streamdp/learners/private_budget.py",
)


def counts() -> collections.Counter[str]:
    out = subprocess.run([sys.executable, "-m", "mypy"], capture_output=True, text=True).stdout
    found = collections.Counter(m.group(1) for m in re.finditer(r"^(streamdp/\S+\.py):\d+: error:", out, re.M))
    if not found and "Success" not in out and "Found" not in out:
        sys.exit(f"mypy did not run:\n{out}")
    return found


def main() -> int:
    now = counts()
    if "--update" in sys.argv:
        BASELINE.write_text("".join(f"{f} {n}\n" for f, n in sorted(now.items())))
        print(f"baseline: {sum(now.values())} errors in {len(now)} files")
        return 0
    base = {f: int(n) for f, n in (line.split() for line in BASELINE.read_text().splitlines() if line.strip())}
    bad = [f"{f}: {n} errors (clean: must be 0)" for f, n in now.items() if f.startswith(CLEAN)]
    bad += [f"{f}: {n} errors (baseline {base.get(f, 0)})" for f, n in now.items() if n > base.get(f, 0)]
    print(f"mypy: {sum(now.values())} errors, baseline {sum(base.values())}")
    for line in bad:
        print("  " + line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
