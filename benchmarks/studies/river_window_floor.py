"""Where PrivateWindowClassifier wins or loses records against the running majority (issue 15's floor), by stream
period: its first 100 records (the uniform prediction before the first window), records 100-1,500 (the first
windows, 100-800 records each), and the rest. Defaults, epsilon 1, 3 private draws per stream.

    python benchmarks/studies/river_window_floor.py > benchmarks/results/river_window_floor.log
"""

import itertools
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
warnings.simplefilter("ignore")
from river import dummy

from benchmarks.studies.river_eval import streams
from streamdp.river import PrivateWindowClassifier
from streamdp.river.schemas import schema_for

for name, ds in streams(10000).items():
    if name not in ("Bananas", "Shuttle", "Agrawal f0", "Agrawal f0->f2 drift"):
        continue
    data = list(itertools.islice(ds, 10000))
    schema = schema_for(ds)
    for draw in range(3):
        m = PrivateWindowClassifier(schema, epsilon=1.0)
        maj = dummy.PriorClassifier()
        hit_m = []
        hit_p = []
        for x, y in data:
            hit_m.append(m.predict_one(x) == y)
            hit_p.append(maj.predict_one(x) == y)
            m.learn_one(x, y)
            maj.learn_one(x, y)
        hm, hp = np.array(hit_m), np.array(hit_p)
        print(
            name,
            draw,
            "all",
            round(hm.mean() - hp.mean(), 4),
            "first100",
            int(hm[:100].sum() - hp[:100].sum()),
            "100-1500",
            int(hm[100:1500].sum() - hp[100:1500].sum()),
            "after1500",
            int(hm[1500:].sum() - hp[1500:].sum()),
            flush=True,
        )
