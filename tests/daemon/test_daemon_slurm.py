"""The daemon against the real Slurm lab (marker ``slurm``; fixtures in tests/conftest.py).

Every check reads Slurm itself (``scontrol show job``, reservations): jobs start in the
plan's order on the planned nodes, multi-GPU jobs inside one node when planned so, no
attentived reservation outlives its job, ``--dry-run`` changes nothing, jobs in partition
``other`` are untouched, and a second identical cycle issues no updates.

Jobs run ``sleep`` for minutes and the test ends them with ``scancel`` when it wants GPUs
to free up: the scenario is then deterministic and the whole file takes about a minute.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from attentived.daemon import config as C
from attentived.daemon.cycle import CycleRunner
from attentived.ops.lab import parse_scontrol_line
from attentived.topology import hostlist

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).parents[2]


def config_for(lab, tmp_path, **kw) -> C.Config:
    values: dict[str, Any] = dict(interval=0.5, partitions=("main",), policy="fifo+consolidate", state_dir=str(tmp_path / "state"),
                  slurm_conf=str(lab.slurm_conf), metrics_port=0, log_level="warning")
    values.update(kw)
    return C.Config(**values)


def runner_for(lab, tmp_path, **kw) -> CycleRunner:
    return CycleRunner(config_for(lab, tmp_path, **kw))


def lab_config_file(lab, tmp_path, extra: str = ""):
    """A daemon config file for the lab (partition main, state in ``tmp_path/state``, no
    metrics port, 0.5 s cycles, warnings only) plus ``extra`` TOML lines."""
    conf = tmp_path / "cfg.toml"
    conf.write_text(f'partitions = ["main"]\nslurm_conf = "{lab.slurm_conf}"\nstate_dir = "{tmp_path / "state"}"\n'
                    'metrics_port = 0\ninterval = 0.5\nlog_level = "warning"\n' + extra)
    return conf


def jobs_now(lab) -> dict[str, dict[str, str]]:
    out = {}
    for line in lab.scontrol("-o", "-d", "show", "job").splitlines():
        if line.startswith("JobId="):
            d = parse_scontrol_line(line)
            out[d["JobId"]] = d
    return out


def ours(lab) -> dict[str, dict[str, str]]:
    return {k: v for k, v in lab.reservations().items() if k.startswith("attentived-")}


def gres_indices(lab, job_id: str) -> dict[str, list[int]]:
    """Per node, the GPU indices Slurm gave a job (``scontrol -o -d show job``'s node groups)."""
    import re

    line = lab.scontrol("-o", "-d", "show", "job", job_id)
    out: dict[str, list[int]] = {}
    for nodes, gres in re.findall(r"\bNodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=(\S*)", line):
        idx: list[int] = []
        for m in re.finditer(r"IDX:([0-9,-]+)\)", gres):
            for part in m.group(1).split(","):
                lo, _, hi = part.partition("-")
                idx.extend(range(int(lo), int(hi or lo) + 1))
        for node in hostlist.expand(nodes):
            out[node] = idx
    return out


SITE = ROOT / ".venv" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def skip_unless_start_as() -> None:
    if not Path("/usr/bin/python3").exists() or not SITE.is_dir():
        pytest.skip("needs /usr/bin/python3 and the venv's site-packages")


def start_as(user: str, conf: Path, *args: str) -> subprocess.CompletedProcess:
    """``attentived start`` as a non-root lab user. The venv's interpreter may live under
    /root (not readable by that user), so the system python3 loads the venv's site dir."""
    code = ("import site,sys,runpy; site.addsitedir(sys.argv[1]); sys.argv=['attentived']+sys.argv[2:]; "
            "runpy.run_module('attentived', run_name='__main__')")
    proc = subprocess.run(["runuser", "-u", user, "--", "/usr/bin/python3", "-c", code, str(SITE), "start",
                           "--config", str(conf), *args], capture_output=True, text=True, timeout=120, cwd="/tmp")
    if proc.returncode != 0 and "No module named" in proc.stderr:
        pytest.skip(f"system python3 cannot load the venv: {proc.stderr[-300:]}")
    return proc


def wait_until(pred, timeout=15.0, poll=0.1, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(poll)
    raise AssertionError(f"timed out waiting for {what}")


def busy_cluster(lab, gpus_per_node=7):
    """Root's blockers hold 7 of 8 GPUs on each node (10-minute limit, so holds are stable)."""
    blockers = {}
    for i, node in enumerate(lab.node_names(), start=1):
        jid = lab.submit(None, gpus_per_node, script="sleep 600", name=f"blocker{i}",
                         extra_args=["--nodelist", node, "--time", "10"])
        blockers[str(jid)] = node
    for jid in blockers:
        lab.wait_for_state(int(jid), "RUNNING", timeout=20)
    return blockers


MIX = [("A", "alice", 4, 1), ("B", "bob", 8, 1), ("C", "carol", 2, 1), ("D", "alice", 1, 1),
       ("E", "bob", 2, 1), ("F", "carol", 3, 1), ("G", "alice", 8, 1), ("H", "bob", 16, 2)]


def queue_mix(lab):
    ids = {}
    for name, user, gpus, nodes in MIX:
        ids[name] = str(lab.submit(user, gpus, nodes=nodes, script="sleep 600", name=name, extra_args=["--time", "30"]))
    ids["O"] = str(lab.submit("carol", 1, partition="other", script="sleep 600", name="O", extra_args=["--time", "30"]))
    return ids


def slurm_view(lab):
    """What the daemon may change, for every job and reservation."""
    jobs = {k: (v.get("Priority"), v.get("ReqNodeList"), v.get("Reservation"), v.get("JobState"), v.get("NodeList"))
            for k, v in jobs_now(lab).items()}
    return jobs, sorted(lab.reservations())


def test_plan_is_carried_out_by_slurm(clean_lab, tmp_path):
    lab = clean_lab
    blockers = busy_cluster(lab)
    ids = queue_mix(lab)
    name_of = {v: k for k, v in ids.items()}
    other_before = jobs_now(lab)[ids["O"]]
    eng = runner_for(lab, tmp_path)
    planned_at: dict[str, int] = {}
    planned_nodes: dict[str, list[str]] = {}
    planned_gpus: dict[str, list[str]] = {}
    started_step: dict[str, int] = {}
    no_churn_checks = 0
    matches: dict[str, bool] = {}
    seen: dict[str, tuple[list[str], dict[str, list[int]]]] = {}
    for step in range(20):
        res = eng.run_cycle()
        assert res.ok, res.error
        plan = res.plan_doc
        now_jobs = jobs_now(lab)
        # Slurm's priorities follow the daemon's order: starts, holds, then the rest
        prio = [int(now_jobs[j]["Priority"]) for j in plan["priority_order"]]
        assert prio == sorted(prio, reverse=True) and len(set(prio)) == len(prio), (plan["priority_order"], prio)
        # the other partition's job is untouched
        o = now_jobs[ids["O"]]
        assert (o["Priority"], o.get("ReqNodeList"), o.get("Reservation")) == \
               (other_before["Priority"], other_before.get("ReqNodeList"), other_before.get("Reservation"))
        # every attentived reservation belongs to a held, still pending job
        held = {h["job"] for h in plan["holds"] if h["reservation"]}
        for rname, r in ours(lab).items():
            jid = rname[len("attentived-"):]
            assert jid in held and now_jobs[jid]["JobState"] == "PENDING", (rname, now_jobs.get(jid, {}).get("JobState"))
            hold = next(h for h in plan["holds"] if h["job"] == jid)
            assert sorted(hostlist.expand(r["Nodes"])) == sorted(hold["nodes"]), (rname, r["Nodes"], hold["nodes"])
        for s in plan["starts"]:
            planned_at.setdefault(s["job"], step)
            planned_nodes[s["job"]], planned_gpus[s["job"]] = s["nodes"], s["gpus"]
        # planned starts run, on the planned nodes
        for s in plan["starts"]:
            lab.wait_for_state(int(s["job"]), "RUNNING", timeout=15)
            started_step.setdefault(s["job"], step)
            seen[s["job"]] = (lab_nodes(jobs_now(lab)[s["job"]]), gres_indices(lab, s["job"]))
        # nothing the plan did not start may have started
        now_jobs = jobs_now(lab)
        for jid, d in now_jobs.items():
            if jid in name_of and name_of[jid] != "O" and d["JobState"] == "RUNNING":
                assert jid in planned_at, f"job {name_of[jid]} started without a plan"
        # a second cycle on the settled cluster changes nothing
        again = eng.run_cycle()
        assert again.ok and again.updates == 0, [a.describe() for a in again.actions]
        no_churn_checks += 1
        pending_mix = [j for n, j in ids.items() if n != "O" and jobs_now(lab)[j]["JobState"] == "PENDING"]
        if not pending_mix:
            break
        # free the held nodes: end whatever runs there (blockers or earlier mix jobs)
        holds = plan["holds"] or again.plan_doc["holds"]
        assert holds, f"pending {pending_mix} but no hold"
        hold_nodes = set(holds[0]["nodes"])
        held_jobs = {h["job"] for h in holds}  # held jobs may start on their held nodes by themselves (pinned)
        for jid, d in jobs_now(lab).items():
            if d["JobState"] == "RUNNING" and set(lab_nodes(d)) & hold_nodes and jid not in held_jobs:
                lab.run(["scancel", jid])
        wait_until(lambda hold_nodes=hold_nodes, held_jobs=held_jobs: not any(
            jid not in held_jobs and d["JobState"] in ("RUNNING", "COMPLETING") and set(lab_nodes(d)) & hold_nodes
            for jid, d in jobs_now(lab).items()), what="held nodes to free up")
        time.sleep(1.2)  # one Slurm scheduling pass: held jobs start on their held nodes, or wait for the next cycle
        for h in holds:
            d = jobs_now(lab)[h["job"]]
            if d["JobState"] == "RUNNING":
                assert sorted(lab_nodes(d)) == sorted(h["nodes"]), (d, h)
                planned_at.setdefault(h["job"], step)
                started_step.setdefault(h["job"], step)
                planned_nodes[h["job"]], planned_gpus[h["job"]] = h["nodes"], h["gpus"]
                seen[h["job"]] = (lab_nodes(d), gres_indices(lab, h["job"]))
            else:
                assert d["JobState"] == "PENDING", d
    else:
        pytest.fail("the mix did not start within 20 cycles")

    final = jobs_now(lab)
    for name in (n for n, *_ in MIX):
        jid = ids[name]
        assert jid in planned_at and jid in seen, f"{name} never planned or never seen running"
        nodes, idx = seen[jid]
        assert sorted(nodes) == sorted(planned_nodes[jid]), (name, nodes, planned_nodes[jid])
        assert sum(len(v) for v in idx.values()) == dict((n, g) for n, _u, g, _k in MIX)[name], (name, idx)
        planned_idx = {}
        for g in planned_gpus[jid]:
            node, _, i = g.partition(":")
            planned_idx.setdefault(node, []).append(int(i))
        matches[name] = {n: sorted(v) for n, v in idx.items()} == planned_idx
        if len(planned_nodes[jid]) == 1:
            assert len(nodes) == 1  # multi-GPU job inside one node, as planned
    # start order = plan order: a job planned in a later cycle never started earlier
    order = sorted(planned_at, key=lambda j: (planned_at[j], int(j)))
    assert [started_step[j] for j in order] == sorted(started_step[j] for j in order)
    # FIFO here: the mix starts in submission order
    assert [name_of[j] for j in order] == [n for n, *_ in MIX]
    assert no_churn_checks >= 3
    print("GPU indices as planned:", matches)
    placements = {p["job_id"]: p for p in eng.journal.iter_placements()}
    assert {placements[ids[n]]["match"] for n, *_ in MIX} <= {"exact", "same_nodes"}
    # once every job has ended, no attentived reservation is left
    for jid in list(final):
        lab.run(["scancel", jid], check=False)
    wait_until(lambda: all(d["JobState"] not in ("RUNNING", "PENDING", "COMPLETING") for d in jobs_now(lab).values()),
               what="jobs to end")
    assert eng.run_cycle().ok and ours(lab) == {}
    del blockers


def lab_nodes(job: dict[str, str]) -> list[str]:
    nl = job.get("NodeList", "")
    return hostlist.expand(nl) if nl and nl != "(null)" else []


def test_dry_run_changes_nothing(clean_lab, tmp_path):
    lab = clean_lab
    busy_cluster(lab)
    queue_mix(lab)
    before = slurm_view(lab)
    eng = runner_for(lab, tmp_path, dry_run=True)
    res = eng.run_cycle()
    assert res.ok and res.dry_run and any(a.kind == "priority" for a in res.actions) and res.plan_doc["holds"]
    assert slurm_view(lab) == before
    # the command operators run: logs a plan, touches nothing
    conf = tmp_path / "c.toml"
    conf.write_text(f'partitions = ["main"]\nstate_dir = "{tmp_path / "cli-state"}"\nslurm_conf = "{lab.slurm_conf}"\n'
                    'metrics_port = 0\n')
    proc = subprocess.run([sys.executable, "-m", "attentived", "start", "--config", str(conf), "--once", "--dry-run"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in proc.stderr.splitlines() if x.startswith("{")]
    plan = next(x for x in lines if x["event"] == "cycle.plan")
    assert plan["cycle_id"] != "-" and plan["dry_run"] and plan["holds"] and plan["pending"] == len(MIX)
    assert all("cycle_id" in x for x in lines)
    assert any(x["event"] == "slurm.action" and x["dry_run"] for x in lines)
    assert slurm_view(lab) == before


def test_attach_mode_reservation_never_outlives_its_job(clean_lab, tmp_path):
    lab = clean_lab
    blockers = busy_cluster(lab)
    a = str(lab.submit("alice", 8, script="sleep 2", name="A", extra_args=["--time", "30"]))  # whole node: reservable
    b = str(lab.submit("bob", 8, script="sleep 600", name="B", extra_args=["--time", "30"]))
    eng = runner_for(lab, tmp_path, hold_mode="attach")
    res = eng.run_cycle()
    assert res.ok
    (hold,) = [h for h in res.plan_doc["holds"] if h["job"] == a]
    assert jobs_now(lab)[a].get("Reservation") == f"attentived-{a}"
    assert ours(lab)[f"attentived-{a}"]["Users"] == "alice"
    node = hold["nodes"][0]
    blocker = next(j for j, n in blockers.items() if n == node)
    lab.run(["scancel", blocker])
    lab.wait_for_state(int(a), "RUNNING", timeout=15)  # starts inside its reservation by itself
    assert lab_nodes(jobs_now(lab)[a]) == [node]
    assert eng.run_cycle().ok  # ends the reservation (a job runs in it)
    lab.wait_for_state(int(a), "COMPLETED", timeout=20)
    res = eng.run_cycle()
    assert res.ok and f"attentived-{a}" not in ours(lab)
    assert jobs_now(lab)[b]["JobState"] == "PENDING"


def held_in_reservation(lab, tmp_path, **config) -> tuple[CycleRunner, str, str]:
    """Attach mode on a busy lab after one cycle: job A (alice, a whole node, so reservable)
    waits in its hold reservation ``attentived-A``, job B (bob, the same size) behind it.
    The runner (``config`` added to the lab's), A and B."""
    busy_cluster(lab)
    a = str(lab.submit("alice", 8, script="sleep 600", name="A", extra_args=["--time", "30"]))
    b = str(lab.submit("bob", 8, script="sleep 600", name="B", extra_args=["--time", "30"]))
    eng = runner_for(lab, tmp_path, hold_mode="attach", **config)
    assert eng.run_cycle().ok
    assert jobs_now(lab)[a].get("Reservation") == f"attentived-{a}" and f"attentived-{a}" in ours(lab)
    return eng, a, b


def test_a_hold_reservation_that_expires_leaves_its_job_pending_not_held(clean_lab, tmp_path):
    # the daemon is gone and its reservation's lease runs out (brought forward here): Slurm
    # holds a job still waiting in an ending reservation unless the reservation says not to
    lab = clean_lab
    eng, a, _b = held_in_reservation(lab, tmp_path)
    eng.journal.close()
    resv = f"attentived-{a}"
    assert "NO_HOLD_JOBS_AFTER" in ours(lab)[resv]["Flags"]
    lab.run(["scontrol", "update", f"ReservationName={resv}", "EndTime=now+2"])
    job = wait_until(lambda: resv not in ours(lab) and jobs_now(lab)[a], timeout=60, poll=1, what="the reservation gone")
    print({k: job.get(k) for k in ("JobState", "Reason", "Priority", "Reservation")})
    assert job["JobState"] == "PENDING" and job.get("Reservation") in (None, "", "(null)")
    assert int(job["Priority"]) > 0 and "ResvDeleted" not in job.get("Reason", "")


def test_a_hold_reservation_lease_is_renewed_with_its_job_inside(clean_lab, tmp_path):
    # the shortest lease (60 s): with less than half of it left, a cycle extends it by a
    # Duration update, and the job stays attached
    lab = clean_lab
    eng, a, _b = held_in_reservation(lab, tmp_path, reservation_ttl=60)
    resv = f"attentived-{a}"

    def end() -> float:
        return datetime.fromisoformat(ours(lab)[resv]["EndTime"]).timestamp()

    first_end = end()
    assert first_end - time.time() <= 61
    time.sleep(max(0.0, first_end - 29 - time.time()))  # under half of the lease left
    res = eng.run_cycle()
    renewals = [o for o in res.outcomes if o.action.kind == "reservation_update" and o.action.reservation == resv]
    print([(o.argv, o.ok, o.error) for o in renewals])
    assert res.ok and len(renewals) == 1 and renewals[0].ok
    assert end() - time.time() >= 55 and end() > first_end
    assert jobs_now(lab)[a].get("Reservation") == resv
    assert "NO_HOLD_JOBS_AFTER" in ours(lab)[resv]["Flags"]
    eng.journal.close()


def test_hostile_job_names_and_comments(clean_lab, tmp_path):
    lab = clean_lab
    name = "q\"uo'te; $(touch /tmp/pwned) `id` ünï名"
    job = str(lab.submit("carol", 1, name=name, script="sleep 30", extra_args=["--comment", "model=x; $(reboot) \"'"]))
    eng = runner_for(lab, tmp_path)
    res = eng.run_cycle()
    assert res.ok and not Path("/tmp/pwned").exists()
    snap = eng.backend.snapshot()
    j = snap.job(job)
    assert j.name == name and j.comment == "model=x; $(reboot) \"'"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_service_signals_notify_metrics_and_hand_back(clean_lab, tmp_path):
    lab = clean_lab
    busy_cluster(lab, gpus_per_node=6)
    ids = queue_mix(lab)
    port = _free_port()
    conf = tmp_path / "c.toml"
    good = (f'interval = 0.5\npartitions = ["main"]\nstate_dir = "{tmp_path / "state"}"\nslurm_conf = "{lab.slurm_conf}"\n'
            f'metrics_port = {port}\nhand_back_on_exit = true\n')
    conf.write_text(good)
    sock_path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    sock.settimeout(30)
    env = dict(os.environ, NOTIFY_SOCKET=sock_path)
    proc = subprocess.Popen([sys.executable, "-m", "attentived", "start", "--config", str(conf)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        msgs = [sock.recv(4096).decode()]
        assert "READY=1" in msgs[0].splitlines()
        wait_until(lambda: "WATCHDOG=1" in sock.recv(4096).decode(), what="watchdog")
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert "attentived_cycles_total" in body and "attentived_queue_length" in body
        wait_until(lambda: any(d["JobState"] == "PENDING" and d.get("ExcNodeList") not in (None, "", "(null)")
                               for d in jobs_now(lab).values()), what="a held job kept to its held nodes")
        assert any(int(d["Priority"]) >= 1_000_000 for d in jobs_now(lab).values())
        conf.write_text("interval = -5\n")
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.5)
        assert proc.poll() is None  # rejected, still running
        conf.write_text(good)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    events = [json.loads(x) for x in err.splitlines() if x.startswith("{")]
    names = [e["event"] for e in events]
    assert "config.reload_rejected" in names and "service.stopped" in names and "service.handed_back" in names
    assert all("cycle_id" in e for e in events)
    # handed back: no reservations, no pins, priorities back to multifactor's
    assert ours(lab) == {}
    now_jobs = jobs_now(lab)
    for name, jid in ids.items():
        d = now_jobs[jid]
        if d["JobState"] == "PENDING":
            assert int(d["Priority"]) < 1_000_000 and d.get("ReqNodeList", "(null)") in ("(null)", ""), \
                (name, d["Priority"], d.get("ReqNodeList"))
            assert d.get("ExcNodeList", "(null)") in ("(null)", ""), (name, d.get("ExcNodeList"))
