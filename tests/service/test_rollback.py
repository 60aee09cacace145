"""The noise key file and the rollback guard's file: bad files are refused in words, never silently ignored."""

from __future__ import annotations

import pytest

from streamdp.service.rollback import ENV_KEY, NO_KEY, RollbackDetected, RollbackGuard, key_fingerprint, load_noise_key


def _key(tmp_path, data: bytes = bytes(range(32)), mode: int = 0o600):
    path = tmp_path / "noise.key"
    path.write_bytes(data)
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o644, 0o666, 0o640, 0o604, 0o620])
def test_a_key_file_other_users_can_read_or_write_is_refused(tmp_path, mode):
    path = _key(tmp_path, mode=mode)
    with pytest.raises(ValueError, match=f"mode {mode:04o}.*chmod 600"):
        load_noise_key(path)


@pytest.mark.parametrize("data", [bytes(32), b"\xff" * 64, b"a" * 32])
def test_a_constant_key_is_refused(tmp_path, data):
    with pytest.raises(ValueError, match="one byte value repeated"):
        load_noise_key(_key(tmp_path, data))


def test_a_good_key_file_loads_and_an_unset_variable_means_no_key(tmp_path, monkeypatch):
    path = _key(tmp_path)
    assert load_noise_key(path) == bytes(range(32))
    assert load_noise_key(_key(tmp_path, mode=0o400)) == bytes(range(32))
    monkeypatch.setenv(ENV_KEY, str(path))
    assert load_noise_key() == bytes(range(32))
    monkeypatch.delenv(ENV_KEY)
    assert load_noise_key() is None


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_key_variable_is_an_error_not_no_key(monkeypatch, value):
    monkeypatch.setenv(ENV_KEY, value)
    with pytest.raises(ValueError, match="set but empty"):
        load_noise_key()


def test_the_fingerprint_tells_keys_apart_and_is_not_the_key():
    a, b = bytes(range(32)), bytes(range(1, 33))
    assert key_fingerprint(a) == key_fingerprint(a) != key_fingerprint(b)
    assert key_fingerprint(None) == NO_KEY
    assert a.hex() not in key_fingerprint(a) and len(key_fingerprint(a)) == 64


@pytest.mark.parametrize("text", ["", "\n", "1O", "-3", "abc", "1.5"])
def test_a_damaged_guard_file_is_an_error_not_a_disabled_guard(tmp_path, text):
    guard = RollbackGuard(tmp_path, "model-1")
    guard.path.write_text(text)
    with pytest.raises(RollbackDetected, match="guard file .* damaged"):
        guard.check(5)
    with pytest.raises(RollbackDetected, match="guard file .* damaged"):
        guard.record(6)


def test_the_guard_records_and_refuses_below_the_highest_version(tmp_path):
    guard = RollbackGuard(tmp_path, "model-1")
    assert guard.highest == -1  # no file yet: nothing published on this host
    guard.check(0)
    guard.record(4)
    guard.record(2)
    assert guard.highest == 4
    guard.check(4)
    with pytest.raises(RollbackDetected, match="rolled back"):
        guard.check(3)


def test_a_key_variable_naming_no_file_is_refused_without_echoing_it(monkeypatch):
    """The variable holds a path; a key pasted into it by mistake must not be printed back."""
    monkeypatch.setenv(ENV_KEY, "deadbeefcafe0123456789")
    with pytest.raises(ValueError, match=r"names no file: it holds the key file's path, not the key") as e:
        load_noise_key()
    assert "deadbeef" not in str(e.value)
