"""``scontrol`` text parsers (Slurm 22.05 has no ``scontrol --json``): recorded outputs,
continuation lines, durations and times."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attentived.daemon.checks import keeps_accounting
from attentived.daemon.records import SlurmParseError
from attentived.daemon.scontrol_text import (
    parse_config,
    parse_line,
    parse_partitions,
    parse_reservations,
    records,
    slurm_duration,
    slurm_time,
)

R22 = Path(__file__).parent / "fixtures" / "slurm-22.05"


def test_reservations_text():
    resv = {r.name: r for r in parse_reservations((R22 / "scontrol-show-reservation.txt").read_text())}
    assert resv["alice_now"].nodes == ("node1",) and resv["alice_now"].users == ("alice",)
    assert "IGNORE_JOBS" in resv["alice_now"].flags and resv["alice_now"].state == "ACTIVE"
    assert resv["maint_later"].nodes == ("node3", "node4") and not resv["maint_later"].active(time.time())
    assert resv["alice_now"].end_time - resv["alice_now"].start_time == 3600
    assert parse_reservations("No reservations in the system\n") == ()


def test_config():
    conf = parse_config((R22 / "scontrol-show-config.txt").read_text())
    assert conf["SchedulerType"] == "sched/builtin" and conf["PriorityType"] == "priority/multifactor"
    assert conf["SLURM_CONF"].endswith("/etc/slurm.conf") and conf["GresTypes"] == "gpu"
    with pytest.raises(SlurmParseError):
        parse_config("nothing useful\n")


@pytest.mark.parametrize("version", ["slurm-22.05", "slurm-24.11", "slurm-26.05"])
def test_config_says_whether_slurm_keeps_accounting(version):
    """The recorded labs with slurmdbd (22.05's predates accounting in the lab) and, on
    26.05, one without, which prints ``AccountingStorageType = (null)`` there."""
    d = R22.parent / version
    storage = parse_config((d / "scontrol-show-config.txt").read_text())["AccountingStorageType"]
    assert keeps_accounting(storage) == (version != "slurm-22.05"), storage
    if version == "slurm-26.05":
        none = parse_config((d / "scontrol-show-config-no-accounting.txt").read_text())["AccountingStorageType"]
        assert none == "(null)" and not keeps_accounting(none)


def test_durations_and_times():
    assert slurm_duration("UNLIMITED") is None
    assert slurm_duration("1-02:03:04") == 86400 + 7384
    assert slurm_duration("02:03:04") == 7384 and slurm_duration("10:00") == 600 and slurm_duration("5") == 300
    assert slurm_duration("2-03") == 2 * 86400 + 3 * 3600
    with pytest.raises(SlurmParseError):
        slurm_duration("soon")
    assert slurm_time("Unknown") is None and slurm_time("2026-11-29T22:16:22") == time.mktime((2026, 11, 29, 22, 16, 22, 0, 0, -1))
    with pytest.raises(SlurmParseError):
        slurm_time("yesterday")


def test_records_and_line_basics():
    assert list(records("NodeName=a State=IDLE\ncontinued\nNodeName=b\n")) == ["NodeName=a State=IDLE\ncontinued", "NodeName=b"]
    with pytest.raises(SlurmParseError):
        list(records("garbage first\nNodeName=a"))
    d = parse_line("NodeName=n1 Reason=cable cut [root@2024] OS=Linux 6.1 #1 SMP")
    assert d["Reason"] == "cable cut [root@2024]" and d["OS"] == "Linux 6.1 #1 SMP"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_fuzzed_text_never_crashes(text):
    for fn in (parse_reservations, parse_partitions):
        try:
            fn(text)
        except SlurmParseError:
            pass
    try:
        parse_config(text)
    except SlurmParseError:
        pass
