#!/usr/bin/env python3
"""Write a copy of users.acl with a password hash for every enabled user.

The shipped ``deploy/users.acl`` has no passwords (nobody can log in). This
script appends ``#<sha256>`` (Redis ACL password hash) to each ``user`` line
that is ``on``. Passwords come from the environment
(``STREAMDP_<USER>_PASSWORD``, e.g. ``STREAMDP_WORKER_PASSWORD``) or are
generated (``secrets.token_urlsafe``) and printed once on stderr as
``user=password`` lines, so you can put them into each service's REDIS_URL:

    python deploy/acl_passwords.py deploy/users.acl -o /etc/redis/users.acl
    REDIS_URL=redis://worker:<password>@redis:6379/0 streamdp worker NAME

On Redis Cluster, render with ``--cluster``: every enabled user but admin
also gets the commands a cluster client needs to find the slots and follow
redirections (:data:`CLUSTER_CLIENT_RULES`). Load the same file on every node
(ACLs are per node).

Only the Python standard library is needed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import secrets
import sys

# redis-py's RedisCluster reads the slot map (CLUSTER SLOTS/SHARDS), the command table (COMMAND) and sends
# ASKING on an ASK redirection during a slot migration; streamdp detects cluster mode with CLUSTER INFO.
CLUSTER_CLIENT_RULES = "+cluster|slots +cluster|shards +cluster|info +cluster|myid +command +asking"


def render(text: str, passwords: dict[str, str] | None = None, *, cluster: bool = False) -> tuple[str, dict[str, str]]:
    """Return the ACL text with password hashes added, and the passwords used.

    >>> render("user worker on -@all +get", {"worker": "pw"}, cluster=True)[0].split(" #")[0]
    'user worker on -@all +get +cluster|slots +cluster|shards +cluster|info +cluster|myid +command +asking'
    """
    passwords = dict(passwords or {})
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "user" and "on" in parts[2:]:
            user = parts[1]
            if cluster and user != "admin":
                line = f"{line} {CLUSTER_CLIENT_RULES}"
            pw = passwords.get(user) or os.environ.get(f"STREAMDP_{user.upper()}_PASSWORD") or secrets.token_urlsafe(24)
            passwords[user] = pw
            line = f"{line} #{hashlib.sha256(pw.encode()).hexdigest()}"
        out.append(line)
    return "\n".join(out) + "\n", passwords


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("acl", help="template ACL file (deploy/users.acl)")
    ap.add_argument("-o", "--output", required=True, help="ACL file to write (mode 0600)")
    ap.add_argument("--cluster", action="store_true", help="add the commands a Redis Cluster client needs")
    args = ap.parse_args(argv)
    with open(args.acl) as f:
        text, pws = render(f.read(), cluster=args.cluster)
    fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    for user, pw in pws.items():
        if not os.environ.get(f"STREAMDP_{user.upper()}_PASSWORD"):
            print(f"{user}={pw}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
