"""The ``streamdp`` command line.

``streamdp demo`` runs the whole service on the bundled Congressional Voting
data (starting an embedded Redis if none is reachable). ``REDIS_URL`` (default
``redis://localhost:6379/0``) selects the server; credentials and TLS go in
the URL (``rediss://user:password@host:port/0``).
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from typing import Any

import numpy as np


def _url(args: argparse.Namespace) -> str:
    from .service.embedded import DEFAULT_URL

    return args.redis_url or os.environ.get("REDIS_URL") or DEFAULT_URL


def redact(url: str) -> str:
    """The URL with its password masked (for messages and logs)."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        u = urlsplit(url)
        if u.password is None:
            return url
        host = (u.hostname or "") + (f":{u.port}" if u.port else "")
        user = f"{u.username}:***@" if u.username else ":***@"
        return urlunsplit((u.scheme, user + host, u.path, u.query, u.fragment))
    except ValueError:
        return "<unparsable URL>"


def _client(args: argparse.Namespace):
    import redis

    return redis.Redis.from_url(_url(args))


class Progress:
    """A plain progress bar on stderr (no dependency)."""

    def __init__(self, total: int, what: str = "records", stream=None):
        self.total, self.what, self.stream = max(total, 1), what, stream or sys.stderr
        self.t0 = time.monotonic()
        self.tty = self.stream.isatty()
        self._last = -1.0

    def update(self, done: int) -> None:
        now = time.monotonic()
        if done < self.total and now - self._last < (0.1 if self.tty else 2.0):
            return
        self._last = now
        frac = min(1.0, done / self.total)
        bar = "#" * int(frac * 30)
        rate = done / max(now - self.t0, 1e-9)
        line = f"[{bar:<30}] {frac:6.1%} {done:,}/{self.total:,} {self.what} {rate:,.0f}/s"
        self.stream.write(("\r" + line) if self.tty else line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


# -- model ---------------------------------------------------------------------------
def _model_create(args: argparse.Namespace) -> int:
    from .schema import Schema
    from .service.registry import create_model

    schema = Schema.from_json(args.schema)
    forest = create_model(_client(args), args.name, schema, n_trees=args.trees, height=args.height,
                          epsilon=args.epsilon, mechanism=args.mechanism, k=args.k, beta=args.beta, seed=args.seed,
                          budget=args.budget, vote=args.vote, ledger_budget=args.ledger_budget)
    print(f"created model {args.name!r}: {forest!r}, {forest.structure.max_leaves} leaves per tree")
    if not forest.private:
        print("warning: this model is NOT private (infinite epsilon)", file=sys.stderr)
    return 0


def _model_list(args: argparse.Namespace) -> int:
    from .service.registry import list_models

    models = list_models(_client(args))
    if not models:
        print("no models")
    for name, s in models.items():
        print(f"{name}\ttrees={s.get('n_trees')} height={s.get('height')} mechanism={s.get('mechanism')} "
              f"epsilon={s.get('epsilon')} delta={s.get('delta', 0):.3g}")
    return 0


def _model_show(args: argparse.Namespace) -> int:
    from .service.registry import show_model

    info = show_model(_client(args), args.name)
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    last = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(info["last_update"])) if info["last_update"] else "-"
    print(f"model {info['name']}\n"
          f"  version         {info['version']}\n"
          f"  epsilon, delta  {info['epsilon']}, {info['delta']:.3g} ({info['mechanism']}, budget {info['budget']})\n"
          f"  forest          {info['n_trees']} trees, height {info['height']}, {info['max_leaves']} leaves max, "
          f"{info['n_classes']} classes\n"
          f"  batches merged  {info['batches_merged']}\n"
          f"  last update     {last}")
    return 0


def _model_get(args: argparse.Namespace) -> int:
    from .service.consumer import Consumer
    from .service.keys import Keys

    r = _client(args)
    fmt = r.hget(Keys(args.name).pub_model, "format")
    if fmt is not None and fmt != b"streamdp.forest":  # a batch job's model: one version, any learner
        if args.version not in (None, 1):
            raise SystemExit(f"{args.name!r} is a batch job's model: it has version 1 only")
        from .service.job_queue import fetch_model

        f = fetch_model(r, args.name)
        data = f.to_bytes()
    else:
        with Consumer(_url(args), args.name) as c:
            f = c.latest() if args.version is None else c.get(args.version)
            data = f.to_bytes()
    with open(args.output, "wb") as fh:
        fh.write(data)
    print(f"wrote {f!r} to {args.output} ({len(data):,} bytes)")
    return 0


def _model_delete(args: argparse.Namespace) -> int:
    from .service.registry import delete_model

    n = delete_model(_client(args), args.name)
    print(f"deleted model {args.name!r} ({n} keys)")
    return 0


# -- push ----------------------------------------------------------------------------
def _read_csv(path: str, schema, label: str | None, header: bool):
    from .sources import parse_row

    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    if header:
        if not rows:
            raise SystemExit(f"{path}: empty file")
        head, rows = [h.strip() for h in rows[0]], rows[1:]
        label = label or schema.label.name
        if label not in head:
            raise SystemExit(f"{path}: no label column {label!r} (columns: {head})")
        missing = [n for n in schema.names if n not in head]
        if missing:
            raise SystemExit(f"{path}: missing attribute columns {missing}")
        cols = [head.index(n) for n in schema.names]
        li = head.index(label)
    else:
        li = int(label) if label is not None else 0
        n = schema.n_attributes + 1
        cols = [j for j in range(n) if j != (li % n)]
    X, y = [], []
    for r in rows:
        if not r or all(not c.strip() for c in r):
            continue
        rec, lab = parse_row(schema, r, cols, li)
        X.append(rec)
        y.append(lab)
    return X, y


def _push(args: argparse.Namespace) -> int:
    from .service import codec
    from .service.producer import Producer

    with Producer(_url(args), args.name, batch_size=args.batch_size, on_invalid="dead-letter") as p:
        X, y = _read_csv(args.file, p.schema, args.label, not args.no_header)
        bar = Progress(len(X)) if not args.quiet else None
        bad = 0
        sent = 0
        for s in range(0, len(X), args.batch_size):
            xs, ys = X[s:s + args.batch_size], y[s:s + args.batch_size]
            env = codec.encode_batch(p.schema, np.array(xs, dtype=object).reshape(len(xs), -1), ys,
                                     on_invalid="dead-letter")
            bad += len(codec.decode(p.schema, env).dropped)
            p.push_raw(env)
            sent += len(xs)
            if bar:
                bar.update(sent)
        if bar:
            bar.close()
    print(f"pushed {sent:,} records in {math.ceil(sent / args.batch_size)} batches to {args.name!r}"
          + (f"; {bad} invalid records go to the dead-letter stream" if bad else ""))
    return 0


# -- worker / stats --------------------------------------------------------------------
def _worker(args: argparse.Namespace) -> int:
    from .service.pool import run_workers

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    cfg = {"batch_entries": args.batch_entries, "claim_idle_ms": args.claim_idle_ms,
           "max_deliveries": args.max_deliveries, "block_ms": args.block_ms}
    codes = run_workers(args.name, args.processes, _url(args), until_drained=args.until_drained,
                        log_level=logging.INFO if args.verbose else logging.WARNING, **cfg)
    bad = [c for c in codes if c not in (0, None, -15)]
    return 1 if bad else 0


def _stats(args: argparse.Namespace) -> int:
    from .service.registry import list_models
    from .service.stats import collect, prometheus_text

    r = _client(args)
    names = [args.name] if args.name else list(list_models(r))
    stats = {n: collect(r, n) for n in names}
    if args.prometheus:
        sys.stdout.write(prometheus_text(stats))
    else:
        for n, s in stats.items():
            print(n)
            for k, v in s.items():
                print(f"  {k:22s} {v:g}")
    return 0


# -- demo ------------------------------------------------------------------------------
def _demo(args: argparse.Namespace) -> int:
    """The whole service on the bundled Congressional Voting data, with a held-out accuracy per version."""
    import uuid

    from .datasets import load
    from .service.consumer import Consumer
    from .service.embedded import resolve_redis
    from .service.producer import Producer
    from .service.registry import create_model, delete_model
    from .service.pool import WorkerPool

    ds = load("congressional-voting")
    rng = np.random.default_rng(args.shuffle_seed)
    idx = rng.permutation(len(ds.y))
    test, train = idx[:135], idx[135:]
    url, emb = resolve_redis(args.redis_url)
    print(f"redis: {redact(url)}" + (f" (embedded {emb.kind}, stopped at the end)" if emb else ""))
    name = f"demo-votes-{uuid.uuid4().hex[:8]}"
    pool = None
    old_term = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_interrupt)  # SIGTERM cleans up like Ctrl-C
    try:
        forest = create_model(url, name, ds.schema, n_trees=args.trees, height=args.height, epsilon=args.epsilon,
                              budget=args.budget)
        print(f"model {name}: {forest!r}")
        pool = WorkerPool(name, args.processes, url, log_level=logging.WARNING, block_ms=200).start()
        print(f"{pool.n} worker process(es); streaming {len(train)} records in batches of {args.batch_size}, "
              f"testing on {len(test)} held-out records")
        with Producer(url, name, batch_size=args.batch_size) as prod, Consumer(url, name) as cons:
            version = cons.version()
            for start in range(0, len(train), args.batch_size):
                b = train[start:start + args.batch_size]
                prod.push(ds.X[b], ds.y[b])
                f = cons.wait_newer(version, timeout=60)
                if f is None:
                    print("no new version within 60 s: are the workers running?", file=sys.stderr)
                    return 1
                version = f.version
                acc = float((f.predict(ds.X[test]) == ds.y[test]).mean())
                print(f"version {f.version:3d}  batches {f.n_releases:3d}  records ~{f.estimated_records():6.0f} "
                      f"(noisy)  accuracy {acc:.3f}")
        return 0
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    finally:
        if pool is not None:
            pool.stop()
        try:
            if emb is None and not args.keep:
                delete_model(url, name)
        except Exception:
            pass
        if emb is not None:
            emb.stop()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, old_term)


def _raise_interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="streamdp", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--redis-url", default=None, help="Redis URL (default: $REDIS_URL or redis://localhost:6379/0)")
    sub = p.add_subparsers(dest="command", required=True)

    m = sub.add_parser("model", help="create, list, show, fetch or delete private models")
    msub = m.add_subparsers(dest="model_command", required=True)
    c = msub.add_parser("create", help="create a model: draws its random structure and publishes version 0")
    c.add_argument("name")
    c.add_argument("--schema", required=True, help="schema JSON file (declared domains)")
    c.add_argument("--trees", type=int, default=10)
    c.add_argument("--height", type=int, default=None)
    c.add_argument("--epsilon", type=float, required=True)
    c.add_argument("--mechanism", choices=("geometric", "laplace", "kanon"), default="geometric")
    c.add_argument("--k", type=int, default=None, help="k-anonymity threshold (kanon)")
    c.add_argument("--beta", type=float, default=None, help="sampling rate (kanon)")
    c.add_argument("--budget", choices=("split", "disjoint"), default="split")
    c.add_argument("--vote", choices=("proba", "majority"), default="proba")
    c.add_argument("--ledger-budget", type=float, default=None, metavar="E",
                   help="total privacy budget (epsilon) of the source NAME; the model's epsilon is one spend "
                        "(default: set to the model's epsilon when the source has no budget)")
    c.add_argument("--seed", type=int, default=None, help="structure seed (public; noise stays secure)")
    c.set_defaults(func=_model_create)
    lst = msub.add_parser("list", help="list models")
    lst.set_defaults(func=_model_list)
    s = msub.add_parser("show", help="version, epsilon/delta, batches merged, last update")
    s.add_argument("name")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_model_show)
    g = msub.add_parser("get", help="write a published model blob to a file")
    g.add_argument("name")
    g.add_argument("--version", type=int, default=None)
    g.add_argument("-o", "--output", required=True)
    g.set_defaults(func=_model_get)
    d = msub.add_parser("delete", help="delete a model and all its keys")
    d.add_argument("name")
    d.set_defaults(func=_model_delete)

    pu = sub.add_parser("push", help="push a CSV file of labelled records to a model's stream")
    pu.add_argument("name")
    pu.add_argument("file")
    pu.add_argument("--label", default=None, help="label column (name; index with --no-header)")
    pu.add_argument("--batch-size", type=int, default=1000)
    pu.add_argument("--no-header", action="store_true", help="columns are the label then attributes in schema order "
                    "(or the label at --label INDEX)")
    pu.add_argument("-q", "--quiet", action="store_true")
    pu.set_defaults(func=_push)

    w = sub.add_parser("worker", help="run stream workers for a model")
    w.add_argument("name")
    w.add_argument("--processes", type=int, default=None, help="default: one per core")
    w.add_argument("--batch-entries", type=int, default=16, help="entries merged per commit")
    w.add_argument("--claim-idle-ms", type=int, default=30_000)
    w.add_argument("--max-deliveries", type=int, default=5)
    w.add_argument("--block-ms", type=int, default=1000)
    w.add_argument("--until-drained", action="store_true", help="exit when the stream has nothing left")
    w.add_argument("-v", "--verbose", action="store_true", help="JSON log lines on stderr")
    w.set_defaults(func=_worker)

    st = sub.add_parser("stats", help="worker counters (records, batches, dead letters, pending, lag, retries)")
    st.add_argument("name", nargs="?")
    st.add_argument("--prometheus", action="store_true")
    st.set_defaults(func=_stats)

    de = sub.add_parser("demo", help="run the service end to end on a bundled dataset")
    de.add_argument("--epsilon", type=float, default=1.0)
    de.add_argument("--trees", type=int, default=5)
    de.add_argument("--height", type=int, default=3)
    de.add_argument("--budget", choices=("split", "disjoint"), default="disjoint")
    de.add_argument("--batch-size", type=int, default=30)
    de.add_argument("--processes", type=int, default=None)
    de.add_argument("--shuffle-seed", type=int, default=0)
    de.add_argument("--keep", action="store_true", help="keep the model (on an external Redis)")
    de.set_defaults(func=_demo)

    # Commands whose code lives beside the concept they serve.
    from . import evaluate

    evaluate.add_parser(sub)
    try:
        from . import ledger_cli
    except ImportError:  # pragma: no cover - the ledger command is optional until it lands
        pass
    else:
        ledger_cli.add_parser(sub)
    try:
        from . import job_cli
    except ImportError:  # pragma: no cover - the job command is optional until it lands
        pass
    else:
        job_cli.add_parser(sub, msub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except (KeyError, ValueError, LookupError, OSError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"streamdp: error: {msg}", file=sys.stderr)
        return 2
    except Exception as e:
        import redis

        if isinstance(e, redis.RedisError):
            print(f"streamdp: redis error: {e} (REDIS_URL={redact(_url(args))})", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
