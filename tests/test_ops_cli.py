"""The operator commands as an operator types them: status, queue, explain, decisions,
topology --slurm, config check, shadow-report, trace export, start --shadow. Readable tables,
valid JSON, and the error cases (no running daemon, empty queue, unknown job, missing state
directory, bad input) with a clear message and their exit codes. The in-memory Slurm stands
in for slurmctld (``inspect.open_backend`` is replaced); the ``slurm`` test runs the daemon
in shadow mode on the lab and every command against it, as in the issue's "done when"."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attentived.cli import app
from attentived.daemon import config as C
from attentived.daemon.cycle import CycleRunner
from attentived.daemon.topology_source import TopologySource
from attentived.ops import inspect as ins

from .daemon.test_apply import TOPO, cluster, pending, running
from .ops.test_inspect import _cli

ROOT = Path(__file__).parents[1]


@pytest.fixture(autouse=True)
def _logs_to_this_tests_stderr():
    """A CliRunner run elsewhere may leave structlog writing to its closed stream."""
    from attentived.daemon import log as dlog

    dlog.configure("warning", "json", stream=sys.stderr)


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A config file, and the in-memory Slurm behind every command that reads Slurm."""
    state = tmp_path / "state"
    conf = tmp_path / "config.toml"
    conf.write_text(f'partitions = ["main"]\nstate_dir = "{state}"\nmetrics_port = 0\n')
    fake = cluster([pending("11", "alice", 4), pending("12", "bob", 1, t=1), pending("13", "carol", 2, t=2)],
                   run=[running(str(100 + i), "root", f"node{i}", range(7), limit=3600 * i) for i in range(1, 5)])
    monkeypatch.setattr(ins, "open_backend", lambda cfg: fake)
    monkeypatch.setattr(ins, "load_topology", lambda **kw: (TOPO, TopologySource("slurm", ("gres.conf",), (0.0,))))
    return conf, state, fake


def run_cycles(conf: Path, fake, n: int = 1, shadow: bool = False) -> None:
    e = CycleRunner(C.load(conf), backend=fake, topology=TOPO)
    e.shadow = shadow
    for _ in range(n):
        e.run_cycle()
    e.journal.close()
    if e._observer is not None:
        e._observer.close()


# ---- status -----------------------------------------------------------------------------------------


def test_status_missing_state_dir_and_not_running(site):
    conf, state, fake = site
    r = invoke("status", "-c", str(conf))
    assert r.exit_code == 1 and "does not exist" in r.stdout and "reachable" in r.stdout
    run_cycles(conf, fake)
    r = invoke("status", "-c", str(conf))
    assert r.exit_code == 3 and "not running" in r.stdout and "its last run" in r.stdout
    r = invoke("status", "-c", str(conf), "--json", "--no-slurm")
    assert r.exit_code == 3
    doc = json.loads(r.stdout)
    assert doc["daemon"]["running"] is False and doc["last_cycle"]["ok"] and doc["slurm"]["reachable"] is None


def test_status_of_a_running_daemon(site):
    conf, state, fake = site
    run_cycles(conf, fake)
    status = json.loads((state / "status.json").read_text())
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "attentived"])
    try:
        (state / "status.json").write_text(json.dumps({**status, "pid": p.pid, "updated": time.time()}))
        r = invoke("status", "-c", str(conf))
        assert r.exit_code == 0, r.output
        assert f"running (pid {p.pid}" in r.stdout and "fifo+consolidate" in r.stdout and "main" in r.stdout
    finally:
        p.kill()
        p.wait()


def test_bad_config_is_exit_2_everywhere(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("interval = 'fast'\n")
    for cmd in (["status"], ["queue"], ["explain", "1"], ["decisions"], ["shadow-report"], ["topology", "--slurm"],
                ["trace", "export", "-o", str(tmp_path / "t.csv")]):
        r = invoke(*cmd, "-c", str(bad))
        assert r.exit_code == 2 and "interval: must be a number" in r.stderr, cmd
    r = invoke("queue", "-c", str(tmp_path / "missing.toml"), "--json")
    assert r.exit_code == 2 and json.loads(r.stdout)["exit_code"] == 2


# ---- queue, explain ----------------------------------------------------------------------------------


def test_queue_table_json_and_empty(site):
    conf, state, fake = site
    r = invoke("queue", "-c", str(conf))
    assert r.exit_code == 0, r.output
    assert "planned now by fifo+consolidate" in r.stdout and "hold" in r.stdout and "Slurm would start next" in r.stdout
    doc = json.loads(invoke("queue", "-c", str(conf), "--json").stdout)
    assert [j["job"] for j in doc["jobs"]] == ["11", "12", "13"]
    for j in list(fake.jobs):
        if fake.jobs[j].pending:
            del fake.jobs[j]
    r = invoke("queue", "-c", str(conf))
    assert r.exit_code == 0 and "no pending GPU jobs" in r.stdout
    assert json.loads(invoke("queue", "-c", str(conf), "--json").stdout)["jobs"] == []


def test_queue_when_slurm_is_down_shows_the_last_plan(site):
    conf, state, fake = site
    run_cycles(conf, fake)
    fake.snapshot_error = ins.SlurmError("slurm_load_jobs error: Unable to contact slurm controller")
    r = invoke("queue", "-c", str(conf))
    assert r.exit_code == 1 and "Slurm is not reachable" in r.stderr and "the daemon's last plan" in r.stdout


def test_explain_table_json_unknown_and_malformed(site):
    conf, state, fake = site
    r = invoke("explain", "12", "-c", str(conf))
    assert r.exit_code == 0, r.output
    for text in ("is #2 of 3", "competing jobs", "placement", "fairness context", "Slurm's view"):
        assert text in r.stdout, text
    doc = json.loads(invoke("explain", "13", "-c", str(conf), "--json").stdout)
    assert doc["rank"] == 3 and doc["fairness"]["user"] == "carol"
    r = invoke("explain", "4242", "-c", str(conf))
    assert r.exit_code == 1 and "job 4242: unknown to Slurm" in r.stderr
    r = invoke("explain", "12x", "-c", str(conf), "--json")
    assert r.exit_code == 2 and json.loads(r.stdout)["exit_code"] == 2
    r = invoke("explain", "101", "-c", str(conf))
    assert r.exit_code == 0 and "is RUNNING on node1" in r.stdout


def test_explain_under_the_packing_rule_shows_the_rules_placement(site):
    """With ``pack=1`` the rule places every start: the placement shown is the plan's, and
    the agent's own pick is only an alternative, named as replaced."""
    conf, state, fake = site
    config = conf.read_text()
    for policy in ("attentive:pack=1", "attentive:one_node=1,pack=1"):  # one_node wraps the packing rule
        conf.write_text(config + f'policy = "{policy}"\n')
        doc = json.loads(invoke("explain", "12", "-c", str(conf), "--json").stdout)
        assert doc["learned"] and doc["decision"]["action"] == "start", policy
        assert doc["placement"]["source"] == "plan start, by the packing rule", policy
        assert [a["source"] for a in doc["alternatives"]] == ["agent (pack=1 places by the packing rule instead)"]


# ---- decisions, topology, config check ------------------------------------------------------------


def test_decisions(site):
    conf, state, fake = site
    r = invoke("decisions", "-c", str(conf))
    assert r.exit_code == 1 and "does not exist" in r.stderr
    run_cycles(conf, fake, n=2)
    r = invoke("decisions", "-c", str(conf))
    assert r.exit_code == 0 and "cycles (newest first)" in r.stdout and "exclude" in r.stdout  # the hold: an ExcNodeList
    doc = json.loads(invoke("decisions", "-c", str(conf), "--job", "11", "--json").stdout)
    assert doc["plans"][0]["action"] == "hold" and doc["actions"]
    r = invoke("decisions", "-c", str(conf), "--job", "11")
    assert r.exit_code == 0 and "in the daemon's plans" in r.stdout
    r = invoke("decisions", "-c", str(conf), "--since", "yesterday")
    assert r.exit_code == 2 and "--since" in r.stderr
    r = invoke("decisions", "-c", str(conf), "--since", "1h", "--job", "999")
    assert r.exit_code == 1 and "not in the journal" in r.stderr


def test_topology_slurm(site):
    conf, state, fake = site
    r = invoke("topology", "--slurm", "-c", str(conf))
    assert r.exit_code == 0, r.output
    assert "4 free" in r.stdout and "jobs on GPUs" in r.stdout and "101 (root)" in r.stdout
    doc = json.loads(invoke("topology", "--config", str(conf), "--json").stdout)
    assert doc["used_gpus"] == 28 and doc["free_gpus"] == 4
    plain = invoke("topology", "--nodes", "2", "--json")  # the offline forms still work
    assert plain.exit_code == 0 and json.loads(plain.stdout)["gpus"] == 16


def test_config_check(site, tmp_path):
    conf, state, fake = site
    r = invoke("config", "check", str(conf))
    assert r.exit_code == 0, r.output
    assert "ready" in r.stdout and "SchedulerType" in r.stdout
    doc = json.loads(invoke("config", "check", str(conf), "--json").stdout)
    assert doc["ok"] and {c["check"] for c in doc["checks"]} >= {"config", "policy", "slurm", "partitions", "topology"}
    fake._config["PriorityType"] = "priority/basic"
    fake._config["GresTypes"] = ""
    r = invoke("config", "check", str(conf))
    assert r.exit_code == 1 and "not ready" in r.stdout and "GresTypes" in r.stdout
    bad = tmp_path / "typo.toml"
    bad.write_text("polcy = 'fifo'\n")
    r = invoke("config", "check", str(bad))
    assert r.exit_code == 2 and "did you mean 'policy'" in r.stderr
    r = invoke("config", "check", str(conf), "--no-slurm")
    assert r.exit_code == 0


# ---- shadow-report, trace export, start --shadow ----------------------------------------------------


def test_shadow_report_errors_and_output(site, tmp_path):
    conf, state, fake = site
    r = invoke("shadow-report", "-c", str(conf))
    assert r.exit_code == 1 and "does not exist" in r.stderr
    run_cycles(conf, fake, shadow=True)
    r = invoke("shadow-report", "-c", str(conf))
    assert r.exit_code == 1 and "no finished job" in r.stderr
    fake.start("11", {"node1": [7], "node2": [7], "node3": [7], "node4": [7]}, at=fake.now + 30)
    run_cycles(conf, fake, shadow=True)
    fake.finish("11", at=fake.now + 600)
    run_cycles(conf, fake, shadow=True)
    r = invoke("shadow-report", "-c", str(conf), "--until", str(fake.now + 10_000), "--out", str(tmp_path / "rep"))
    assert r.exit_code == 0, r.output
    assert "avg JCT" in r.stdout and "comm cost" in r.stdout and "projected change" in r.stdout
    assert (tmp_path / "rep" / "shadow-report.png").exists()
    doc = json.loads(invoke("shadow-report", "-c", str(conf), "--until", str(fake.now + 10_000), "--json",
                            "-p", "fifo", "-p", "fifo+consolidate").stdout)
    assert set(doc["summaries"]) == {"slurm (observed)", "fifo", "fifo+consolidate"}
    # Slurm spread job 11 over four nodes; the policies place it on one island
    assert doc["differences"]["fifo+consolidate"]["comm_cost"]["change"] < 0
    r = invoke("shadow-report", "-c", str(conf), "-p", "nonsense")
    assert r.exit_code == 2 and "unknown policy" in r.stderr
    r = invoke("shadow-report", "-c", str(conf), "--since", "2h", "--until", "3h")  # both ago: ends before it starts
    assert r.exit_code == 2 and "--until (3h) must be after --since (2h)" in r.stderr
    r = invoke("shadow-report", "-c", str(conf), "-p", "fifo", "-p", "fifo")
    assert r.exit_code == 2 and "policy fifo given twice" in r.stderr
    (tmp_path / "a-file").write_text("")
    r = invoke("shadow-report", "-c", str(conf), "--out", str(tmp_path / "a-file"))
    assert r.exit_code == 2 and "is a file, not a folder" in r.stderr


def test_trace_export_errors(site, tmp_path):
    conf, state, fake = site
    r = invoke("trace", "export", "-c", str(conf), "-o", str(tmp_path / "t.csv"), "--since", "soon")
    assert r.exit_code == 2 and "--since" in r.stderr
    r = invoke("trace", "export", "-c", str(conf), "-o", str(tmp_path))
    assert r.exit_code == 2 and "is a folder; give a file name" in r.stderr
    r = invoke("trace", "export", "-c", str(conf), "-o", str(tmp_path / "t.csv"))
    assert r.exit_code == 1 and "no finished GPU job" in r.stderr and not (tmp_path / "t.csv").exists()
    fake.finish("101", at=fake.now + 100)
    r = invoke("trace", "export", "-c", str(conf), "-o", str(tmp_path / "t.csv"), "--until", str(fake.now + 1000))
    assert r.exit_code == 0 and "wrote" in r.stderr and (tmp_path / "t.csv").exists()


def test_start_shadow_flag_reaches_the_service(monkeypatch):
    seen = {}

    def fake_main(config, **kw):
        seen.update(kw)
        return 0

    monkeypatch.setattr("attentived.daemon.service.main", fake_main)
    r = invoke("start", "--shadow", "--once")
    assert r.exit_code == 0 and seen == {"dry_run": False, "once": True, "shadow": True}


# ---- the lab: every command, against a daemon in shadow mode ----------------------------------------


@pytest.mark.slurm
def test_every_command_on_the_lab_with_a_shadow_daemon(clean_lab, tmp_path):
    from .daemon.test_daemon_slurm import (
        busy_cluster,
        lab_config_file,
        ours,
        wait_until,
    )

    lab = clean_lab
    state = tmp_path / "state"
    conf = lab_config_file(lab, tmp_path)
    r = _cli("status", "-c", str(conf))
    assert r.returncode == 1 and "does not exist" in r.stdout  # never ran
    daemon = subprocess.Popen([sys.executable, "-m", "attentived", "start", "--shadow", "--config", str(conf)],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: (state / "status.json").exists(), timeout=30, what="first cycle")
        blockers = busy_cluster(lab, gpus_per_node=4)  # 4 of 8 GPUs free on each node
        ids = {}
        for name, user, gpus, secs in (("A", "alice", 4, 2), ("B", "bob", 2, 2), ("C", "carol", 1, 1),
                                       ("D", "alice", 2, 600), ("E", "bob", 8, 600)):
            ids[name] = str(lab.submit(user, gpus, script=f"sleep {secs}", name=name, extra_args=["--time", "5"]))
        for name in "ABC":
            lab.wait_for_state(int(ids[name]), "COMPLETED", timeout=60)
        time.sleep(1.5)  # two shadow cycles see the ends
        st = json.loads(_cli("status", "-c", str(conf), "--json").stdout)
        assert st["daemon"]["running"] and st["mode"] == "shadow" and st["slurm"]["reachable"]
        q = _cli("queue", "-c", str(conf))
        assert q.returncode == 0 and "daemon shadow" in q.stdout
        qj = json.loads(_cli("queue", "-c", str(conf), "--json").stdout)
        assert {j["job"] for j in qj["jobs"]} >= {ids["E"]}
        e = _cli("explain", ids["E"], "-c", str(conf), "--json")
        assert e.returncode == 0 and json.loads(e.stdout)["job"]["user"] == "bob"
        assert _cli("explain", ids["A"], "-c", str(conf)).returncode == 0
        d = json.loads(_cli("decisions", "-c", str(conf), "--json").stdout)
        assert d["cycles"] and all(c["mode"] == "shadow" for c in d["cycles"]) and all(a["dry_run"] for a in d["actions"])
        assert _cli("topology", "--slurm", "-c", str(conf)).returncode == 0
        assert _cli("config", "check", str(conf)).returncode == 0
        assert ours(lab) == {}  # shadow: no reservation, ever
        rep = _cli("shadow-report", "-c", str(conf), "--json", "--out", str(tmp_path / "rep"))
        assert rep.returncode == 0, rep.stderr
        doc = json.loads(rep.stdout)
        assert doc["jobs"]["compared"] >= 3 and (tmp_path / "rep" / "shadow-report.png").exists()
        out = tmp_path / "trace.csv"
        x = _cli("trace", "export", "-c", str(conf), "-o", str(out), "--json")
        assert x.returncode == 0, x.stderr
        assert json.loads(x.stdout)["jobs"] >= 3
        assert _cli("replay", str(out), "--policy", "fifo").returncode == 0
        for b in blockers:
            lab.run(["scancel", b])
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    r = _cli("status", "-c", str(conf))
    assert r.returncode == 3 and "not running" in r.stdout


def test_the_example_config_lists_every_key_and_is_valid():
    from attentived.daemon.config import KEYS

    path = ROOT / "systemd" / "config.example.toml"
    cfg = C.load(path)
    text = path.read_text()
    for k in KEYS:
        assert f"\n{k.name} = " in text, k.name
        assert getattr(cfg, k.name) == (tuple(k.default) if isinstance(k.default, list) else k.default), k.name
    r = invoke("config", "check", str(path), "--no-slurm")
    assert r.exit_code == 0 and "valid" in r.stdout


def _strict(text: str):
    def reject(name):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=reject)


def test_json_is_strict_even_with_unlimited_jobs(site, tmp_path):
    conf, state, fake = site
    sjf = tmp_path / "sjf.toml"
    sjf.write_text(conf.read_text() + 'policy = "sjf+consolidate"\n')  # jobs without time limits: est. run = inf
    doc = _strict(invoke("queue", "-c", str(sjf), "--json").stdout)
    assert doc["jobs"][0]["score"] is None and doc["jobs"][0]["score_label"] == "est. run unlimited"
    for cmd in (["explain", "12"], ["topology", "--slurm"], ["status", "--no-slurm"]):
        _strict(invoke(*cmd, "-c", str(sjf), "--json").stdout)
