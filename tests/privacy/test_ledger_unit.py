"""The ledger's unit of privacy: every spend records it, the first spend fixes the ledger's, a charge in another
unit is refused before anything is recorded (in the charge script's atomic step on Redis, so racing chargers
cannot mix units), and a ledger charged before units counts as per record."""

from __future__ import annotations

import json
import multiprocessing
import os

import msgpack
import pytest

from streamdp.cli import main
from streamdp.privacy.ledger import BudgetExceeded, InMemoryLedger, UnitMismatch, unit_refusal
from streamdp.records.datasets import load
from streamdp.service.connection import connect
from streamdp.service.keys import REGISTRY
from streamdp.service.ledger_store import RedisLedger, ledger_keys
from streamdp.service.registry import create_model
from tests.privacy.conftest import forget

pytestmark = pytest.mark.redis
VOTES = load("congressional-voting")


def test_each_spend_records_its_unit_and_the_first_fixes_the_ledgers(led, source):
    led.set_budget(source, 5.0)
    assert led.unit(source) is None  # a budget alone fixes nothing
    s = led.charge(source, 0.5, who="job:a", what="diffp-c45 {}", key="a", privacy_id="user", max_records_per_id=3)
    assert (s.privacy_id, s.max_records_per_id, s.unit) == ("user", 3, "person:user")
    assert s.describe_unit() == "per person (column 'user', K=3)"
    assert led.unit(source) == "person:user"
    # another K of the same column composes per person: accepted, its own K recorded
    led.charge(source, 0.5, who="job:b", what="x", key="b", privacy_id="user", max_records_per_id=7)
    assert [(x.privacy_id, x.max_records_per_id) for x in led.spends(source)] == [("user", 3), ("user", 7)]
    # the same job per record: refused, naming both units and what to do, nothing recorded
    with pytest.raises(UnitMismatch) as exc:
        led.charge(source, 0.5, who="job:c", what="diffp-c45 {}", key="c")
    msg = str(exc.value)
    assert "accounted per person (column 'user')" in msg and "this charge is per record" in msg
    assert "--privacy-id user --max-records-per-id K" in msg and "refused before reading any data" in msg
    assert isinstance(exc.value, BudgetExceeded)  # (a job refused for it ends "refused")
    with pytest.raises(UnitMismatch, match=r"column 'user'.*column 'uid'.*rename it"):
        led.charge(source, 0.5, who="job:d", what="x", key="d", privacy_id="uid", max_records_per_id=3)
    assert len(led.spends(source)) == 2 and led.spent(source) == (1.0, 0.0)
    # a retry of a recorded spend answers with that spend, whatever it is asked
    assert led.charge(source, 0.5, who="job:a", what="diffp-c45 {}", key="a") == led.spends(source)[0]


def test_a_per_record_ledger_refuses_a_per_person_charge(led, source):
    led.set_budget(source, 5.0)
    s = led.charge(source, 0.5, who="job:a", what="x")
    assert (s.privacy_id, s.max_records_per_id, s.unit, led.unit(source)) == (None, None, "record", "record")
    with pytest.raises(UnitMismatch) as exc:
        led.charge(source, 0.5, who="job:b", what="x", privacy_id="user", max_records_per_id=3)
    assert str(exc.value) == str(unit_refusal(source, "record", "person:user", 3))  # the same words everywhere
    assert "accounted per record" in str(exc.value) and "per person (column 'user', K=3)" in str(exc.value)
    assert led.spent(source) == (0.5, 0.0)


def test_unit_arguments_are_checked(led, source):
    led.set_budget(source, 5.0)
    with pytest.raises(ValueError, match="max_records_per_id goes with privacy_id"):
        led.charge(source, 0.1, who="a", what="x", max_records_per_id=3)
    with pytest.raises(ValueError, match="privacy_id needs max_records_per_id"):
        led.charge(source, 0.1, who="a", what="x", privacy_id="user")
    with pytest.raises(ValueError, match="privacy_id must name a column"):
        led.charge(source, 0.1, who="a", what="x", privacy_id="", max_records_per_id=2)
    assert led.spends(source) == [] and led.unit(source) is None


# -- Redis only ------------------------------------------------------------------------
def test_a_ledger_charged_before_units_counts_as_per_record(redis_url, source):
    """Spends of an older version carry no unit and the hash no ``unit`` field: per record, and it keeps working."""
    r = connect(redis_url)
    led = RedisLedger(redis_url)
    led.set_budget(source, 2.0)
    h, sp, _ = ledger_keys(source)
    old = {"source": source, "epsilon": 0.5, "delta": 0.0, "who": "job:old", "what": "diffp-c45 {}", "when": 1.0}
    r.rpush(sp, msgpack.packb(old, use_bin_type=True))
    r.hset(h, "spent_epsilon", "0.5")
    (s,) = led.spends(source)
    assert (s.privacy_id, s.max_records_per_id, s.unit) == (None, None, "record")
    assert led.unit(source) == "record" and r.hget(h, "unit") is None
    with pytest.raises(UnitMismatch, match="accounted per record"):
        led.charge(source, 0.5, who="job:new", what="x", privacy_id="user", max_records_per_id=2)
    led.charge(source, 0.5, who="job:new", what="x")
    assert r.hget(h, "unit") == b"record" and led.spent(source) == (1.0, 0.0)


def _charger(url: str, source: str, privacy_id: str | None, n: int, gate: str) -> None:
    """Child process: wait at the gate, charge n times in one unit; exit code = successful charges."""
    led = RedisLedger(url)
    r = connect(url, block_s=60)
    r.rpush(f"{gate}:ready", os.getpid())
    if r.blpop([f"{gate}:go"], timeout=60) is None:
        os._exit(255)
    ok = 0
    for _ in range(n):
        try:
            led.charge(source, 0.01, who=f"pid{os.getpid()}", what="race", privacy_id=privacy_id,
                       max_records_per_id=None if privacy_id is None else 3)  # fmt: skip
            ok += 1
        except UnitMismatch:
            pass
    os._exit(ok)


def test_racing_chargers_of_two_units_never_mix_them(redis_url, source):
    """4 processes per record and 4 per person race on an empty ledger: one unit wins every spend."""
    led = RedisLedger(redis_url)
    led.set_budget(source, 100.0)
    gate = f"sdp:{{{source}}}:test:gate"
    ctx = multiprocessing.get_context("fork")
    units = [None, "user"] * 4
    ps = [ctx.Process(target=_charger, args=(redis_url, source, u, 20, gate)) for u in units]
    for p in ps:
        p.start()
    r = connect(redis_url, block_s=120)
    try:
        for _ in ps:
            assert r.blpop([f"{gate}:ready"], timeout=120) is not None, "a charging process never started"
        r.rpush(f"{gate}:go", *[1] * len(ps))
        for p in ps:
            p.join(120)
    finally:
        for p in ps:
            if p.is_alive():
                p.kill()
                p.join()
    codes = [p.exitcode for p in ps]
    spends = led.spends(source)
    assert len({s.unit for s in spends}) == 1 and {s.unit for s in spends} == {led.unit(source)}
    won = [c for c, u in zip(codes, units) if (u is None) == (led.unit(source) == "record")]
    lost = [c for c, u in zip(codes, units) if (u is None) != (led.unit(source) == "record")]
    assert won == [20] * 4 and lost == [0] * 4 and len(spends) == 80


def test_a_person_models_ledger_is_per_person_and_a_record_ledger_refuses_it(redis_url, source, tmp_path):
    key = tmp_path / "noise.key"
    key.write_bytes(bytes(range(64)))
    key.chmod(0o600)
    kw = dict(n_trees=2, height=2, epsilon=0.5, seed=1, release="window", noise_key_file=str(key))
    create_model(redis_url, source, VOTES.schema, privacy_id="user", max_records_per_id=4, **kw)
    led = RedisLedger(redis_url)
    (s,) = led.spends(source)
    assert (s.who, s.privacy_id, s.max_records_per_id, led.unit(source)) == ("stream", "user", 4, "person:user")
    other = source + "-rec"
    try:
        led.set_budget(other, 1.0)
        led.charge(other, 0.25, who="job:x", what="x")
        with pytest.raises(UnitMismatch, match="accounted per record"):
            create_model(redis_url, other, VOTES.schema, privacy_id="user", max_records_per_id=4,
                         ledger_budget=3.0, **kw)  # fmt: skip
        r = connect(redis_url)
        assert r.hget(REGISTRY, other) is None and led.budget(other) == (1.0, 0.0)  # the budget was not raised
        assert led.spent(other) == (0.25, 0.0)
    finally:
        forget(redis_url, other)


def test_cli_ledger_shows_the_unit(redis_url, source, capsys):
    led = RedisLedger(redis_url)
    led.set_budget(source, 2.0)
    u = ["--redis-url", redis_url]
    assert main(u + ["ledger", source]) == 0
    assert "unit       not fixed yet" in capsys.readouterr().out
    assert main(u + ["ledger", source, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["unit"], d["privacy_id"]) == (None, None)
    led.charge(source, 0.5, who="job:a", what="diffp-c45 {}", key="a", privacy_id="user", max_records_per_id=3)
    assert main(u + ["ledger", source]) == 0
    out = capsys.readouterr().out
    assert "unit       per person (column 'user'): epsilon is what one person loses" in out
    assert "remaining  epsilon 1.5 per person" in out
    assert "person:user K=3" in out
    assert main(u + ["ledger", source, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["unit"], d["privacy_id"]) == ("person", "user")
    assert (d["spends"][0]["privacy_id"], d["spends"][0]["max_records_per_id"]) == ("user", 3)


def test_the_private_data_layer_charges_in_its_unit():
    from streamdp.learners.private_data import PrivateDataset

    led = InMemoryLedger()
    led.set_budget("people", 3.0)
    rows = [{"user": u, **dict(zip(VOTES.schema.names, x))} for u, x in zip(["a", "a", "b"], VOTES.X[:3])]
    PrivateDataset.from_records(VOTES.schema, rows, VOTES.y[:3], epsilon=1.0, ledger=led, source="people",
                                privacy_id="user", max_records_per_id=2)  # fmt: skip
    PrivateDataset.from_records(VOTES.schema, rows, VOTES.y[:3], epsilon=0.5, ledger=led, source="people",
                                privacy_id="user", max_records_per_id=1)  # fmt: skip
    assert [(s.privacy_id, s.max_records_per_id) for s in led.spends("people")] == [("user", 2), ("user", 1)]
    with pytest.raises(UnitMismatch, match="this charge is per record"):
        PrivateDataset.from_records(VOTES.schema, VOTES.X[:3], VOTES.y[:3], epsilon=0.5, ledger=led, source="people")
    with pytest.raises(ValueError, match=r"privacy_id=\{NAME: ids\}"):  # bare ids name no unit: refused, uncharged
        PrivateDataset.from_records(VOTES.schema, VOTES.X[:3], VOTES.y[:3], epsilon=0.5, ledger=led, source="people",
                                    privacy_id=["a", "a", "b"], max_records_per_id=2)  # fmt: skip
    with pytest.raises(UnitMismatch, match=r"column 'device', K=2"):  # another kind of id: another unit
        PrivateDataset.from_records(VOTES.schema, VOTES.X[:3], VOTES.y[:3], epsilon=0.5, ledger=led, source="people",
                                    privacy_id={"device": ["a", "a", "b"]}, max_records_per_id=2)  # fmt: skip
    PrivateDataset.from_records(VOTES.schema, VOTES.X[:3], VOTES.y[:3], epsilon=0.5, ledger=led, source="people",
                                privacy_id={"user": ["a", "a", "b"]}, max_records_per_id=2)  # fmt: skip
    assert led.spent("people") == (2.0, 0.0)


def test_a_unit_declared_ahead_and_a_legacy_ledger_declared_per_person(redis_url, source, capsys):
    u = ["--redis-url", redis_url]
    led = RedisLedger(redis_url)
    assert main(u + ["ledger", source, "--unit", "person", "--privacy-id", "user"]) == 2
    assert "has no budget" in capsys.readouterr().err
    assert main(u + ["ledger", source, "--set-budget", "2", "--unit", "person", "--privacy-id", "user"]) == 0
    assert "unit       per person (column 'user')" in capsys.readouterr().out
    assert led.unit(source) == "person:user" and led.spends(source) == []
    with pytest.raises(UnitMismatch, match="this charge is per record"):
        led.charge(source, 0.5, who="a", what="x")
    assert main(u + ["ledger", source, "--unit", "record"]) == 2  # fixed: never changed
    assert "accounted per person (column 'user')" in capsys.readouterr().err
    assert main(u + ["ledger", source, "--unit", "person"]) == 2
    assert "--unit person goes with --privacy-id" in capsys.readouterr().err
    # a ledger charged before units (a person model of an older version): per record until its owner says
    legacy = source + "-old"
    try:
        led.set_budget(legacy, 2.0)
        h, sp, _ = ledger_keys(legacy)
        old = {"source": legacy, "epsilon": 0.5, "delta": 0.0, "who": "stream", "what": "PrivateForest", "when": 1.0}
        connect(redis_url).rpush(sp, msgpack.packb(old, use_bin_type=True))
        assert main(u + ["ledger", legacy, "--unit", "person", "--privacy-id", "user"]) == 2
        assert "confirm with --earlier-spends-per-person" in capsys.readouterr().err
        assert led.unit(legacy) == "record"
        args = ["ledger", legacy, "--unit", "person", "--privacy-id", "user", "--earlier-spends-per-person"]
        assert main(u + args) == 0
        assert led.unit(legacy) == "person:user"
        led.charge(legacy, 0.5, who="job:j", what="x", privacy_id="user", max_records_per_id=2)
    finally:
        forget(redis_url, legacy)


def test_the_in_memory_ledger_takes_a_unit_declared_ahead():
    """The library's ledger had no declaration ahead (the service's has `streamdp ledger --unit`)."""
    led = InMemoryLedger()
    with pytest.raises(ValueError, match="has no budget"):
        led.declare_unit("s", "user")
    led.set_budget("s", 2.0)
    assert led.declare_unit("s", "user") == "person:user" == led.unit("s")
    with pytest.raises(UnitMismatch, match="this charge is per record"):
        led.charge("s", 0.5, who="w", what="x")  # a per-record spend on a ledger declared per person
    with pytest.raises(UnitMismatch):
        led.declare_unit("s", None)
    led.charge("s", 0.5, who="w", what="x", privacy_id="user", max_records_per_id=2)
    assert led.spent("s") == (0.5, 0.0)
