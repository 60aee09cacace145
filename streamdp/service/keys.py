"""Redis key layout of a model (a contract shared by workers, producers, consumers and deploy/ACLs).

Every key of a model carries the hash tag ``{NAME}``, so a model's keys sit in
one Redis Cluster slot and the atomic commit script may touch all of them.
``pub`` keys are public (consumers may read them); ``priv`` keys are for
producers (XADD to ``records`` only) and workers.

>>> k = Keys("votes")
>>> k.records, k.pub_model, k.delta("b1")
('sdp:{votes}:priv:records', 'sdp:{votes}:pub:model', 'sdp:{votes}:priv:delta:b1')
>>> k.acc(3), k.window_delta(3), k.node("0:1:2")
('sdp:{votes}:priv:acc:3', 'sdp:{votes}:priv:wdelta:3', 'sdp:{votes}:priv:node:0:1:2')

A batch job's model lives in its own key space, ``sdp:{job:NAME}:pub:*``,
registered in ``sdp:job-results`` (not ``sdp:registry``): the ``jobworker``
ACL user writes only there, so it cannot overwrite a stream model. A model
name has no ``:``, so no stream model's key matches ``sdp:{job:*}``.

>>> Keys("votes-rdt", job=True).pub_model
'sdp:{job:votes-rdt}:pub:model'
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["Keys", "REGISTRY", "JOB_RESULTS", "GROUP", "check_name", "as_str"]

REGISTRY = "sdp:registry"
JOB_RESULTS = "sdp:job-results"  # registry of batch jobs' published models
GROUP = "workers"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


def check_name(name: str) -> str:
    """A model name: 1-64 characters of ``[A-Za-z0-9_.-]`` (no glob or hash-tag characters)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):  # (match: "$" would accept a trailing newline)
        raise ValueError(
            f"invalid model name {name!r}: use 1-64 letters, digits, '_', '.', '-' (starting with a letter or digit)"
        )
    return name


class Keys:
    """All Redis keys of one model (``job=True``: of a batch job's published model)."""

    registry = REGISTRY
    group = GROUP

    def __init__(self, name: str, *, job: bool = False, model_id: str = ""):
        self.name = check_name(name)
        self.job = job
        # Stored noise (delta, wdelta, node) is named by the model's id where its state has one: a worker still
        # holding a deleted model never stores noise a worker of the model re-created under the name would reuse.
        self.model_id = model_id
        self._noise = f":{model_id}" if model_id else ""
        self.prefix = f"sdp:{{job:{name}}}" if job else f"sdp:{{{name}}}"
        self.spec = f"{self.prefix}:spec"
        self.pub_model = f"{self.prefix}:pub:model"
        self.pub_events = f"{self.prefix}:pub:events"
        self.pub_history = f"{self.prefix}:pub:history"  # one public line per released window (.history)
        self.records = f"{self.prefix}:priv:records"
        self.state = f"{self.prefix}:priv:state"
        self.merged = f"{self.prefix}:priv:merged"
        self.dead = f"{self.prefix}:priv:dead"
        # batch ids whose refused rows were dead-lettered (zset, score: ms): a re-push is refused once (.commit)
        self.dead_batches = f"{self.prefix}:priv:dead_batches"
        self.stats = f"{self.prefix}:priv:stats"
        self.tree = f"{self.prefix}:priv:tree"  # release="tree": TreeState bytes (holds SECRET exact node sums)
        self.ids = f"{self.prefix}:priv:ids"  # privacy ids' keyed hashes -> records merged (.units)
        self.pattern = f"{self.prefix}:*"

    @classmethod
    def of(cls, r: Any, name: str) -> Keys:
        """The keys of stream model ``name`` as its workers name them (with its state's model id, if any)."""
        mid = r.hget(cls(name).state, "model_id")
        return cls(name, model_id=as_str(mid) if mid else "")

    def pub_version(self, version: int) -> str:
        return f"{self.prefix}:pub:v:{int(version)}"

    def delta(self, batch_id: str) -> str:
        return f"{self.prefix}:priv:delta{self._noise}:{batch_id}"

    def claim(self, batch_id: str) -> str:
        """A batch's claimed records under a privacy id (``release="batch"``, :mod:`.unit_claim`); workers only."""
        return f"{self.prefix}:priv:claim:{batch_id}"

    def acc(self, window: int) -> str:
        """The SECRET exact accumulator of a window (hash: one field per add, :mod:`.windows`); workers only."""
        return f"{self.prefix}:priv:acc:{int(window)}"

    def closing(self, window: int) -> str:
        """A short lease of the worker closing a window (saves the others a duplicate close; not a lock)."""
        return f"{self.prefix}:priv:closing:{int(window)}"

    def window_delta(self, window: int) -> str:
        """A closed window's noised delta, stored (SET NX) before it is merged."""
        return f"{self.prefix}:priv:wdelta{self._noise}:{int(window)}"

    def node(self, node_key: str) -> str:
        """A tree node's noised sum (its ``Node.key``, ``u:level:index``), stored (SET NX) before it is used."""
        return f"{self.prefix}:priv:node{self._noise}:{node_key}"

    def __repr__(self) -> str:
        return f"Keys({self.name!r}, job=True)" if self.job else f"Keys({self.name!r})"


def as_str(x: Any) -> str:
    """A Redis reply (bytes unless the client decodes) as text."""
    return x.decode() if isinstance(x, bytes) else str(x)
