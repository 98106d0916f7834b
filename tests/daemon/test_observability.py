"""Journal (SQLite, bounded), Prometheus endpoint, sd_notify against a socket the test opens,
and JSON logs with a cycle id on every line."""

from __future__ import annotations

import io
import json
import os
import socket
import urllib.error
import urllib.request

import pytest
import structlog

from attentived.daemon import log as dlog
from attentived.daemon.journal import Journal
from attentived.daemon.notify import Notifier
from attentived.daemon.prom import Metrics, MetricsServer


def test_journal_records_and_rotates(tmp_path):
    j = Journal.in_state_dir(tmp_path / "state", max_rows=100, max_plans=10)
    for i in range(150):
        j.record_cycle(f"c{i}", started=float(i), duration=0.1, policy="fifo", mode="live", status="ok",
                       plan={"order": [str(i)]},
                       outcomes=[{"kind": "priority", "job": str(i), "value": "5", "ok": True, "argv": ["scontrol"]}])
        j.rotate()
    counts = j.counts()
    assert counts["cycles"] == 100 and counts["actions"] == 100 and counts["plans"] == 10
    assert j.last_plan()["order"] == ["149"] and j.cycles(1)[0]["cycle_id"] == "c149"
    assert [a["job_id"] for a in j.actions(job="149")] == ["149"] and j.actions(job="3") == []
    assert len(j.actions(since=140.0)) >= 0
    j.set_pin("7", ["node1", "node2"], "c1")
    assert j.pins() == {"7": ("node1", "node2")}
    j.drop_pins(["7"])
    assert j.pins() == {}
    j.record_planned("c1", "8", ["node1:0"], ["node1"])
    j.record_started("8", ["node1"], ["node1:1"], "same_nodes", 5.0)
    j.record_planned("c2", "8", ["node2:0"], ["node2"])  # does not overwrite a started job
    row = j.planned(["8"])["8"]
    assert json.loads(row["planned_gpus"]) == ["node1:0"] and row["match"] == "same_nodes"
    j.close()
    j2 = Journal.in_state_dir(tmp_path / "state")  # reopens with its data
    assert j2.counts()["cycles"] == 100
    j2.close()


def test_metrics_text_and_server():
    m = Metrics()
    m.cycle_duration.observe(0.3)
    m.actions.inc(kind="priority", result="ok")
    m.actions.inc(kind="pin", result="failed")
    m.queue.set(12)
    m.policy.set(1, policy='we"ird', fallback="0")
    text = m.render()
    assert 'attentived_actions_total{kind="priority",result="ok"} 1' in text
    assert "attentived_queue_length 12" in text and 'attentived_cycle_duration_seconds_bucket{le="0.5"} 1' in text
    assert 'policy="we\\"ird"' in text and "# TYPE attentived_cycle_duration_seconds histogram" in text
    # every metric is served, the stall and idle ones included (a hand-kept list once left them out)
    for name in ("stalled_starts_total", "idle_with_queue_seconds", "accounting_up", "placements_total"):
        assert f"# TYPE attentived_{name} " in text, name
    with pytest.raises(ValueError):
        m.actions.inc(kind="x")
    srv = MetricsServer(m, "127.0.0.1", 0).start()
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/metrics", timeout=5).read().decode()
        assert "attentived_queue_length 12" in body
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/other", timeout=5)
    finally:
        srv.stop()


def _socket(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    s.settimeout(2)
    return s


def test_sd_notify_ready_and_watchdog(tmp_path, monkeypatch):
    path = str(tmp_path / "notify.sock")
    sock = _socket(path)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    n = Notifier()
    assert n.enabled and n.ready(status="up")
    msg = sock.recv(4096).decode()
    assert "READY=1" in msg.splitlines() and "STATUS=up" in msg and f"MAINPID={os.getpid()}" in msg
    assert n.watchdog() and sock.recv(4096) == b"WATCHDOG=1"
    assert n.stopping() and sock.recv(4096) == b"STOPPING=1"
    assert n.status("a\nb") and sock.recv(4096) == b"STATUS=a b"
    sock.close()
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    assert n.watchdog_usec() == 30_000_000
    monkeypatch.setenv("WATCHDOG_PID", "1")
    assert n.watchdog_usec() is None or os.getpid() == 1


def test_sd_notify_abstract_socket_and_disabled(monkeypatch):
    name = f"attentived-test-{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(2)
    assert Notifier(address="@" + name).watchdog() and sock.recv(100) == b"WATCHDOG=1"
    sock.close()
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert not Notifier().enabled and Notifier().ready() is False
    assert Notifier(address="/nonexistent/sock").watchdog() is False


def test_every_log_line_has_a_cycle_id():
    buf = io.StringIO()
    dlog.configure("debug", "json", stream=buf)
    log = structlog.get_logger("t")
    log.info("outside")
    with dlog.bind_cycle("c-42"):
        log.info("inside", x=1)
        log.warning("hostile", name='a"b\nc ünï')
    log.error("after")
    lines = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert [ln["cycle_id"] for ln in lines] == ["-", "c-42", "c-42", "-"]
    assert lines[2]["name"] == 'a"b\nc ünï' and all("timestamp" in ln and "level" in ln for ln in lines)
