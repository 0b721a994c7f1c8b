"""The supervisor's parent-death signal: a failed prctl is said in the server log (the child's stderr), not hidden."""

from __future__ import annotations

import ctypes

from anyjev.serving import supervisor


class _Libc:
    def __init__(self, result: int) -> None:
        self.result = result

    def prctl(self, *args: int) -> int:
        return self.result


def test_a_failed_prctl_is_written_to_the_server_log(monkeypatch, capfd) -> None:
    monkeypatch.setattr(ctypes, "CDLL", lambda *a, **k: _Libc(-1))
    supervisor._set_parent_death_signal()
    err = capfd.readouterr().err
    assert "prctl(PR_SET_PDEATHSIG) failed" in err and "will not stop this server" in err


def test_no_libc_is_written_to_the_server_log(monkeypatch, capfd) -> None:
    def no_libc(*a, **k):
        raise OSError("libc not found")

    monkeypatch.setattr(ctypes, "CDLL", no_libc)
    supervisor._set_parent_death_signal()
    assert "failed (OSError: libc not found)" in capfd.readouterr().err


def test_a_working_prctl_writes_nothing(monkeypatch, capfd) -> None:
    monkeypatch.setattr(ctypes, "CDLL", lambda *a, **k: _Libc(0))
    supervisor._set_parent_death_signal()
    assert capfd.readouterr().err == ""
