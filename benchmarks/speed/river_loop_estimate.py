"""CPU time per record of the river loop (predict_one + learn_one, PrivateForestClassifier at its defaults) on
3,000 Agrawal (two classes) and LED (ten classes) records, best of three: run with PYTHONPATH at a checkout,
with and without ``STREAMDP_NO_KERNEL=1``, to compare the estimate's cost between checkouts in one session.

    PYTHONPATH=. python benchmarks/speed/river_loop_estimate.py
"""

import itertools
import time
import warnings

from river import datasets

from streamdp.river import PrivateForestClassifier
from streamdp.river.schemas import agrawal_schema, led_schema


def main() -> None:
    warnings.simplefilter("ignore")
    streams = (
        ("agrawal", datasets.synth.Agrawal(seed=42), agrawal_schema()),
        ("led", datasets.synth.LED(seed=1), led_schema()),
    )
    for name, gen, schema in streams:
        stream = list(itertools.islice(gen, 3000))
        best = float("inf")
        for _ in range(3):
            model = PrivateForestClassifier(schema)
            t = time.process_time()
            for x, y in stream:
                model.predict_one(x)
                model.learn_one(x, y)
            best = min(best, time.process_time() - t)
        print(name, f"{best * 1e6 / len(stream):.1f} us/record")


if __name__ == "__main__":
    main()
