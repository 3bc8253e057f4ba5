from __future__ import annotations

from nodeagent.host import Listener, ProcessInfo
from nodeagent.prechecks.dns_port import evaluate, holders
from nodeagent.wire.protocol import Status


def proc(pid: int, name: str) -> ProcessInfo:
    return ProcessInfo(pid, name, f"/usr/sbin/{name}", (name,))


PROCESSES = [proc(1, "systemd"), proc(420, "systemd-resolved"), proc(77, "dnsmasq")]


def test_free_port_passes() -> None:
    listeners = [Listener("tcp", "0.0.0.0", 22, 5), Listener("udp", "0.0.0.0", 5353, 6)]
    taken = holders(listeners, PROCESSES, 53)
    assert taken == []
    outcome = evaluate(taken)
    assert outcome.status is Status.PASS
    assert outcome.message == "port 53 is free on TCP and UDP"


def test_holders_name_the_process_and_are_deduplicated_and_sorted() -> None:
    listeners = [
        Listener("udp", "127.0.0.53", 53, 420),
        Listener("tcp", "127.0.0.53", 53, 420),
        Listener("udp", "127.0.0.53", 53, 420),  # a second socket of the same process
        Listener("tcp", "127.0.0.54", 53, 420),
    ]
    assert holders(listeners, PROCESSES, 53) == [
        {"protocol": "tcp", "address": "127.0.0.53", "pid": 420, "process": "systemd-resolved"},
        {"protocol": "tcp", "address": "127.0.0.54", "pid": 420, "process": "systemd-resolved"},
        {"protocol": "udp", "address": "127.0.0.53", "pid": 420, "process": "systemd-resolved"},
    ]


def test_holder_without_pid_or_process_is_unknown() -> None:
    listeners = [Listener("udp", "0.0.0.0", 53, None), Listener("tcp", "0.0.0.0", 53, 9999)]
    assert [h["process"] for h in holders(listeners, PROCESSES, 53)] == ["unknown", "unknown"]


def test_systemd_resolved_gets_its_stub_listener_remedy() -> None:
    outcome = evaluate(holders([Listener("udp", "127.0.0.53", 53, 420)], PROCESSES, 53))
    assert outcome.status is Status.FAIL
    assert outcome.message == "port 53 is in use: UDP 127.0.0.53:53 by systemd-resolved (pid 420)"
    assert outcome.remedy == (
        "stop and disable systemd-resolved; for systemd-resolved, turn off its stub listener "
        "instead: DNSStubListener=no in /etc/systemd/resolved.conf and restart it"
    )
    assert outcome.data["holders"][0]["process"] == "systemd-resolved"


def test_other_holders_are_not_told_about_systemd_resolved() -> None:
    outcome = evaluate(holders([Listener("tcp", "0.0.0.0", 53, 77)], PROCESSES, 53))
    assert outcome.message == "port 53 is in use: TCP 0.0.0.0:53 by dnsmasq (pid 77)"
    assert outcome.remedy == "stop and disable dnsmasq"


def test_unknown_holder_is_found_with_ss() -> None:
    taken = holders(
        [Listener("udp", "0.0.0.0", 53, None), Listener("tcp", "0.0.0.0", 53, 77)], PROCESSES, 53
    )
    outcome = evaluate(taken)
    assert outcome.status is Status.FAIL
    assert outcome.message == (
        "port 53 is in use: TCP 0.0.0.0:53 by dnsmasq (pid 77), UDP 0.0.0.0:53 by an unknown process"
    )
    assert outcome.remedy == (
        "stop and disable dnsmasq; find the unnamed holder with `ss -lntup 'sport = :53'` and stop it"
    )
