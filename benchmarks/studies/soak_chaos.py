"""A soak with chaos, as an operator runs the service: exactly-once, takeover after SIGKILL, live/silent counts,
worker RSS and the published model's accuracy over time.

Adult, created with the CLI at its defaults (``streamdp model create soak-* --schema adult --epsilon E``), two
worker pools of one process each (``streamdp worker NAME --processes 1 -v``, separate process groups), a
held-out fifth, the rest pushed over ``--minutes`` in batches at a steady pace with idle gaps (most through
``Producer``, every ``--cli-every``-th through ``streamdp push`` of a CSV), entries of ``--entry`` records.
Every ``--kill-every`` seconds (jittered) one worker is killed with SIGKILL (its worker process alone, or its
whole process group: pool and worker), half of the time while it holds pending entries (mid-batch), and
restarted after 1-5 s; once both are killed, a batch pushed while none runs, then both restarted. Measured:
the killed consumer's pending entries at the kill and the time from the restart until none is left;
``streamdp stats`` consumers_live/consumers_silent after each kill and after each restart; each worker
process's RSS every ``--rss-every`` s; every ``--fetch-every`` s the published model's held-out accuracy
(``Consumer.latest``) and the exact counters. At the end (every window published): pushed against
records_merged, dead letters, lost_trimmed, acked_without_merge, the ledger's spends, estimated_records against
its noise; one-shot fits (``PrivateForest.create`` at the same defaults and epsilon) on the records merged at
each fetch. Writes one JSON object per line (the raw log); ``--report LOG`` renders it as tables.

    nice -n 10 python3 benchmarks/studies/soak_chaos.py --minutes 40 > benchmarks/results/soak_chaos.log
    python3 benchmarks/studies/soak_chaos.py --report benchmarks/results/soak_chaos.log
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "studies"))

import pandas as pd  # noqa: E402
import redis  # noqa: E402
from stream_over_time import ENV, URL, accuracy, cleanup, cli, published, wait  # noqa: E402

from streamdp.forest.model import PrivateForest  # noqa: E402
from streamdp.records.datasets import load  # noqa: E402
from streamdp.service.keys import GROUP, Keys  # noqa: E402
from streamdp.service.producer import Producer  # noqa: E402

T0 = time.time()


def emit(kind: str, **kv) -> None:
    print(json.dumps({"t": round(time.time() - T0, 2), "kind": kind, **kv}, default=str), flush=True)


def stats(name: str, exact: bool = False) -> dict[str, float]:
    """``streamdp stats NAME`` (``--exact``) parsed into numbers."""
    out = cli("stats", name, *(["--exact"] if exact else []))
    vals = {}
    for line in out.splitlines()[1:]:
        parts = line.split()
        if len(parts) == 2:
            try:
                vals[parts[0]] = float(parts[1])
            except ValueError:
                pass
    return vals


def rss_mib(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class Slot:
    """One worker pool (``streamdp worker NAME --processes 1``) in its own process group."""

    def __init__(self, label: str, name: str, logdir: Path):
        self.label, self.name, self.logdir = label, name, logdir
        self.p: subprocess.Popen | None = None
        self.starts = 0
        self.started_at = 0.0

    def start(self) -> None:
        self.starts += 1
        self.log = self.logdir / f"{self.label}{self.starts}.log"
        self.p = subprocess.Popen(
            [sys.executable, "-m", "streamdp.cli", "worker", self.name, "--processes", "1", "-v"],
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=open(self.log, "w"),
            start_new_session=True,
        )
        self.started_at = time.time()
        emit("start", slot=self.label, n=self.starts, pool_pid=self.p.pid)

    def child(self, timeout: float = 30.0) -> int | None:
        """The pool's worker process (its one child), waiting for it to be spawned."""
        end = time.monotonic() + timeout
        while time.monotonic() < end and self.p is not None:
            try:
                kids = Path(f"/proc/{self.p.pid}/task/{self.p.pid}/children").read_text().split()
            except OSError:
                return None
            # spawn starts a resource tracker first on some platforms: the worker is the child running _child
            for k in kids:
                try:
                    cmd = Path(f"/proc/{k}/cmdline").read_bytes()
                except OSError:
                    continue
                if b"resource_tracker" not in cmd:
                    return int(k)
            time.sleep(0.05)
        return None

    def kill(self, mode: str) -> int | None:
        """SIGKILL the worker process (``child``) or the whole group (``group``); returns the worker's pid."""
        assert self.p is not None
        kid = self.child(1.0)
        if mode == "group":
            os.killpg(self.p.pid, signal.SIGKILL)
        elif kid is not None:
            os.kill(kid, signal.SIGKILL)
        self.p.wait(30)
        if kid is not None:  # (reaped by the pool, or by init once the pool is gone)
            wait(lambda: not Path(f"/proc/{kid}").exists(), 10, "worker process gone", fatal=False)
        return kid

    def stop(self) -> None:
        if self.p is not None and self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()


def consumers(r: redis.Redis, name: str) -> dict[str, int]:
    try:
        cs = r.xinfo_consumers(Keys(name).records, GROUP)
    except redis.ResponseError:
        return {}
    return {c["name"].decode() if isinstance(c["name"], bytes) else c["name"]: int(c["pending"]) for c in cs}


def of_pid(cs: dict[str, int], pid: int | None) -> str | None:
    return next((c for c in cs if pid is not None and f"-{pid}-" in c), None)


def schedule(n: int, minutes: float, every: float, rng: random.Random) -> list[tuple[float, np.ndarray]]:
    """Push times (s from start) with idle gaps: 4 minutes of a batch every ``every`` s, then 60-120 s idle;
    the ``n`` training positions split over them in random sizes."""
    times, t = [], 5.0
    end = minutes * 60 - 240  # (the last 4 minutes: the tail publishes)
    while t < end:
        stop = min(t + 240, end)
        while t < stop:
            times.append(t)
            t += every * rng.uniform(0.6, 1.4)
        t += rng.uniform(60, 120)
    w = np.array([rng.uniform(0.3, 1.7) for _ in times])
    cuts = np.round(np.cumsum(w) / w.sum() * n).astype(int)
    bounds = np.concatenate([[0], cuts])
    return [(times[i], np.arange(bounds[i], bounds[i + 1])) for i in range(len(times))]


def run(a: argparse.Namespace) -> None:
    rng = random.Random(a.seed)
    ds = load("adult")
    perm = np.random.default_rng(a.seed).permutation(len(ds.y))
    te, tr = perm[: len(perm) // 5], perm[len(perm) // 5 :]
    name = "soak-" + uuid.uuid4().hex[:8]
    r = redis.Redis.from_url(URL)
    logdir = Path(tempfile.mkdtemp(prefix="soak-"))
    emit(
        "info",
        model=name,
        git=subprocess.getoutput("git rev-parse --short HEAD"),
        uptime=subprocess.getoutput("uptime"),
        args=vars(a),
        heldout=len(te),
        train=len(tr),
        worker_logs=str(logdir),
    )
    emit("create", out=cli("model", "create", name, "--schema", "adult", "--epsilon", str(a.epsilon)).strip())
    slots = [Slot("A", name, logdir), Slot("B", name, logdir)]
    prod = Producer(URL, name, batch_size=a.entry)
    plan = schedule(len(tr), a.minutes, a.push_every, rng)
    emit("plan", batches=len(plan), first=plan[0][0], last=plan[-1][0])
    cols = [*ds.schema.names, ds.schema.label.name]
    pushed = 0
    kills_at, t = [], a.kill_every
    while t < a.minutes * 60 - 300:
        kills_at.append(t + rng.uniform(-0.3, 0.3) * a.kill_every)
        t += a.kill_every
    both_at = kills_at[len(kills_at) // 4] if kills_at else None
    next_fetch, next_rss = a.fetch_every, 0.0
    try:
        for s in slots:
            s.start()
        wait(lambda: all(s.child(1) for s in slots), 60, "workers spawned")
        bi = 0

        def push_next(via_cli: bool) -> None:
            nonlocal bi, pushed
            _, idx = plan[bi]
            rows = tr[idx]
            if via_cli:
                f = logdir / f"batch{bi}.csv"
                pd.DataFrame(np.column_stack([ds.X[rows], ds.y[rows]]), columns=cols).to_csv(f, index=False)
                out = subprocess.run(
                    [sys.executable, "-m", "streamdp.cli", "push", name, str(f), "-q", "--batch-size", str(a.entry)],
                    env=ENV,
                    capture_output=True,
                    text=True,
                )
                if out.returncode:
                    raise RuntimeError(out.stderr)
                emit("push", batch=bi, n=len(rows), via="cli", note=" ".join((out.stdout + out.stderr).split())[:400])
            else:
                prod.push(ds.X[rows], ds.y[rows])
                emit("push", batch=bi, n=len(rows), via="producer")
            pushed += len(rows)
            bi += 1

        def checks(now: float) -> None:
            nonlocal next_fetch, next_rss
            if now >= next_rss:
                next_rss = now + a.rss_every
                for s in slots:
                    kid = s.child(0.5) if s.p and s.p.poll() is None else None
                    if kid:
                        emit(
                            "rss",
                            slot=s.label,
                            n=s.starts,
                            age=round(time.time() - s.started_at, 1),
                            worker_mib=rss_mib(kid),
                            pool_mib=rss_mib(s.p.pid),
                        )
            if now >= next_fetch:
                next_fetch = now + a.fetch_every
                st = stats(name, exact=True)
                try:
                    acc = accuracy(name, ds.X[te], ds.y[te])
                except Exception as e:  # (nothing published yet)
                    acc = None
                    emit("fetch_error", error=type(e).__name__)
                emit(
                    "fetch",
                    pushed=pushed,
                    accuracy=acc,
                    **{
                        k: st.get(k)
                        for k in (
                            "records_merged",
                            "version",
                            "estimated_records",
                            "pending",
                            "lag",
                            "dead_letters",
                            "lost_trimmed",
                            "acked_without_merge",
                            "consumers_live",
                            "consumers_silent",
                        )
                    },
                )

        def chaos(victims: list[Slot], mid: bool) -> None:
            mode = rng.choice(["child", "group"])
            cs0 = consumers(r, name)
            kids = {s.label: s.child(1) for s in victims}
            if mid:  # kill while the victim holds entries: push, then wait until it has some pending
                if bi < len(plan):
                    push_next(False)
                wait(
                    lambda: any((consumers(r, name).get(of_pid(cs0, kids[s.label])) or 0) > 0 for s in victims),
                    3,
                    "victim pending",
                    fatal=False,
                )
            cs = consumers(r, name)
            held = {s.label: cs.get(of_pid(cs, kids[s.label])) for s in victims}
            t_kill = time.time()
            for s in victims:
                s.kill(mode)
            emit("kill", slots=[s.label for s in victims], mode=mode, mid=mid, pids=kids, pending_at_kill=held)
            st = stats(name)
            emit(
                "stats_after_kill",
                live=st.get("consumers_live"),
                silent=st.get("consumers_silent"),
                consumers=st.get("consumers"),
                expect_live=2 - len(victims),
                expect_silent=len(victims),
            )
            if len(victims) == 2 and bi < len(plan):  # a push while no worker runs: the CLI's note
                push_next(True)
            time.sleep(rng.uniform(1, 5))
            t_restart = time.time()
            for s in victims:
                s.start()
            gone = [of_pid(cs, kids[s.label]) for s in victims]
            # taken over: the gone consumer's entries merged and the consumer removed from the group
            done = wait(lambda: not any(g in consumers(r, name) for g in gone if g), 120, "takeover", fatal=False)
            t_done = time.time()
            st = stats(name)
            wait(lambda: stats(name).get("consumers_live") == 2, 60, "live 2", fatal=False)
            st2 = stats(name)
            emit(
                "restart",
                at=round(t_restart, 3),
                gone=gone,
                slots=[s.label for s in victims],
                down_s=round(t_restart - t_kill, 2),
                taken_over=done,
                takeover_s=round(t_done - t_restart, 2),
                pending_at_kill=held,
                live_at_takeover=st.get("consumers_live"),
                silent_at_takeover=st.get("consumers_silent"),
                live_later=st2.get("consumers_live"),
                silent_later=st2.get("consumers_silent"),
                later_s=round(time.time() - t_restart, 2),
            )

        ki = 0
        while bi < len(plan) or ki < len(kills_at):
            now = time.time() - T0
            if bi < len(plan) and now >= plan[bi][0]:
                push_next(a.cli_every > 0 and bi % a.cli_every == a.cli_every - 1)
            elif ki < len(kills_at) and now >= kills_at[ki]:
                if kills_at[ki] == both_at:
                    chaos(slots, mid=True)
                else:  # mostly B: A lives long (its RSS over the run)
                    chaos([rng.choices(slots, weights=[1, 3])[0]], mid=rng.random() < 0.5)
                ki += 1
            else:
                checks(now)
                time.sleep(0.2)
        emit("pushed_all", pushed=pushed)
        while time.time() - T0 < a.minutes * 60 or not published(r, name):
            checks(time.time() - T0)
            time.sleep(0.5)
            if time.time() - T0 > a.minutes * 60 + 900:
                emit("not_published")
                break
        next_fetch = 0
        checks(time.time() - T0)
        st = stats(name, exact=True)
        emit(
            "final",
            pushed=pushed,
            stats=st,
            show=cli("model", "show", name),
            ledger=cli("ledger", name),
            releases_merged=int(r.hget(Keys(name).pub_model, "releases") or 0),
        )
        for s in slots:
            s.stop()
        events = []
        for f in sorted(logdir.glob("*.log")):
            for line in f.read_text().splitlines():
                if any(
                    e in line
                    for e in (
                        '"worker.pool_start"',
                        '"holder": "gone"',
                        "process_died",
                        "pool_gone",
                        "ERROR",
                        "dead_letter",
                        "lost",
                    )
                ):
                    events.append({"log": f.name, "line": line[:600]})
        emit("worker_events", events=events)
        # one-shot fits on the records merged at each fetch (in push order), the same defaults and epsilon
        emit("oneshot_begin")
        for n in sorted({int(x) for x in a.oneshot_sizes} | {len(tr)}):
            accs = []
            for d in range(a.oneshot_draws):
                f = PrivateForest.create(ds.schema, epsilon=a.epsilon)
                f.fit(ds.X[tr[:n]], ds.y[tr[:n]])
                accs.append(float(np.mean(f.predict(ds.X[te]) == ds.y[te])))
            emit("oneshot", n=n, accuracy=accs)
    finally:
        for s in slots:
            s.stop()
        cleanup(r, name)
        emit(
            "cleanup",
            left=[k.decode() for k in r.scan_iter(match=f"*{name}*", count=1000)],
            uptime=subprocess.getoutput("uptime"),
        )


def report(path: str) -> str:
    """Markdown tables of one raw log."""
    ev = [json.loads(x) for x in open(path) if x.startswith("{")]
    by = lambda k: [e for e in ev if e["kind"] == k]  # noqa: E731
    info, final = by("info")[0], by("final")[0]
    st = final["stats"]
    out = [
        f"model {info['model']}, git {info['git']}; load at start: {info['uptime'].strip()}; at end: "
        f"{by('cleanup')[0]['uptime'].strip() if by('cleanup') else '?'}",
        "",
    ]
    out += ["## Exactly once", "", "| figure | value |", "|---|---|"]
    out.append(f"| records pushed (batches) | {final['pushed']} ({len(by('push'))}) |")
    for k in (
        "records_merged",
        "entries_read",
        "batches_merged",
        "claimed",
        "dead_letters",
        "dead_letter_length",
        "acked_without_merge",
        "poison",
        "lost_trimmed",
        "deleted_undelivered",
        "commit_rejections",
        "pending",
        "lag",
        "stream_length",
        "version",
        "estimated_records",
    ):
        out.append(f"| {k} | {st.get(k)} |")
    sd = next((float(x.split()[3].replace(",", "")) for x in final["show"].splitlines() if "noise now" in x), None)
    if sd:
        z = (st["estimated_records"] - final["pushed"]) / (sd * 2**0.5)
        out.append(f"| estimated_records - pushed, in sd of the estimate (per class sd {sd:g}, x sqrt 2) | {z:+.2f} |")
    spends = [x for x in final["ledger"].splitlines() if x.strip().startswith("spends")]
    out.append(f"| ledger | {' '.join(spends[0].split()) if spends else '?'} |")
    out.append(f"| releases merged | {final['releases_merged']} |")
    logs: dict[str, list[dict]] = {}
    for w in by("worker_events")[0]["events"] if by("worker_events") else []:
        logs.setdefault(w["log"], []).append(json.loads(w["line"]))
    out += [
        "",
        "## Kills",
        "",
        "| t (s) | killed | SIGKILL to | mid-batch | entries pending at the kill | stats "
        "live/silent after the kill (expected) | down (s) | restart to gone consumer removed (s) | restart to "
        "pool_start / claimed holder=gone (s) | live/silent then | live/silent later (s after restart) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    starts = by("start")
    for k, sa, rs in zip(by("kill"), by("stats_after_kill"), by("restart")):
        lat = []
        for slot in rs["slots"]:
            n = max(e["n"] for e in starts if e["slot"] == slot and e["t"] <= rs["t"])
            lines = logs.get(f"{slot}{n}.log", [])
            ps = [x["ts"] for x in lines if x.get("event") == "worker.pool_start"]
            cl = [x["ts"] for x in lines if x.get("holder") == "gone"]
            lat.append(f"{slot}: {ps[0] - rs['at']:.2f} / " + (f"{cl[0] - rs['at']:.2f}" if cl else "none"))
        out.append(
            f"| {k['t']:.0f} | {','.join(k['slots'])} | {k['mode']} | {k['mid']} | {k['pending_at_kill']} | "
            f"{sa['live']:g}/{sa['silent']:g} ({sa['expect_live']}/{sa['expect_silent']}) | {rs['down_s']} | "
            f"{rs['takeover_s'] if rs['taken_over'] else 'NOT'} | {'; '.join(lat)} | "
            f"{rs['live_at_takeover']:g}/{rs['silent_at_takeover']:g} | {rs['live_later']:g}/{rs['silent_later']:g} "
            f"({rs['later_s']}) |"
        )
    out += [
        "",
        "## Worker RSS (MiB, the worker process; each start its own life)",
        "",
        "| worker | samples | age span (s) | RSS at 60 s | RSS last | max | slope after 60 s (MiB/h) |",
        "|---|---|---|---|---|---|---|",
    ]
    lives: dict[str, list[dict]] = {}
    for e in by("rss"):
        if e["worker_mib"]:
            lives.setdefault(f"{e['slot']}{e['n']}", []).append(e)
    for w, xs in lives.items():
        late = [x for x in xs if x["age"] >= 60]
        slope = (
            np.polyfit([x["age"] for x in late], [x["worker_mib"] for x in late], 1)[0] * 3600
            if len(late) >= 3
            else float("nan")
        )
        out.append(
            f"| {w} | {len(xs)} | {xs[0]['age']:.0f}-{xs[-1]['age']:.0f} | "
            f"{late[0]['worker_mib']:.1f} | {xs[-1]['worker_mib']:.1f} | {max(x['worker_mib'] for x in xs):.1f} "
            f"| {slope:+.1f} |"
            if late
            else f"| {w} | {len(xs)} | {xs[0]['age']:.0f}-{xs[-1]['age']:.0f} | - "
            f"| {xs[-1]['worker_mib']:.1f} | {max(x['worker_mib'] for x in xs):.1f} | - |"
        )
    out += [
        "",
        "## Held-out accuracy of the published model over time",
        "",
        "| t (s) | pushed | records_merged | version | estimated_records | accuracy | live/silent |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in by("fetch"):
        acc = "-" if f["accuracy"] is None else f"{f['accuracy']:.4f}"
        out.append(
            f"| {f['t']:.0f} | {f['pushed']} | {f['records_merged']:g} | {f['version']:g} | "
            f"{f['estimated_records'] or 0:.0f} | {acc} | {f['consumers_live']:g}/{f['consumers_silent']:g} |"
        )
    out += [
        "",
        "One-shot fits (`PrivateForest.create(schema, epsilon=E).fit`, the first n pushed records):",
        "",
        "| n | accuracy per draw | mean |",
        "|---|---|---|",
    ]
    for o in by("oneshot"):
        out.append(f"| {o['n']} | {' '.join(f'{x:.4f}' for x in o['accuracy'])} | {np.mean(o['accuracy']):.4f} |")
    notes = [p["note"] for p in by("push") if p.get("via") == "cli"]
    out += ["", "`streamdp push` output (each CLI push, in order):", ""] + [f"- {n}" for n in notes]
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=40)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--push-every", type=float, default=12.0)
    ap.add_argument("--entry", type=int, default=50, help="records per stream entry")
    ap.add_argument("--cli-every", type=int, default=5)
    ap.add_argument("--kill-every", type=float, default=180.0)
    ap.add_argument("--fetch-every", type=float, default=180.0)
    ap.add_argument("--rss-every", type=float, default=30.0)
    ap.add_argument("--oneshot-sizes", nargs="*", default=[2000, 5000, 10000, 20000, 30000])
    ap.add_argument("--oneshot-draws", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--report", default=None, help="render this raw log as markdown instead")
    a = ap.parse_args()
    if a.report:
        print(report(a.report))
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # (stopped: the finally clause cleans up)
    run(a)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
