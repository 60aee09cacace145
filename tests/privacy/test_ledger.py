"""The privacy budget ledger: InMemoryLedger and RedisLedger (real Redis) behave the same.

One test body runs on both stores where it can; then RedisLedger alone: processes racing on
one budget (no overspend, no lost spend), a racing idempotency key, the stream model's
epsilon as one spend in create_model, and the ``streamdp ledger`` command.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os

import pytest
import redis

from streamdp.cli import main
from streamdp.privacy.ledger import TOLERANCE, BudgetExceeded, refusal
from streamdp.records.datasets import load
from streamdp.service.connection import connect
from streamdp.service.keys import REGISTRY, Keys
from streamdp.service.ledger_store import RedisLedger, ledger_keys
from streamdp.service.registry import create_model, delete_model
from tests.privacy.conftest import forget

# create_model(not_private=True)'s own NotPrivateWarning, expected here
pytestmark = [
    pytest.mark.redis,
    pytest.mark.filterwarnings("ignore:model .*NOT private:streamdp.privacy.secure_random.NotPrivateWarning"),
]


# -- both stores -------------------------------------------------------------------------
def test_refused_before_anything_is_recorded(led, source):
    with pytest.raises(BudgetExceeded, match="has no budget; set one first"):
        led.charge(source, 0.1, who="a", what="x")
    assert led.spends(source) == [] and led.budget(source) is None and led.remaining(source) == 0.0
    led.set_budget(source, 1.0)
    assert led.charge(source, 0.75, who="alice", what="DiffPID3").epsilon == 0.75
    with pytest.raises(BudgetExceeded) as exc:
        led.charge(source, 0.5, who="bob", what="SuLQID3", key="job-2")
    assert str(exc.value) == str(refusal(source, 0.5, 0.75, 1.0))  # the same words on every store
    assert "refused before reading any data" in str(exc.value)
    assert [s.who for s in led.spends(source)] == ["alice"]
    assert led.spent(source) == (0.75, 0.0) and led.remaining(source) == pytest.approx(0.25, abs=1e-12)
    # the refused key was not recorded: it can charge once the budget allows
    led.set_budget(source, 1.25)
    assert led.charge(source, 0.5, who="bob", what="SuLQID3", key="job-2").key == "job-2"


def test_tolerance_lets_equal_shares_fill_the_budget(led, source):
    led.set_budget(source, 1.0)
    for _ in range(3):
        led.charge(source, 1 / 3, who="a", what="third")
    assert abs(led.spent(source)[0] - 1.0) <= TOLERANCE
    with pytest.raises(BudgetExceeded):
        led.charge(source, 1e-6, who="a", what="more")
    led.set_budget(source, 2.0)
    for _ in range(10):
        led.charge(source, 0.1, who="a", what="tenth")  # 0.1 * 10 rounds to 0.9999999999999999
    led.charge(source, 0.0, who="a", what="free")  # epsilon 0 always fits
    with pytest.raises(BudgetExceeded):
        led.charge(source, 2e-9, who="a", what="past the tolerance")
    assert len(led.spends(source)) == 14


def test_delta_budget(led, source):
    led.set_budget(source, 1.0, 1e-6)
    led.charge(source, 0.1, who="a", what="kanon", delta=6e-7)
    with pytest.raises(BudgetExceeded, match="charging delta=6e-07 would spend 1.2e-06 of a delta budget of 1e-06"):
        led.charge(source, 0.1, who="a", what="kanon", delta=6e-7)
    assert led.spent(source) == (0.1, 6e-7)


def test_idempotent_key_charges_once(led, source):
    led.set_budget(source, 1.0)
    first = led.charge(source, 0.4, who="job", what="DiffPID3", key="job-1")
    again = led.charge(source, 0.4, who="job", what="DiffPID3", key="job-1")
    assert again == first  # the stored spend, same time and all
    led.charge(source, 0.4, who="job", what="DiffPID3", key="job-2")
    assert led.charge(source, 0.4, who="job", what="retry", key="job-1") == first  # even when full
    assert [s.key for s in led.spends(source)] == ["job-1", "job-2"]
    assert led.spent(source)[0] == pytest.approx(0.8)


def test_set_budget_cannot_go_below_spent(led, source):
    led.set_budget(source, 1.0, 1e-5)
    led.charge(source, 0.6, who="a", what="x", delta=1e-6)
    with pytest.raises(ValueError, match=r"already spent epsilon=0\.6, delta=1e-06; the budget cannot go below"):
        led.set_budget(source, 0.5, 1e-5)
    with pytest.raises(ValueError, match="cannot go below"):
        led.set_budget(source, 1.0, 0.0)
    assert led.budget(source) == (1.0, 1e-5)
    led.set_budget(source, 0.6, 1e-6)  # down to exactly what is spent: allowed
    assert led.budget(source) == (0.6, 1e-6) and led.remaining(source) == 0.0


@pytest.mark.parametrize(
    "args, kw, word",
    [
        ((-0.1,), {}, "epsilon must be a finite number >= 0"),
        ((math.nan,), {}, "epsilon"),
        ((math.inf,), {}, "epsilon"),
        (("1",), {}, "epsilon"),
        ((True,), {}, "epsilon"),
        ((0.1,), {"delta": -1e-9}, "delta must be a finite number >= 0"),
        ((0.1,), {"delta": 1.0}, "delta must be < 1"),
    ],
)
def test_bad_arguments_are_named(led, source, args, kw, word):
    led.set_budget(source, 1.0)
    with pytest.raises(ValueError, match=word):
        led.charge(source, *args, who="a", what="x", **kw)
    with pytest.raises(ValueError, match=word):
        led.set_budget(source, *args, **kw)
    assert led.spends(source) == [] and led.budget(source) == (1.0, 0.0)


def test_bad_source_is_named(led):
    with pytest.raises(ValueError, match="source must be a non-empty string"):
        led.charge("", 0.1, who="a", what="x")
    with pytest.raises(ValueError, match="source must be a non-empty string"):
        led.set_budget(None, 1.0)  # type: ignore[arg-type]


# -- Redis only ------------------------------------------------------------------------
def test_redis_layout_and_names(redis_url, source):
    led = RedisLedger(redis_url)
    with pytest.raises(ValueError, match=r"invalid ledger source 'a\{b\}'"):
        led.set_budget("a{b}", 1.0)
    with pytest.raises(ValueError, match="invalid ledger source"):
        led.charge("x*", 0.1, who="a", what="x")
    led.set_budget(source, 1.0)
    led.charge(source, 0.25, who="a", what="x", key="k")
    h, sp, ks = ledger_keys(source)
    assert (h, sp, ks) == (f"sdp:{{{source}}}:ledger", f"{h}:spends", f"{h}:keys")
    r = connect(redis_url)
    assert r.hgetall(h) == {
        b"budget_epsilon": b"1.0",
        b"budget_delta": b"0.0",
        b"spent_epsilon": b"0.25",
        b"spent_delta": b"0",
        b"unit": b"record",  # (fixed by the first spend)
    }
    assert r.llen(sp) == 1 and r.hget(ks, "k") == b"0"
    assert source in led.sources() and all(isinstance(s, str) for s in led.sources())
    # the ledger of another process sees the same state
    assert RedisLedger(redis_url).spends(source) == led.spends(source)


def _charger(url: str, source: str, n: int, epsilon: float, key: str, gate: str) -> None:
    """Child process: wait at the gate, charge n times; exit code = number of successful charges."""
    led = RedisLedger(url)
    r = connect(url, block_s=60)  # the socket outlasts the blocking pop (redis-py 8 would give up after 5 s)
    r.rpush(f"{gate}:ready", os.getpid())
    if r.blpop([f"{gate}:go"], timeout=60) is None:
        os._exit(255)
    ok = 0
    for _ in range(n):
        try:
            s = led.charge(source, epsilon, who=f"pid{os.getpid()}", what="race", key=key)
            ok += 1
            r.rpush(f"{gate}:when", repr(s.when))
        except BudgetExceeded:
            pass
    os._exit(ok)


def _race(url: str, source: str, procs: int, n: int, epsilon: float, key: str = "") -> list[int]:
    """Start the processes (fork: everything is imported already, so they start in milliseconds), open the gate
    once all are ready, return their exit codes."""
    ctx = multiprocessing.get_context("fork")
    gate = f"sdp:{{{source}}}:test:gate"
    ps = [ctx.Process(target=_charger, args=(url, source, n, epsilon, key, gate)) for _ in range(procs)]
    for p in ps:
        p.start()
    r = connect(url, block_s=120)
    try:
        for _ in range(procs):  # bounded wait for every process to be at the gate
            assert r.blpop([f"{gate}:ready"], timeout=120) is not None, "a charging process never started"
        r.rpush(f"{gate}:go", *[1] * procs)
        for p in ps:
            p.join(120)
    finally:
        for p in ps:
            if p.is_alive():
                p.kill()
                p.join()
    return [p.exitcode for p in ps]


@pytest.mark.slow
def test_racing_processes_never_overspend(redis_url, source):
    """8 processes x 50 charges of 0.01 on a budget of 1.0: exactly 100 succeed, none is lost."""
    led = RedisLedger(redis_url)
    led.set_budget(source, 1.0)
    codes = _race(redis_url, source, procs=8, n=50, epsilon=0.01)
    assert all(0 <= c <= 50 for c in codes), codes
    assert sum(codes) == 100
    spends = led.spends(source)
    assert len(spends) == 100 and len({s.who for s in spends}) >= 2  # they did interleave
    assert abs(led.spent(source)[0] - 1.0) <= 1e-9
    assert abs(math.fsum(s.epsilon for s in spends) - 1.0) <= 1e-9
    with pytest.raises(BudgetExceeded):
        led.charge(source, 0.01, who="late", what="x")


@pytest.mark.slow
def test_racing_processes_with_one_key_charge_once(redis_url, source):
    led = RedisLedger(redis_url)
    led.set_budget(source, 1.0)
    codes = _race(redis_url, source, procs=8, n=10, epsilon=0.3, key="job-42")
    assert codes == [10] * 8  # every call answers with the spend
    spends = led.spends(source)
    assert len(spends) == 1 and spends[0].key == "job-42" and led.spent(source) == (0.3, 0.0)
    whens = set(connect(redis_url).lrange(f"sdp:{{{source}}}:test:gate:when", 0, -1))
    assert whens == {repr(spends[0].when).encode()}  # all 80 answers are that one spend


# -- the stream model is one spend ------------------------------------------------------------
VOTES = load("congressional-voting")


def test_create_model_charges_its_epsilon(redis_url, source):
    create_model(redis_url, source, VOTES.schema, n_trees=2, height=2, epsilon=0.5, seed=1)
    led = RedisLedger(redis_url)
    assert led.budget(source) == (0.5, 0.0) and led.remaining(source) == 0.0
    (s,) = led.spends(source)
    model_id = connect(redis_url).hget(Keys(source).pub_model, "model_id").decode()
    assert (s.epsilon, s.who, s.what, s.key) == (0.5, "stream", "PrivateForest (stream model)", f"model:{model_id}")
    # deleting the model keeps the ledger: re-creating it is a new release over the same source
    delete_model(redis_url, source)
    assert led.spends(source) == [s]
    with pytest.raises(BudgetExceeded, match="would spend 1 of a budget of 0.5"):
        create_model(redis_url, source, VOTES.schema, n_trees=2, height=2, epsilon=0.5, seed=1)
    create_model(redis_url, source, VOTES.schema, n_trees=2, height=2, epsilon=0.5, seed=1, ledger_budget=3.0)
    assert led.budget(source) == (3.0, 0.0) and len(led.spends(source)) == 2
    assert led.remaining(source) == pytest.approx(2.0)


def test_create_model_with_too_small_a_budget_leaves_nothing(redis_url, source):
    with pytest.raises(BudgetExceeded, match="charging epsilon=2 would spend 2 of a budget of 1"):
        create_model(redis_url, source, VOTES.schema, n_trees=2, height=2, epsilon=2.0, ledger_budget=1.0)
    r = connect(redis_url)
    assert r.hget(REGISTRY, source) is None
    assert not [k for k in r.scan_iter(match=f"sdp:{{{source}}}:*") if b":ledger" not in k]
    assert RedisLedger(redis_url).spends(source) == []
    with pytest.raises(ValueError, match="ledger_budget must be a finite number > 0"):
        create_model(redis_url, source, VOTES.schema, n_trees=2, height=2, epsilon=1.0, ledger_budget=-1)


def test_non_private_model_is_not_charged_but_refused_over_a_budget(redis_url, source, unique_name):
    other = unique_name + "-b"
    try:
        create_model(redis_url, other, VOTES.schema, n_trees=2, height=2, epsilon=math.inf, not_private=True)
        assert RedisLedger(redis_url).budget(other) is None
        RedisLedger(redis_url).set_budget(source, 5.0)
        with pytest.raises(BudgetExceeded, match="non-private model"):
            create_model(redis_url, source, VOTES.schema, n_trees=2, height=2, epsilon=math.inf, not_private=True)
        assert connect(redis_url).hget(REGISTRY, source) is None
    finally:
        forget(redis_url, other)


# -- CLI ---------------------------------------------------------------------------------------
def test_cli_ledger(redis_url, source, tmp_path, capsys):
    u = ["--redis-url", redis_url]
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(VOTES.schema.to_dict()))
    assert (
        main(
            u
            + [
                "model",
                "create",
                source,
                "--schema",
                str(schema),
                "--trees",
                "2",
                "--height",
                "2",
                "--epsilon",
                "0.5",
                "--ledger-budget",
                "2",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(u + ["ledger", source]) == 0
    out = capsys.readouterr().out
    assert "budget     epsilon 2," in out and "spent      epsilon 0.5," in out and "remaining  epsilon 1.5" in out
    assert "stream" in out and "PrivateForest (stream model)" in out and "model:" in out
    assert main(u + ["ledger", source, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["budget_epsilon"] == 2.0 and d["remaining_epsilon"] == 1.5 and len(d["spends"]) == 1
    assert main(u + ["ledger", source, "--set-budget", "3", "--delta", "1e-6"]) == 0
    assert "budget     epsilon 3, delta 1e-06" in capsys.readouterr().out
    assert main(u + ["ledger", source, "--set-budget", "0.1"]) == 2
    assert "cannot go below" in capsys.readouterr().err
    assert main(u + ["ledger", "--list"]) == 0 and source in capsys.readouterr().out.split()
    assert main(u + ["ledger"]) == 2 and "NAME or --list" in capsys.readouterr().err
    assert main(u + ["ledger", source + "-none"]) == 2 and "has no budget" in capsys.readouterr().err
    # a model bigger than what is left is refused, with the ledger's words
    assert main(u + ["model", "delete", source]) == 0
    assert main(u + ["model", "create", source, "--schema", str(schema), "--epsilon", "4"]) == 2
    assert "refused before reading any data" in capsys.readouterr().err


# -- ACL: workers and admin use the ledger; producers and consumers do not ----------------------
def test_acl_users_and_the_ledger(tmp_path, unique_name):
    import importlib.util
    import shutil
    from pathlib import Path

    from streamdp.service.embedded import EmbeddedRedis

    if shutil.which("redis-server") is None:
        pytest.skip("needs the redis-server binary")
    deploy = Path(__file__).resolve().parents[2] / "deploy"
    spec = importlib.util.spec_from_file_location("acl_passwords", deploy / "acl_passwords.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    pws = {u: f"test-{u}-pw" for u in ("admin", "producer", "worker", "consumer")}
    text, _ = tool.render((deploy / "users.acl").read_text(), pws)
    (tmp_path / "users.acl").write_text(text)
    with EmbeddedRedis.start(args=["--aclfile", str(tmp_path / "users.acl")]) as emb:
        hp = emb.url.split("//", 1)[1].rsplit("/", 1)[0]

        def url(user):
            return f"redis://{user}:{pws[user]}@{hp}/0"

        create_model(url("admin"), unique_name, VOTES.schema, n_trees=2, height=2, epsilon=0.5, ledger_budget=1.0)
        worker = RedisLedger(url("worker"))
        assert worker.charge(unique_name, 0.25, who="job", what="DiffPID3", key="j1").epsilon == 0.25
        assert worker.spent(unique_name) == (0.75, 0.0) and len(worker.spends(unique_name)) == 2
        with pytest.raises(BudgetExceeded):
            worker.charge(unique_name, 0.5, who="job", what="DiffPID3")
        assert RedisLedger(url("admin")).sources() == [unique_name]
        for user in ("consumer", "producer"):
            other = RedisLedger(url(user))
            for call in (
                lambda: other.spends(unique_name),
                lambda: other.budget(unique_name),
                lambda: other.charge(unique_name, 0.1, who=user, what="x"),
                lambda: other.set_budget(unique_name, 9.0),
            ):
                with pytest.raises(redis.exceptions.NoPermissionError):
                    call()
        assert RedisLedger(url("admin")).budget(unique_name) == (1.0, 0.0)
