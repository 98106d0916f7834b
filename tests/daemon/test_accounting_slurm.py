"""The daemon on a Slurm that keeps accounting, as sites run it (the lab's slurmdbd + MariaDB):

- the service user ``attentived``, no root, made a Slurm operator with sacctmgr, steers live;
- slurmdbd and its database going down while the daemon runs (or the database alone, behind a
  running slurmdbd): cycles go on with what slurmctld answers, ``status`` names the outage,
  ``trace export`` says what failed and exports from the job-completion file on request, and
  once accounting is back the jobs that finished meanwhile are in ``sacct`` (nothing lost).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attentived.ops.lab import OPERATOR

from .test_daemon_slurm import (
    busy_cluster,
    jobs_now,
    runner_for,
    skip_unless_start_as,
    start_as,
    wait_until,
)

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).parents[2]


def sacct_users(lab, job_ids) -> dict[str, str]:
    """{job id: user} of the given jobs as the accounting database has them."""
    out = lab.run(["sacct", "-a", "-X", "-n", "-P", "-o", "JobIDRaw,User,State", "-j", ",".join(map(str, job_ids))],
                  check=False).stdout
    return {line.split("|")[0]: line.split("|")[1] for line in out.splitlines() if line.count("|") == 2}


def test_the_service_user_steers_live_with_operator_rights_alone(clean_lab, config_for_user):
    lab = clean_lab
    skip_unless_start_as()
    level = lab.run(["sacctmgr", "-n", "-P", "show", "user", OPERATOR, "format=AdminLevel"]).stdout.strip()
    assert level == "Operator"
    busy_cluster(lab)
    pending = [lab.submit(user, gpus, script="sleep 60") for user, gpus in (("alice", 2), ("bob", 4), ("carol", 1))]
    conf = config_for_user(lab, OPERATOR)
    live = start_as(OPERATOR, conf, "--once")
    work = conf.parent
    assert live.returncode == 0, live.stderr[-2000:]
    assert "permission" not in live.stderr
    # other users' jobs now carry the daemon's priorities (its band starts at priority_floor)
    now = jobs_now(lab)
    assert all(int(now[str(j)]["Priority"]) >= 1_000_000 for j in pending), {j: now[str(j)]["Priority"] for j in pending}
    status = json.loads((work / "state" / "status.json").read_text())
    assert status["accounting"]["reachable"] is True and status["accounting"]["storage"] == "accounting_storage/slurmdbd"


def _stop(lab, name: str) -> None:
    pid = int((lab.run_dir / "pid" / f"{name}.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3],
               timeout=20, what=f"{name} gone")


def _jobs_during_outage(lab, eng, daemons, jobs) -> list:
    """Stop ``daemons``, run ``jobs`` ((user, GPUs) each) to completion while they are down
    (slurmctld runs them and keeps their records), then one daemon cycle, which must
    succeed: scheduling goes on. Returns the job ids."""
    for name in daemons:
        _stop(lab, name)
    done = [lab.submit(user, gpus, script="sleep 1") for user, gpus in jobs]
    for j in done:
        lab.wait_for_state(j, "COMPLETED", timeout=60)
    time.sleep(0.15)  # past the accounting check's interval
    r = eng.run_cycle()
    assert r.ok, r.error
    return done


def test_an_accounting_outage_is_named_and_loses_nothing(clean_lab, tmp_path):
    lab = clean_lab
    eng = runner_for(lab, tmp_path, accounting_check_interval=0.1)
    r = eng.run_cycle()
    assert r.ok, r.error
    assert eng.status()["accounting"]["reachable"] is True and "accounting_up 1" in eng.metrics.render()
    try:
        done = _jobs_during_outage(lab, eng, ("slurmdbd", "mariadbd"), (("alice", 2), ("bob", 8)))
        status = eng.status()
        acct = status["accounting"]
        assert acct["reachable"] is False and acct["down_since"] and "Connection refused" in acct["error"], acct
        assert any("Slurm accounting" in w and "has not answered" in w for w in status["warnings"])
        assert "accounting_up 0" in eng.metrics.render()
        # `attentived status` says it too
        eng.write_status()
        conf = tmp_path / "c.toml"
        conf.write_text(f'partitions = ["main"]\nstate_dir = "{tmp_path / "state"}"\nslurm_conf = "{lab.slurm_conf}"\n')
        st = subprocess.run([sys.executable, "-m", "attentived", "status", "-c", str(conf)], capture_output=True,
                            text=True, timeout=60, cwd=ROOT)
        assert "not answering" in st.stdout, st.stdout + st.stderr
        # the export names what failed and can read the job-completion file instead
        out = tmp_path / "t.csv"
        bad = subprocess.run([sys.executable, "-m", "attentived", "trace", "export", "-c", str(conf), "-o", str(out)],
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert bad.returncode == 1 and "sacct could not read the accounting database" in bad.stderr, bad.stderr
        assert "--from jobcomp" in bad.stderr and not out.exists()
        ok = subprocess.run([sys.executable, "-m", "attentived", "trace", "export", "-c", str(conf), "-o", str(out),
                             "--from", "jobcomp", "--json"], capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert ok.returncode == 0, ok.stderr
        assert json.loads(ok.stdout)["source"].startswith("jobcomp file")
        assert {str(j) for j in done} <= {ln.split(",")[0] for ln in out.read_text().splitlines()[1:]}
    finally:
        lab.reset()  # brings MariaDB and slurmdbd back
    # back: the daemon says so, and slurmctld hands over the records it kept
    time.sleep(0.15)
    r = eng.run_cycle()
    assert r.ok and eng.status()["accounting"]["reachable"] is True and eng.status()["accounting"]["down_since"] is None
    want = {str(done[0]): "alice", str(done[1]): "bob"}
    wait_until(lambda: sacct_users(lab, done) == want, timeout=60, what="the outage's jobs in sacct")
    eng.journal.close()


def test_a_database_outage_behind_a_running_slurmdbd_is_named_and_loses_nothing(clean_lab, tmp_path):
    """MariaDB alone goes down: slurmdbd still answers, but only to say it cannot reach its
    database. The daemon names that outage (not a generic failure), cycles go on, and once
    the database is back slurmdbd writes the jobs slurmctld ran meanwhile."""
    lab = clean_lab
    eng = runner_for(lab, tmp_path, accounting_check_interval=0.1)
    try:
        done = _jobs_during_outage(lab, eng, ("mariadbd",), (("carol", 4), ("alice", 1)))
        acct = eng.status()["accounting"]
        assert acct["reachable"] is False and "Unable to connect to database" in acct["error"], acct
        assert "accounting_up 0" in eng.metrics.render()
    finally:
        lab.reset()  # brings MariaDB back; slurmdbd reconnects on its own
    time.sleep(0.15)
    r = eng.run_cycle()
    assert r.ok and eng.status()["accounting"]["reachable"] is True
    want = {str(done[0]): "carol", str(done[1]): "alice"}
    wait_until(lambda: sacct_users(lab, done) == want, timeout=60, what="the outage's jobs in sacct")
    eng.journal.close()
