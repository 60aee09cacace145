"""What every ``streamdp`` command shares: the Redis URL and client, a progress bar, errors to exit codes.

Exit codes: 0 success, 1 the command ran but did not succeed (a failed job,
a crashed worker), 2 a clear error (bad input, a missing model, Redis
refusing), 130 interrupted.

>>> redact("rediss://worker:s3cret@redis.example:6380/0")
'rediss://worker:***@redis.example:6380/0'
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Any, TextIO

from streamdp.validation import MAX_BLOCK_MS, check_epsilon

__all__ = [
    "positive_seconds",
    "redis_url",
    "redact",
    "client",
    "Progress",
    "run",
    "finite_epsilon_arg",
    "int_in",
    "read_schema",
    "seconds_arg",
    "MAX_PROCESSES",
    "MAX_BLOCK_MS",
]

#: Most worker processes one command starts (a typo of many digits built an ever-growing process list).
MAX_PROCESSES = 256


def finite_epsilon_arg(text: str) -> float:
    """An argparse type for an epsilon that must be finite (a batch job's, a ledger's budget).

    >>> finite_epsilon_arg("1e400")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: '1e400': epsilon must be a finite number > 0, got inf
    """
    try:
        return check_epsilon(_number(text), allow_inf=False)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def read_schema(text: str) -> Any:
    """``--schema``: a schema JSON file, or the name of a schema bundled with the package (the files of
    ``streamdp/data/schemas``: ``congressional-voting``, ``adult``, ...); an existing file of that path wins.
    Why: the documented commands then work from any directory, for an installed package too.

    >>> read_schema("congressional-voting").label.name
    'party'
    >>> read_schema("no-such-schema")
    Traceback (most recent call last):
    ...
    ValueError: --schema 'no-such-schema': no such file, nor a bundled schema (adult, congressional-voting, ...)
    """
    from streamdp.records.datasets import DATASETS, load_schema
    from streamdp.records.schema import Schema

    if os.path.exists(text) or text not in DATASETS:
        if not os.path.exists(text) and not text.lstrip().startswith("{"):
            known = ", ".join(sorted(DATASETS))
            raise ValueError(f"--schema {text!r}: no such file, nor a bundled schema ({known})")
        return Schema.from_json(text)
    return load_schema(text)


def int_in(low: int, high: int):
    """An argparse type for an integer in ``[low, high]``.

    >>> int_in(1, 8)("3")
    3
    """

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= v <= high:
            raise argparse.ArgumentTypeError(f"{v} is outside {low}..{high}")
        return v

    parse.__name__ = f"integer in {low}..{high}"
    return parse


def seconds_arg(text: str) -> float:
    """An argparse type for a duration: a finite number of seconds, at least 0."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(v) and v >= 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds >= 0")
    return v


def positive_seconds(text: str) -> float:
    """An argparse type for a duration that must pass: a finite number of seconds above 0.

    >>> positive_seconds("3600")
    3600.0
    >>> positive_seconds("0")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: '0' is not a finite number of seconds > 0
    """
    v = seconds_arg(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds > 0")
    return v


def redis_url(args: argparse.Namespace) -> str:
    """The Redis URL: ``--redis-url``, else ``$REDIS_URL``, else ``redis://localhost:6379/0``."""
    from streamdp.service.embedded import DEFAULT_URL

    return args.redis_url or os.environ.get("REDIS_URL") or DEFAULT_URL


def redact(url: str) -> str:
    """The URL with its password masked (for messages and logs).

    >>> redact("redis://localhost:6379/0")
    'redis://localhost:6379/0'
    """
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


def client(args: argparse.Namespace) -> Any:
    """A ``redis.Redis`` client for :func:`redis_url`, with the service's explicit socket timeouts."""
    from streamdp.service.connection import connect

    return connect(redis_url(args))


class Progress:
    """A plain progress bar on stderr (no dependency): redrawn in place on a terminal, a line every 2 s otherwise.

    >>> import io
    >>> bar = Progress(4, stream=io.StringIO())
    >>> bar.update(4); bar.stream.getvalue().split()[:3]
    ['[##############################]', '100.0%', '4/4']
    >>> bar = Progress(1, stream=io.StringIO())
    >>> bar.update_fraction(1.0, 7); bar.update_fraction(1.0, 7); bar.stream.getvalue().count("100.0%")
    1
    """

    def __init__(self, total: int, what: str = "records", stream: TextIO | None = None):
        self.total, self.what, self.stream = max(total, 1), what, stream or sys.stderr
        self.t0 = time.monotonic()
        self.tty = self.stream.isatty()
        self._last = -1.0
        self._drawn: tuple[float, int] | None = None

    def update(self, done: int) -> None:
        """Draw ``done`` of the total (throttled: at most ten times a second on a terminal)."""
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

    def update_fraction(self, frac: float, done: int, *, now_: bool = False) -> None:
        """Draw ``frac`` of the work done and ``done`` items (when the total is known only as a fraction,
        e.g. of a file's bytes); ``now_``: draw it now, not throttled (the state before an error)."""
        now = time.monotonic()
        throttled = not now_ and frac < 1.0 and now - self._last < (0.1 if self.tty else 2.0)
        if not now_ and not done:  # (nothing done yet: a small file's read ended first, "100.0% 0 records")
            return
        if throttled or (frac, done) == self._drawn:
            return  # (the same state twice: the last chunk's report and the final one were both printed)
        self._last, self._drawn = now, (frac, done)
        rate = done / max(now - self.t0, 1e-9)
        line = f"[{'#' * int(min(1.0, frac) * 30):<30}] {min(1.0, frac):6.1%} {done:,} {self.what} {rate:,.0f}/s"
        self.stream.write(("\r" + line) if self.tty else line + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End the bar's line on a terminal."""
        if self.tty and self._last >= 0:  # (a bar never drawn ends no line)
            self.stream.write("\n")
            self.stream.flush()


def run(args: argparse.Namespace) -> int:
    """Call the command's handler (``args.func``); expected errors become a message on stderr and exit code 2,
    warnings a line each (``streamdp: warning: ...``, not Python's file and line)."""
    import warnings

    def show(message, category, *_a, **_k) -> None:
        own = category.__module__.startswith("streamdp")
        print(
            f"streamdp: warning: {message}" if own else f"streamdp: warning: {category.__name__}: {message}",
            file=sys.stderr,
        )

    with warnings.catch_warnings():  # (the command's own: a caller's showwarning is back when it returns)
        warnings.showwarning = show
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`... | head`): not an error of this command
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        except OSError:
            pass
        return 0
    except (KeyError, ValueError, LookupError, OSError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        if isinstance(e, OSError) and e.filename is not None and e.strerror:  # (not "[Errno 2] ...")
            msg = f"{e.filename}: {e.strerror}"
        print(f"streamdp: error: {msg}", file=sys.stderr)
        return 2
    except Exception as e:
        import redis

        if isinstance(e, redis.RedisError):
            hint = ""
            if isinstance(e, redis.exceptions.NoPermissionError):
                hint = (
                    "; this Redis user may not run it: each command runs as the user its role has in deploy/users.acl "
                    "(stats and worker: the worker user; model create, delete and ledger: the admin user)"
                )
            elif isinstance(e, redis.ConnectionError):
                hint = (
                    "; no answer from that server (on a Redis Cluster, a node may be failing over: run the command "
                    "again in a few seconds; a push sent again merges its batches once)"
                )
            print(f"streamdp: redis error: {e} (REDIS_URL={redact(redis_url(args))}){hint}", file=sys.stderr)
            return 2
        raise
