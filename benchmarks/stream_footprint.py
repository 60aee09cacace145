"""A release policy's footprint at height 10: the published value per release, Redis's memory, the worker's peak.

bench_worker_memory.py's schema (16 categorical attributes, 10 trees, height 10), epsilon 1, 5 s windows,
one worker process; ``BATCHES`` pushes of 10,000 records. Prints one line: seconds, releases, the
published blob (grow) or counts (window) in MiB, Redis ``used_memory`` above its start at its peak, the
worker's VmHWM. Copy it into ``results/stream_small.log``.

    python benchmarks/stream_footprint.py grow 50
    python benchmarks/stream_footprint.py window 50
"""
import sys, os, time, uuid, subprocess, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__))); sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np, redis
from bench_worker_memory import cat16, ARITIES, mem, _child_of
from streamdp.service.registry import create_model, delete_model
from streamdp.service.producer import Producer
from streamdp.service.keys import Keys
url = "redis://127.0.0.1:6379/0"; r = redis.Redis.from_url(url, socket_timeout=120)
release = sys.argv[1]; batches = int(sys.argv[2])
model = f"bench-gm-{uuid.uuid4().hex[:6]}"
f = create_model(url, model, cat16(), n_trees=10, height=10, epsilon=1.0, release=release, release_every=5.0)
keys = Keys(model)
used0 = r.info("memory")["used_memory"]
w = subprocess.Popen([sys.executable, "-m", "streamdp.cli", "--redis-url", url, "worker", model, "--processes", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
t0 = time.time()
try:
    child = _child_of(w)
    while mem(child)["VmRSS"] < (f.counts.nbytes + f.structure.arrays()["feature"].nbytes) / 2**20:
        time.sleep(0.5)
    rng = np.random.default_rng(0)
    with Producer(url, model) as p:
        for _ in range(batches):
            p.push(np.column_stack([rng.integers(a, size=10_000) for a in ARITIES]), rng.integers(2, size=10_000))
    peak_used = 0
    while True:
        peak_used = max(peak_used, r.info("memory")["used_memory"])
        if r.zcard(keys.merged) >= batches:
            last = r.zrange(keys.merged, -1, -1, withscores=True)
            if int(r.hget(keys.pub_model, "releases") or 0) >= int(last[0][1]):
                break
        assert time.time() - t0 < 600
        time.sleep(0.5)
    m = mem(child)
    blob = r.hstrlen(keys.pub_model, "blob"); counts = r.hstrlen(keys.pub_model, "counts")
    print(release, batches, "records", batches * 10000, "secs", round(time.time() - t0, 1), "releases", r.hget(keys.pub_model, "releases"),
          "pub blob MiB", round(blob / 2**20, 1), "pub counts MiB", round(counts / 2**20, 1),
          "redis used +MiB peak", round((peak_used - used0) / 2**20), "worker HWM MiB", m.get("VmHWM"), "counts MiB", round(f.counts.nbytes / 2**20))
finally:
    w.terminate(); w.wait(60); delete_model(url, model)
    for k in list(r.scan_iter(match=f"{keys.prefix}:ledger*", count=1000)): r.delete(k)
