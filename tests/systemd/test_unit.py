"""The shipped systemd unit verifies and keeps the settings the daemon relies on."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "systemd" / "attentived.service"


class _CaseSensitive(configparser.ConfigParser):
    """Keys are case-sensitive in systemd (ConfigParser lower-cases them)."""

    def optionxform(self, optionstr: str) -> str:
        return optionstr


def _service() -> configparser.SectionProxy:
    cp = _CaseSensitive(strict=False, interpolation=None)
    cp.read_string(UNIT.read_text())
    return cp["Service"]


def test_unit_declares_notify_watchdog_restart_and_hardening():
    s = _service()
    assert s["Type"] == "notify"
    # 3x the default interval (10 s) at least, and 3x one Slurm command's timeout (30 s)
    assert int(s["WatchdogSec"]) >= 3 * 30
    assert s["Restart"] == "on-failure"
    assert s["User"] == "attentived" and s["StateDirectory"] == "attentived" and s["LogsDirectory"] == "attentived"
    for key in ("ProtectSystem", "ProtectHome", "NoNewPrivileges", "PrivateTmp"):
        assert key in s
    # munge's socket is AF_UNIX; slurmctld is reached over TCP.
    assert set(s["RestrictAddressFamilies"].split()) == {"AF_UNIX", "AF_INET", "AF_INET6"}
    assert "start --config /etc/attentived/config.toml" in s["ExecStart"]


def test_systemd_analyze_verify_passes(tmp_path):
    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.skip("systemd-analyze is not installed here")
    attentived = Path(sys.executable).parent / "attentived"
    unit = tmp_path / "attentived.service"
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/attentived", str(attentived)))
    r = subprocess.run([exe, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    if r.returncode != 0 and "attentived.service" not in r.stderr:
        # systemd-analyze itself failed (no system manager in a container), not our unit.
        pytest.skip(f"systemd-analyze cannot run here: {r.stderr.strip()[:200]}")
    assert r.returncode == 0, r.stderr
    assert "attentived.service" not in r.stderr, r.stderr  # no warnings about our unit
