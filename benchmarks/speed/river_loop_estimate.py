"""CPU time per record of the river loop (predict_one + learn_one, PrivateForestClassifier at its defaults) on
3,000 Agrawal (two classes) and LED (ten classes) records, best of three: run with PYTHONPATH at a checkout,
with and without ``STREAMDP_NO_KERNEL=1``, to compare the estimate's cost between checkouts in one session.

    PYTHONPATH=. python benchmarks/speed/river_loop_estimate.py
"""

import itertools, time, warnings, sys
warnings.simplefilter("ignore")
from river import datasets
from streamdp.river import PrivateForestClassifier
from streamdp.river.schemas import agrawal_schema, led_schema
for nm, gen, sch in (("agrawal", datasets.synth.Agrawal(seed=42), agrawal_schema()), ("led", datasets.synth.LED(seed=1), led_schema())):
    stream = list(itertools.islice(gen, 3000))
    best = 1e9
    for _ in range(3):
        m = PrivateForestClassifier(sch)
        t = time.process_time()
        for x, y in stream:
            m.predict_one(x); m.learn_one(x, y)
        best = min(best, time.process_time() - t)
    print(nm, f"{best*1e6/3000:.1f} us/record")
