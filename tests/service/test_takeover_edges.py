"""Edge cases of the takeover of a gone consumer's entries (review findings; a real Redis)."""

from __future__ import annotations

import pytest

from streamdp.service.connection import connect
from streamdp.service.group import PID_SPACE, GroupReader, gone, holders
from streamdp.service.keys import Keys

pytestmark = pytest.mark.skipif(not PID_SPACE, reason="needs /proc (the boot id and pid namespace)")

#: A pid no process can have (above the kernel's pid_max ceiling, 2**22): its consumer is provably gone.
NO_PID = 2**22 + 7


@pytest.mark.parametrize("pid", ["\u00b2", "\u0661\u0662\u0663\u0664\u0665\u0666", "\uff10\uff10"])
def test_a_pid_field_of_other_digits_is_never_gone_and_never_raises(pid):
    # str.isdigit() is true of '²' (int() refuses it: ValueError from holders(), so stats and every read fail)
    # and of Arabic-Indic digits (int() reads 123456: a name never made by consumer_name() was taken for gone)
    assert gone(f"h-{pid}-abcdef-{PID_SPACE}") is False


def test_a_gone_consumer_with_a_lost_entry_is_taken_over_whole(redis_url, unique_name):
    """A gone consumer whose first pending entry was trimmed from the stream: every entry it still holds is taken
    over at once, not the first ``count`` less the lost one, the rest left for ``claim_idle_ms``."""
    r = connect(redis_url)
    stream, group = Keys(unique_name).records, "g"
    r.xgroup_create(stream, group, id="0", mkstream=True)
    ids = [r.xadd(stream, {"d": str(i)}) for i in range(3)]
    dead = f"h-{NO_PID}-abcdef-{PID_SPACE}"
    assert gone(dead)
    r.xreadgroup(group, dead, {stream: ">"}, count=3)
    r.xdel(stream, ids[0])  # trimmed while pending (counted lost_trimmed)
    reader = GroupReader(r, stream, group, "me", block_ms=10, claim_idle_ms=60_000, claim_every_s=3600)
    got = [e.id for e in reader.read(2)] + [e.id for e in reader.read(2)]
    assert sorted(got) == sorted(i.decode() for i in ids[1:])
    assert dead not in {h.name for h in holders(r, stream, group)}
    r.close()


def test_takeover_and_ledger_unit_scripts_run_on_a_cluster(cluster_url, unique_name):
    """The takeover script and the ledger's unit script touch only keys passed in KEYS, of one slot."""
    from streamdp.privacy.ledger import UnitMismatch
    from streamdp.service.ledger_store import RedisLedger

    r = connect(cluster_url)
    stream, group = Keys(unique_name).records, "g"
    r.xgroup_create(stream, group, id="0", mkstream=True)
    ids = [r.xadd(stream, {"d": str(i)}) for i in range(2)]
    dead = f"h-{NO_PID}-abcdef-{PID_SPACE}"
    r.xreadgroup(group, dead, {stream: ">"}, count=2)
    reader = GroupReader(r, stream, group, "me", block_ms=10, claim_idle_ms=60_000, claim_every_s=3600)
    assert sorted(e.id for e in reader.read(5)) == sorted(i.decode() for i in ids)
    led = RedisLedger(r)
    led.set_budget(unique_name, 1.0)
    assert led.declare_unit(unique_name, "user") == "person:user"
    with pytest.raises(UnitMismatch):
        led.charge(unique_name, 0.1, who="t", what="t")
    led.charge(unique_name, 0.1, who="t", what="t", privacy_id="user", max_records_per_id=2)
    assert led.unit(unique_name) == "person:user"
