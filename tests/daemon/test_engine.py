"""The cycle runner and the service on the in-memory Slurm: idempotence, dry run, journal,
errors and back-off, policy fallback, placements, READY/WATCHDOG, SIGHUP-style reloads,
stopping mid-cycle, hand-back, and the CLI's exit codes."""

from __future__ import annotations

import io
import json
import socket
import threading
import time
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from attentived.cli import app
from attentived.daemon import config as C
from attentived.daemon import log as dlog
from attentived.daemon.cycle import SLURM_DEFAULTS_REFRESH, CycleRunner
from attentived.daemon.job_defaults import JobDefaults
from attentived.daemon.notify import Notifier
from attentived.daemon.records import CommandResult, SlurmCommandError, SlurmError, SlurmParseError, SlurmPartition
from attentived.daemon.service import Service
from attentived.daemon.testing import FakeBackend

from .test_apply import NOW, TOPO, cluster, pending


def cfg(tmp_path, **kw):
    base = dict(state_dir=str(tmp_path / "state"), partitions=("main",), interval=0.2, metrics_port=0)
    base.update(kw)
    return C.Config(**base)


def runner(tmp_path, fake, **kw):
    return CycleRunner(cfg(tmp_path, **kw), backend=fake, topology=TOPO)


def mix():
    return cluster([pending("1", "alice", 8), pending("2", "bob", 8, t=1), pending("3", "carol", 2, t=2),
                    pending("4", "alice", 1, t=3), pending("9", "carol", 1, partition="other", t=4)])


def test_cycle_then_no_churn(tmp_path):
    fake = mix()
    e = runner(tmp_path, fake)
    r1 = e.run_cycle()
    assert r1.ok and r1.updates > 0 and r1.plan_doc["holds"][0]["reservation"] is None  # block mode: a pin
    r2 = e.run_cycle()
    assert r2.ok and r2.updates == 0 and r2.actions == []
    cycles = e.journal.cycles(5)
    assert [c["cycle_id"] for c in cycles] == [r2.cycle_id, r1.cycle_id] and cycles[1]["actions"] == r1.updates
    assert len(e.journal.actions(cycle=r1.cycle_id)) == r1.updates
    status = json.loads((tmp_path / "state" / "status.json").read_text())
    assert status["last_cycle"]["id"] == r2.cycle_id and status["slurm_reachable"] and status["mode"] == "live"
    assert e.metrics.queue.value() == 4 and e.metrics.cycles.value(result="ok") == 2


def test_dry_run_changes_nothing(tmp_path):
    fake = mix()
    before = dict(fake.jobs), dict(fake.reservations)
    e = runner(tmp_path, fake, dry_run=True)
    r = e.run_cycle()
    assert r.ok and r.dry_run and r.actions and r.updates == 0
    assert fake.calls == [] and (dict(fake.jobs), dict(fake.reservations)) == before
    assert all(a["dry_run"] == 1 for a in e.journal.actions(cycle=r.cycle_id))
    assert e.journal.pins() == {}


def test_slurm_errors_back_off_and_recover(tmp_path):
    fake = mix()
    e = runner(tmp_path, fake, interval=0.05, backoff_max=0.3)
    fake.snapshot_error = SlurmCommandError(["squeue", "--json"], 1, "slurm_load_jobs error: Unable to contact slurm controller")
    r = e.run_cycle()
    assert not r.ok and r.error_kind == "slurm" and "Unable to contact" in r.error
    r = e.run_cycle()  # second failure: backs off
    assert r.error_kind == "slurm"
    assert e.run_cycle().skipped and e.metrics.cycles.value(result="skipped") == 1
    fake.snapshot_error = SlurmParseError("squeue --json", "output truncated at line 3")
    time.sleep(0.35)
    r = e.run_cycle()
    assert r.error_kind == "parse" and e.metrics.errors.value(kind="parse") == 1
    fake.snapshot_error = None
    time.sleep(0.35)
    r = e.run_cycle()
    assert r.ok and e.failures == 0 and e.metrics.up.value() == 1


def test_failed_action_is_journaled_and_the_rest_applies(tmp_path):
    fake = mix()
    fake.fail[("create", "attentived-1")] = "Access/permission denied"
    e = runner(tmp_path, fake, hold_mode="attach")
    r = e.run_cycle()
    assert not r.ok and r.error_kind == "apply" and r.failed >= 1
    assert fake.jobs["2"].priority > fake.jobs["3"].priority >= 1_000_000  # the rest of the plan applied
    rows = e.journal.actions(cycle=r.cycle_id)
    assert "Access/permission denied" in [a["error"] for a in rows if not a["ok"]]
    assert e.backoff_until == 0  # an apply error is not a reason to back off


def test_policy_fallback_when_the_model_cannot_load(tmp_path):
    e = CycleRunner(cfg(tmp_path, policy="attentive", model=str(tmp_path / "missing.pt"), fallback_policy="fifo"),
               backend=mix(), topology=TOPO)
    assert e.policy_name == "fifo" and e.policy_fallback and e.metrics.errors.value(kind="policy") == 1
    assert e.run_cycle().ok and e.status()["policy_fallback"]


def test_planned_vs_actual_placement_is_recorded(tmp_path):
    fake = cluster([pending("1", "alice", 4), pending("2", "bob", 1, t=1)],
                   run=[])
    e = runner(tmp_path, fake)
    r = e.run_cycle()
    starts = {s["job"]: s for s in r.plan_doc["starts"]}
    assert set(starts) == {"1", "2"}
    node = starts["1"]["nodes"][0]
    fake.start("1", {node: [int(g.split(":")[1]) for g in starts["1"]["gpus"]]})
    other = 1 if starts["2"]["nodes"][0] != "node1" else 2
    fake.start("2", {f"node{other + 2}": [7]})  # Slurm put it elsewhere
    fake.submit(pending("5", "carol", 32, nodes=4, t=5))  # cannot start now: held, not started
    fake.submit(pending("6", "bob", 1, t=6))  # behind the hold: waits
    e.run_cycle()
    rows = {p["job_id"]: p for p in e.journal.iter_placements()}
    assert rows["1"]["match"] == "exact" and rows["2"]["match"] == "other_nodes"
    # a managed job Slurm starts between cycles without a plan: unplanned
    fake.start("6", {"node1": [7]})
    e.run_cycle()
    assert {p["job_id"]: p for p in e.journal.iter_placements()}["6"]["match"] == "unplanned"
    assert e.metrics.placements.value(match="exact") == 1


def test_pins_are_owned_through_the_journal(tmp_path):
    fake = cluster([pending("1", "alice", 1), pending("2", "bob", 1, t=1)], run=[])
    e = runner(tmp_path, fake)
    e.run_cycle()
    assert set(e.journal.pins()) == {"1", "2"}
    fake.start("1", {"node1": [0]})
    e.run_cycle()
    assert set(e.journal.pins()) == {"2"}  # started: forgotten
    e2 = runner(tmp_path, fake)  # a restarted daemon still knows its pins
    assert e2.journal.pins() == e.journal.pins()


def test_cycle_id_on_every_log_line(tmp_path):
    buf = io.StringIO()
    dlog.configure("info", "json", stream=buf)
    e = runner(tmp_path, mix())
    r = e.run_cycle()
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    assert lines and all(ln["cycle_id"] == r.cycle_id for ln in lines)
    assert any(ln["event"] == "cycle.plan" and ln["holds"] for ln in lines)
    dlog.configure("warning", "json")


def _notify_socket(tmp_path):
    path = str(tmp_path / "n.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    s.settimeout(3)
    return s, path


def _messages(sock):
    out = []
    sock.settimeout(0.2)
    try:
        while True:
            out.append(sock.recv(4096).decode())
    except TimeoutError:
        return out


def test_service_ready_watchdog_reload_and_stop(tmp_path):
    sock, path = _notify_socket(tmp_path)
    conf = tmp_path / "c.toml"
    conf.write_text(f'interval = 0.2\npartitions = ["main"]\nstate_dir = "{tmp_path / "state"}"\nmetrics_port = 0\n')
    fake = mix()
    svc = Service(conf, backend=fake, notifier=Notifier(address=path),
                  runner_factory=lambda c, **kw: CycleRunner(c, topology=TOPO, **kw))
    svc.tick()
    msgs = _messages(sock)
    assert any("READY=1" in m for m in msgs) and "WATCHDOG=1" in msgs
    svc.tick()
    assert "WATCHDOG=1" in _messages(sock) and not any("READY=1" in m for m in _messages(sock))
    # an invalid config is rejected, the old one stays
    conf.write_text("interval = -1\n")
    assert svc.reload() is False and svc.config.interval == 0.2
    conf.write_text(f'interval = 0.3\npartitions = ["main"]\nstate_dir = "{tmp_path / "state"}"\nmetrics_port = 0\n'
                    'policy = "sjf+consolidate"\n')
    assert svc.reload() is True and svc.config.interval == 0.3 and svc.runner.policy_name == "sjf+consolidate"
    assert svc.metrics.errors.value(kind="config") == 1
    svc._close()


class SlowFake(FakeBackend):
    def __init__(self, *a, delay=0.6, **kw):
        super().__init__(*a, **kw)
        self.delay = delay
        self.in_cycle = threading.Event()

    def snapshot(self):
        self.in_cycle.set()
        time.sleep(self.delay)
        return super().snapshot()


def test_stop_finishes_the_running_cycle_then_hands_back(tmp_path):
    base = mix()
    fake = SlowFake(base.jobs.values(), base.nodes.values(), now=NOW)
    c = cfg(tmp_path, interval=5.0, hand_back_on_exit=True, hold_mode="attach")
    svc = Service(config=c, backend=fake, notifier=Notifier(address=""),
                  runner_factory=lambda c, **kw: CycleRunner(c, topology=TOPO, **kw))
    rc = {}
    t = threading.Thread(target=lambda: rc.setdefault("rc", svc.run_forever()))
    t.start()
    assert fake.in_cycle.wait(5)
    svc.stop()  # what SIGTERM does
    t.join(20)
    assert not t.is_alive() and rc["rc"] == 0
    assert svc.runner.last is not None and svc.runner.last.ok  # the cycle that was running completed
    assert fake.reservations == {} and all(not j.required_nodes for j in fake.jobs.values() if j.pending)
    assert all(j.priority < C.Config().priority_floor for j in fake.jobs.values() if j.pending)
    assert any(c[:2] == ("scontrol", "release") for c in fake.calls)


def test_run_once_exit_codes(tmp_path):
    fake = mix()
    svc = Service(config=cfg(tmp_path), backend=fake, notifier=Notifier(address=""),
                  runner_factory=lambda c, **kw: CycleRunner(c, topology=TOPO, **kw))
    assert svc.run_once() == 0
    fake2 = mix()
    fake2.snapshot_error = SlurmCommandError(["squeue"], 1, "down")
    svc = Service(config=cfg(tmp_path), backend=fake2, notifier=Notifier(address=""),
                  runner_factory=lambda c, **kw: CycleRunner(c, topology=TOPO, **kw))
    assert svc.run_once() == 1


def test_cli_start_rejects_a_bad_config(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('hold_mode = "grab"\n')
    res = CliRunner().invoke(app, ["start", "--config", str(bad), "--once"])
    assert res.exit_code == 2 and "hold_mode: must be one of" in res.output
    res = CliRunner().invoke(app, ["start", "--config", str(tmp_path / "missing.toml"), "--once"])
    assert res.exit_code == 2 and "no such config file" in res.output


@pytest.mark.parametrize("mode", ["block", "attach"])
def test_many_cycles_on_a_churning_queue_leave_no_orphans(tmp_path, mode):
    """The in-memory Slurm starts the pinned jobs and finishes jobs between cycles."""
    fake = cluster([pending(str(i), ("alice", "bob", "carol")[i % 3], (1, 2, 4, 8)[i % 4], t=i) for i in range(1, 40)])
    e = runner(tmp_path, fake, hold_mode=mode)
    for step in range(60):
        r = e.run_cycle()
        assert r.ok, r.error
        for job in list(fake.jobs.values()):  # Slurm starts what is pinned (where pinned)
            planned = next((s for s in r.plan_doc["starts"] if s["job"] == job.job_id), None)
            if job.pending and job.required_nodes and planned is not None:
                fake.start(job.job_id, {n: [int(g.split(":")[1]) for g in planned["gpus"] if g.startswith(n + ":")]
                                        for n in planned["nodes"]})
        running = sorted((j for j in fake.jobs.values() if j.active), key=lambda j: j.start_time or 0)
        if running and step % 2:
            fake.finish(running[0].job_id)
    r = e.run_cycle()
    live = {j.job_id for j in fake.jobs.values() if j.pending or j.active}
    assert all(name[len("attentived-"):] in live for name in fake.reservations)
    assert e.journal.counts()["cycles"] == 61


@pytest.mark.parametrize("policy", ["deeprm", "proximity-drl"])
def test_the_drl_baselines_run_live_from_their_shipped_models(tmp_path, policy):
    fake = mix()
    e = runner(tmp_path, fake, policy=policy)
    assert e.policy_name == policy and not e.policy_fallback
    r = e.run_cycle()
    assert r.ok and (r.plan_doc["starts"] or r.plan_doc["holds"])
    assert e.run_cycle().updates == 0  # the same snapshot gives the same plan: no churn


def test_a_network_too_small_for_the_cluster_falls_back(tmp_path):
    from attentived.topology import uniform

    e = CycleRunner(cfg(tmp_path, policy="proximity-drl", fallback_policy="fifo"), backend=mix(),
               topology=uniform(20, 8, nodes_per_switch=4))
    e.setup()
    assert e.policy_name == "fifo" and "reads at most 128 GPUs, the cluster has 160" in e.policy_fallback
    assert e.metrics.errors.value(kind="policy") == 1


def test_a_bad_policy_parameter_is_refused_on_reload_and_the_old_config_kept(tmp_path):
    conf = tmp_path / "c.toml"
    head = f'interval = 0.2\npartitions = ["main"]\nstate_dir = "{tmp_path / "state"}"\nmetrics_port = 0\n'
    conf.write_text(head + 'policy = "sjf+consolidate"\n')
    svc = Service(conf, backend=mix(), runner_factory=lambda c, **kw: CycleRunner(c, topology=TOPO, **kw))
    svc.tick()
    for bad in ("portfolio:fairness=7", "sjf+consolidate:fairness=0.5", "attentive:fair=0.5"):
        conf.write_text(head + f'policy = "{bad}"\n')
        assert svc.reload() is False
        assert svc.config.policy == "sjf+consolidate" and svc.runner.policy_name == "sjf+consolidate"
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a model")
    conf.write_text(head + f'policy = "sjf+consolidate"\nfallback_policy = "attentive:model={garbage}"\n')
    assert svc.reload() is False and svc.config.fallback_policy == "fifo+consolidate"
    assert svc.metrics.errors.value(kind="config") == 4
    conf.write_text(head + 'policy = "attentive:fairness=0.3"\n')  # the shipped model takes W
    assert svc.reload() is True and svc.runner.policy_name == "attentive:fairness=0.3"
    svc._close()


def test_a_default_config_file_removed_is_refused_on_reload(tmp_path, monkeypatch):
    """Started without --config, the daemon read the default path: that file gone (or
    renamed mid-edit) at a reload keeps the config in force, not the built-in defaults."""
    conf = tmp_path / "config.toml"
    conf.write_text(f'dry_run = true\npartitions = ["main"]\nstate_dir = "{tmp_path / "state"}"\nmetrics_port = 0\n'
                    'policy = "sjf+consolidate:pack=1"\n')
    monkeypatch.setattr(C, "DEFAULT_PATH", str(conf))
    svc = Service(backend=mix(), runner_factory=lambda c, **kw: CycleRunner(c, topology=TOPO, **kw))
    assert svc.config.source == str(conf) and svc.config.dry_run
    conf.unlink()
    assert svc.reload() is False
    assert svc.config.dry_run and svc.config.policy == "sjf+consolidate:pack=1" and svc.runner.config.dry_run
    svc._close()


@pytest.mark.parametrize("key", ["state_dir", "reservation_prefix"])
def test_a_reload_that_moves_the_journal_or_the_reservations_names_is_refused(tmp_path, key):
    conf = tmp_path / "c.toml"
    base = 'partitions = ["main"]\nmetrics_port = 0\n'
    state = f'state_dir = "{tmp_path / "state"}"\n'
    conf.write_text(base + state)
    svc = Service(conf, backend=mix(), runner_factory=lambda c, **kw: CycleRunner(c, topology=TOPO, **kw))
    before = svc.config
    moved = {"state_dir": f'state_dir = "{tmp_path / "elsewhere"}"\n', "reservation_prefix": state + 'reservation_prefix = "other"\n'}
    conf.write_text(base + moved[key])
    assert svc.reload() is False and svc.config == before
    conf.write_text(base + state + "interval = 2.0\n")  # anything else still reloads
    assert svc.reload() is True and svc.config.interval == 2.0
    svc._close()


class _ReleaseFails(FakeBackend):
    """Takes every hold; refuses the next ``failures`` releases (slurmctld timing out)."""

    def __init__(self, *a, failures=0, **kw):
        super().__init__(*a, **kw)
        self.failures = failures

    def release(self, job_ids):
        if self.failures:
            self.failures -= 1
            return CommandResult(("scontrol", "release", *job_ids), False, 1, "Socket timed out on send/recv operation")
        return super().release(job_ids)


def _two_partitions(failures=0):
    base = cluster([pending("7", "alice", 4), pending("8", "bob", 2, partition="other", t=1)])
    return _ReleaseFails(base.jobs.values(), base.nodes.values(), now=NOW, failures=failures)


def test_a_job_held_to_reset_its_priority_is_released_even_when_slurm_refuses_for_a_while(tmp_path):
    fake = _two_partitions(failures=3)  # every try of one cycle
    e = runner(tmp_path, fake, partitions=("main", "other"))
    assert e.run_cycle().ok and fake.jobs["8"].priority >= e.settings.priority_floor
    e.reload(cfg(tmp_path, partitions=("main",)))
    e.run_cycle()
    assert fake.jobs["8"].held  # every release of this cycle refused
    e.run_cycle()
    assert not fake.jobs["8"].held and fake.jobs["8"].priority < e.settings.priority_floor
    e.run_cycle()
    assert [c for c in fake.calls if c[1] in ("hold", "release")][-1][1] == "release"  # nothing more to do


def test_only_partitions_a_live_cycle_ordered_are_handed_back_after_a_reload(tmp_path):
    """`other` was configured but never ordered live (a reload before any cycle, or dry
    run): an operator's priority in the daemon's band there is not the daemon's to reset."""
    for dry_first in (False, True):
        fake = _two_partitions()
        fake.jobs["8"] = replace(fake.jobs["8"], priority=5_000_000)
        e = runner(tmp_path / str(dry_first), fake, partitions=("main", "other"), dry_run=dry_first)
        if not dry_first:
            e.reload(cfg(tmp_path / str(dry_first), partitions=("main", "other", "x")))
        else:
            assert e.run_cycle().ok
        e.reload(cfg(tmp_path / str(dry_first), partitions=("main",)))
        assert e.run_cycle().ok
        assert fake.jobs["8"].priority == 5_000_000 and not any(c[1] == "hold" for c in fake.calls), dry_first


def test_hand_back_at_exit_includes_a_partition_a_reload_dropped(tmp_path):
    fake = _two_partitions()
    e = runner(tmp_path, fake, partitions=("main", "other"))
    assert e.run_cycle().ok and fake.jobs["8"].priority >= e.settings.priority_floor
    e.reload(cfg(tmp_path, partitions=("main",)))
    e.hand_back()  # SIGTERM before the next cycle
    assert fake.jobs["7"].priority < e.settings.priority_floor and fake.jobs["8"].priority < e.settings.priority_floor


def test_the_service_settles_the_heap_after_its_first_snapshot_and_after_a_reload(tmp_path):
    """Long-lived objects leave the collector's generations (daemon/heap.py): once after
    the first good snapshot, again after a reload (which thaws and collects the old ones)."""
    import gc

    conf = tmp_path / "c.toml"
    conf.write_text(f'partitions = ["main"]\nstate_dir = "{tmp_path / "state"}"\nmetrics_port = 0\n')
    svc = Service(conf, backend=mix(), notifier=Notifier(address=""),
                  runner_factory=lambda c, **kw: CycleRunner(c, topology=TOPO, **kw))
    try:
        gc.unfreeze()
        svc.tick()
        first = gc.get_freeze_count()
        assert first > 0
        gc.unfreeze()
        svc.tick()
        assert gc.get_freeze_count() == 0  # once, not every cycle
        assert svc.reload() is True
        svc.tick()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        svc._close()


class _LateReads(FakeBackend):
    """A Slurm whose ``scontrol show config`` or ``scontrol -o show partition`` fails at
    first (slurmctld busy), ``failures`` times, then answers."""

    def __init__(self, *a, late: str, failures: int, **kw):
        super().__init__(*a, **kw)
        self.late, self.failures = late, failures

    def _late(self, read: str) -> None:
        if read == self.late and self.failures:
            self.failures -= 1
            raise SlurmError(f"{read}: timed out")

    def config(self):
        self._late("config")
        return super().config()

    def partitions(self):
        self._late("partitions")
        return super().partitions()


def test_what_slurm_allocates_is_read_once_the_config_answers(tmp_path):
    """Under CR_Core_Memory a job asking no memory takes whole nodes: a config read that
    failed at start is tried again each cycle, not taken as 'no such rule' for good."""
    plain = cluster([pending("1", "alice", 1)])
    fake = _LateReads(plain.jobs.values(), plain.nodes.values(), now=NOW, late="config", failures=2,
                      config={**plain.config(), "SelectTypeParameters": "CR_CORE_MEMORY"})
    e = runner(tmp_path, fake)
    seen = []
    for _ in range(3):
        assert e.run_cycle().ok
        seen.append(e.job_defaults.memory_consumable)
    assert seen == [False, False, True] and fake.failures == 0


def test_a_partitions_own_defaults_are_read_once_slurm_lists_them(tmp_path):
    """Partition main gives 4 CPUs per GPU: a listing that failed at start is tried again
    each cycle, and until it answers the cluster's settings stand."""
    plain = cluster([pending("1", "alice", 1)])
    fake = _LateReads(plain.jobs.values(), plain.nodes.values(), now=NOW, late="partitions", failures=2,
                      config={**plain.config(), "JobDefaults": "DefCpuPerGPU=1"},
                      partitions=[SlurmPartition("main", default=True, job_defaults="DefCpuPerGPU=4")])
    e = runner(tmp_path, fake)
    seen = []
    for _ in range(3):
        assert e.run_cycle().ok
        seen.append(e.job_defaults)
    cluster_only = JobDefaults(False, cpus_per_gpu=1, known=True)
    assert seen == [cluster_only, cluster_only, replace(cluster_only, partitions={"main": JobDefaults(False, cpus_per_gpu=4)})]
    assert fake.failures == 0


def test_a_partition_changed_in_slurm_reaches_the_plan_without_a_reload(tmp_path):
    """``scontrol update PartitionName=main JobDefaults=DefCpuPerGPU=4`` on a running daemon:
    what slurmctld gives its jobs is read again every SLURM_DEFAULTS_REFRESH seconds."""
    plain = cluster([pending("1", "alice", 1)])
    fake = FakeBackend(plain.jobs.values(), plain.nodes.values(), now=NOW)
    e = runner(tmp_path, fake)
    assert e.run_cycle().ok and e.job_defaults.partitions == {}
    fake.partition_records = (SlurmPartition("main", default=True, job_defaults="DefCpuPerGPU=4"),)
    assert e.run_cycle().ok and e.job_defaults.partitions == {}  # not every cycle
    e._config_read_at -= SLURM_DEFAULTS_REFRESH
    assert e.run_cycle().ok and e.job_defaults.partitions == {"main": JobDefaults(False, cpus_per_gpu=4)}
