"""Plan -> Slurm actions, on the in-memory Slurm (``daemon.testing.FakeBackend``): priorities
that follow the plan with minimal updates, pins, hold reservations, clean-up, no churn."""

from __future__ import annotations

import dataclasses
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attentived.agents.features import Context
from attentived.agents.plan import Hold, Plan, Start
from attentived.agents.registry import make_policy
from attentived.daemon.apply import (
    Action,
    Settings,
    assign_priorities,
    desired_state,
    execute,
    hand_back_actions,
    plan_actions,
)
from attentived.daemon.job_defaults import JobDefaults
from attentived.daemon.journal import Journal
from attentived.daemon.ownership import ReservationBook
from attentived.daemon.records import SlurmJob, SlurmNode, SlurmReservation
from attentived.daemon.snapshot import build_state
from attentived.daemon.testing import FakeBackend
from attentived.topology import uniform

TOPO = uniform(4, 8, nodes_per_switch=2)
NOW = float(int(time.time()))  # the journal's ownership records use the real clock
S = Settings()
ATTACH = Settings(hold_mode="attach")


def running(job_id, user, node, idx, partition="main", limit=None):
    return SlurmJob(job_id, user=user, partition=partition, state="RUNNING", gpus=len(idx), gpus_per_node=len(idx),
                    per_node_fixed=True, nodes=(node,), gpu_indices={node: tuple(idx)}, submit_time=NOW - 100,
                    start_time=NOW - 50, time_limit=limit, priority=1)


def pending(job_id, user, gpus, nodes=1, partition="main", t=0.0, **kw):
    return SlurmJob(job_id, user=user, partition=partition, state="PENDING", reason="Priority", gpus=gpus,
                    gpus_per_node=gpus // nodes, per_node_fixed=True, num_nodes=nodes, submit_time=NOW - 60 + t,
                    priority=1, **kw)


@pytest.fixture(autouse=True)
def _journal(tmp_path, monkeypatch):
    """Each test's reservations are owned through a real journal, as in the daemon."""
    journal = Journal.in_state_dir(tmp_path / "state")
    monkeypatch.setitem(BOOKS, "book", ReservationBook(journal))
    monkeypatch.setitem(PINS, "pins", {})
    monkeypatch.setitem(PINS, "exclusions", {})
    yield
    journal.close()


BOOKS: dict[str, ReservationBook] = {}
PINS: dict[str, dict[str, tuple[str, ...]]] = {}  # the daemon's pins, as its journal would keep them


def cluster(pend=(), run=None):
    nodes = [SlurmNode(f"node{i}", "IDLE", gpus=8, gpu_type="h100", partitions=("main", "other")) for i in range(1, 5)]
    run = run if run is not None else [running(str(100 + i), "root", f"node{i}", range(7)) for i in range(1, 5)]
    return FakeBackend([*run, *pend], nodes, now=NOW)


def cycle(fake, policy="fifo+consolidate", settings=S, owned=None, plan=None, partitions=("main",), left=()):
    owned = PINS["pins"] if owned is None else owned
    snap = fake.snapshot()
    built = build_state(snap, TOPO, partitions, reservation_prefix=settings.reservation_prefix, owned_pins=owned or {},
                        owned_reservations=BOOKS["book"].owned(snap), owned_exclusions=PINS["exclusions"],
                        leave_to_slurm=left)
    plan = plan or make_policy(policy).decide(built.state)
    desired = desired_state(plan, built, settings)
    actions = plan_actions(desired, built, settings, owned or {})
    return plan, desired, actions


def apply(fake, actions):
    BOOKS["book"].record_intents(actions, fake.snapshot().taken_at)
    out = execute(actions, fake)
    BOOKS["book"].settle(out)
    for o in out:
        if o.ok and o.action.kind == "pin":
            PINS["pins"][o.action.job_id] = o.action.nodes
        elif o.ok and o.action.kind == "unpin":
            PINS["pins"].pop(o.action.job_id, None)
        elif o.ok and o.action.kind == "exclude":
            PINS["exclusions"][o.action.job_id] = o.action.nodes
        elif o.ok and o.action.kind == "unexclude":
            PINS["exclusions"].pop(o.action.job_id, None)
    assert all(o.ok for o in out), [(o.action.describe(), o.error) for o in out if not o.ok]
    return out


def prio(fake, job_id):
    return fake.jobs[job_id].priority


def test_hold_is_a_pin_and_priorities_follow_the_plan():
    fake = cluster([pending("1", "alice", 8), pending("2", "bob", 8, t=1), pending("3", "carol", 1, t=2),
                    pending("9", "carol", 1, partition="other", t=3)])
    plan, desired, actions = cycle(fake)
    assert plan.holds and plan.holds[0].job_id == "1" and not plan.starts
    # block mode: no reservation; every node but the held one is excluded (a pin by ReqNodeList
    # would not block lower jobs in slurmctld's scheduler, an exclusion does)
    assert desired.holds == {} and "1" not in desired.pins
    held = set(TOPO.nodes[int(TOPO.gpu_node[g])].name for g in plan.holds[0].gpus)
    assert set(desired.exclusions["1"]) == {f"node{i}" for i in range(1, 5)} - held
    assert not [a for a in actions if a.kind.startswith("reservation")]
    apply(fake, actions)
    assert prio(fake, "1") > prio(fake, "2") > prio(fake, "3") >= S.priority_floor
    assert fake.jobs["1"].reservation == "" and fake.jobs["1"].excluded_nodes == desired.exclusions["1"]
    assert fake.jobs["9"].priority == 1 and not any("JobId=9" in " ".join(c) for c in fake.calls)  # other partition
    _p, _d, again = cycle(fake)
    assert again == []  # no churn


def test_a_passes_starts_go_to_slurm_largest_first():
    # Slurm starts them in priority order and the first one's core decides which socket the
    # next one's GPUs come from: on the lab a 1-GPU job given the higher priority split the
    # 4-GPU job planned beside it over both NVLink islands
    fake = cluster([pending("1", "alice", 1), pending("2", "bob", 4, t=1)], run=[])
    plan = Plan(order=("1", "2"), starts=(Start("1", (9,)), Start("2", (12, 13, 14, 15))))
    _plan, desired, actions = cycle(fake, plan=plan)
    assert desired.order[:2] == ["2", "1"]
    apply(fake, actions)
    assert prio(fake, "2") > prio(fake, "1")


def test_attach_mode_hold_becomes_a_reservation():
    fake = cluster([pending("1", "alice", 8), pending("2", "bob", 8, t=1)])
    _plan, desired, actions = cycle(fake, settings=ATTACH)
    create = next(a for a in actions if a.kind == "reservation_create")
    assert create.reservation == "attentived-1" and create.users == ("alice",) and create.ignore_jobs
    assert create.nodes == desired.holds["attentived-1"].nodes and "1" not in desired.pins
    apply(fake, actions)
    assert cycle(fake, settings=ATTACH)[2] == []


def test_attach_mode_attaches_and_ends_the_reservation_once_the_job_runs_inside():
    attach = dataclasses.replace(S, hold_mode="attach")
    fake = cluster([pending("1", "alice", 8), pending("2", "bob", 8, t=1)])
    _plan, desired, actions = cycle(fake, settings=attach)
    apply(fake, actions)
    node = desired.holds["attentived-1"].nodes[0]
    assert fake.jobs["1"].reservation == "attentived-1"
    assert cycle(fake, settings=attach)[2] == []
    # the blocker on the held node ends and Slurm starts job 1 inside its reservation
    blocker = next(j for j in fake.jobs.values() if j.active and j.nodes == (node,))
    fake.finish(blocker.job_id)
    fake.start("1", {node: list(range(8))})
    _p, _d, actions = cycle(fake, settings=attach)
    assert ("reservation_end", "attentived-1") in [(a.kind, a.reservation) for a in actions]
    apply(fake, actions)
    assert not any(a.reservation == "attentived-1" for a in cycle(fake, settings=attach)[2])  # ended: wait
    fake.finish("1")
    _p, _d, actions = cycle(fake, settings=attach)
    assert ("reservation_delete", "attentived-1") in [(a.kind, a.reservation) for a in actions]
    apply(fake, actions)
    assert "attentived-1" not in fake.reservations


def test_held_nodes_freeing_up_turn_the_hold_into_a_pinned_start_in_one_update():
    fake = cluster([pending("1", "alice", 8), pending("2", "bob", 8, t=1), pending("3", "carol", 2, t=2)])
    plan, desired, actions = cycle(fake)
    apply(fake, actions)
    (node,) = {TOPO.nodes[int(TOPO.gpu_node[g])].name for g in plan.holds[0].gpus}
    assert node not in fake.jobs["1"].excluded_nodes  # kept to its held node while held
    blocker = next(j for j in fake.jobs.values() if j.active and j.nodes == (node,))
    fake.finish(blocker.job_id)
    plan, desired, actions = cycle(fake)
    assert [s.job_id for s in plan.starts][:1] == ["1"] and desired.pins["1"] == (node,)
    one = [a.kind for a in actions if a.job_id == "1"]
    assert one.index("unexclude") < one.index("pin")  # Slurm refuses a node list inside the job's exclusion
    apply(fake, actions)
    assert sum(1 for c in fake.calls if "JobId=1" in " ".join(c)) == 2  # pin + unexclude (+ priority) in one update
    assert fake.jobs["1"].required_nodes == (node,) and fake.jobs["1"].excluded_nodes == ()
    starts = [s.job_id for s in plan.starts]
    assert all(prio(fake, a) > prio(fake, b) for a, b in zip(starts, starts[1:]))
    later = [j for j in desired.order if j not in starts]
    assert all(prio(fake, s) > prio(fake, o) for s in starts for o in later)


def test_pins_the_daemon_set_are_removed_and_user_pins_are_not():
    fake = cluster([pending("1", "alice", 1), pending("2", "bob", 1, t=1, required_nodes=("node4",))],
                   run=[running("100", "root", "node1", range(6))])
    plan, desired, actions = cycle(fake)
    assert "2" not in desired.pins and "1" in desired.pins  # job 2 keeps the user's pin
    apply(fake, actions)
    owned = {"1": fake.jobs["1"].required_nodes}
    # the plan changes its mind: job 1 no longer starts now -> unpin; job 2 untouched
    _p, _d, actions = cycle(fake, owned=owned, plan=Plan(order=("2", "1")))
    assert [(a.kind, a.job_id) for a in actions if a.kind in ("pin", "unpin")] == [("unpin", "1")]
    apply(fake, actions)
    assert fake.jobs["1"].required_nodes == () and fake.jobs["2"].required_nodes == ("node4",)


def test_a_pinned_job_held_instead_loses_its_pin_in_the_update_that_excludes_it():
    """Pinned to start, then held (block mode: every other node excluded): two updates would
    leave the job free to start anywhere between them; slurmctld applies one atomically."""
    fake = cluster([pending("1", "alice", 1), pending("3", "bob", 1, t=1)], run=[running("100", "root", "node1", range(6))])
    apply(fake, cycle(fake)[2])
    owned = {j: fake.jobs[j].required_nodes for j in ("1", "3")}
    assert all(owned.values())
    hold = Plan(order=("1", "3"), holds=(Hold("1", (8,), NOW + 60),))  # and job 3 no longer starts: unpinned
    _p, desired, actions = cycle(fake, owned=owned, plan=hold)
    assert desired.exclusions["1"] == ("node1", "node3", "node4")
    kinds = [(a.kind, a.job_id) for a in actions]
    at = kinds.index(("unpin", "1"))
    assert kinds[at + 1] == ("exclude", "1")
    fake.calls.clear()
    apply(fake, actions)
    (update,) = [c for c in fake.calls if "JobId=1" in c]
    assert any(a.startswith("ReqNodeList=") for a in update) and any(a.startswith("ExcNodeList=") for a in update)
    assert fake.jobs["1"].required_nodes == () and fake.jobs["1"].excluded_nodes == ("node1", "node3", "node4")


def test_a_job_is_planned_only_on_nodes_of_its_partition():
    """Two managed partitions on their own nodes: a job of `a` is never pinned to `b`'s
    node3 (Slurm takes the pin, then finds the job never runnable and holds it at
    priority 0), and its hold excludes `b`'s nodes, never its own."""
    nodes = [SlurmNode(f"node{i}", "IDLE", gpus=8, gpu_type="h100", partitions=(part,))
             for i, part in ((1, "a"), (2, "a"), (3, "b"), (4, "b"))]
    run = [running("1", "root", "node1", range(8), partition="a"), running("2", "root", "node2", range(8), partition="a")]
    fake = FakeBackend([*run, pending("10", "alice", 4, partition="a"), pending("11", "bob", 4, partition="b", t=1)],
                       nodes, now=NOW)
    plan, desired, actions = cycle(fake, policy="fifo+consolidate+backfill", partitions=("a", "b"))
    assert "10" not in desired.pins and desired.pins["11"] in (("node3",), ("node4",))
    assert [h.job_id for h in plan.holds] == ["10"] and set(desired.exclusions["10"]) >= {"node3", "node4"}


def test_a_job_is_not_held_on_a_draining_node():
    """node1's job ends first, but node1 is draining: its GPUs do not come back, and a job
    held there (every other node excluded) would never start."""
    nodes = [SlurmNode("node1", "ALLOCATED", flags=("DRAIN",), gpus=8, gpu_type="h100", partitions=("main",)),
             SlurmNode("node2", "ALLOCATED", gpus=8, gpu_type="h100", partitions=("main",))]
    run = [dataclasses.replace(running("1", "root", "node1", range(8)), time_limit=600),
           dataclasses.replace(running("2", "root", "node2", range(8)), time_limit=36000)]
    fake = FakeBackend([*run, pending("10", "alice", 8)], nodes, now=NOW)
    plan, desired, _actions = cycle(fake)
    (hold,) = plan.holds
    assert hold.job_id == "10" and min(hold.gpus) >= 8  # on node2
    assert desired.exclusions["10"] == ("node1",)


def test_a_job_is_not_held_on_a_node_reserved_for_someone_else():
    """node1's job ends first, but node1 is in a maintenance reservation and node2 in a
    reservation of root's: their GPUs go back to those reservations, not to the daemon's
    jobs. Held there, a ``block`` hold would never start and an ``attach`` hold's
    reservation would overlap (Slurm refuses it; the lab met it when node1's MAINT flag
    showed a cycle late and the hold moved to node2)."""
    nodes = [SlurmNode(f"node{i}", "ALLOCATED", gpus=8, gpu_type="h100", partitions=("main",)) for i in range(1, 4)]
    run = [dataclasses.replace(running(str(i), "root", f"node{i}", range(8)), time_limit=600 * i) for i in range(1, 4)]
    resv = [SlurmReservation("maint", ("node1",), ("root",), flags=("MAINT", "IGNORE_JOBS"), start_time=NOW - 5,
                             end_time=NOW + 3600),
            SlurmReservation("attentived-999", ("node2",), ("root",), flags=("IGNORE_JOBS",), start_time=NOW - 5,
                             end_time=NOW + 3600)]
    fake = FakeBackend([*run, pending("10", "alice", 8)], nodes, resv, now=NOW)
    for mode in (S, dataclasses.replace(S, hold_mode="attach")):
        plan, desired, _actions = cycle(fake, settings=mode)
        (hold,) = plan.holds
        assert hold.job_id == "10" and {TOPO.nodes[int(TOPO.gpu_node[g])].name for g in hold.gpus} == {"node3"}
        assert set(desired.holds) <= {"attentived-10"}


def test_a_reservation_ahead_keeps_off_the_jobs_whose_limit_reaches_it():
    """node2 is idle, but maintenance begins there in two minutes: slurmctld refuses a
    30-minute job on it (the node would idle until the stall is noticed) and starts a
    one-minute job there. A job in a reservation of someone else's is left to Slurm. The
    jobs running on reserved nodes stay running jobs: their users' service counts."""
    nodes = [SlurmNode(f"node{i}", "IDLE" if i == 2 else "ALLOCATED", gpus=8, gpu_type="h100", partitions=("main",))
             for i in range(1, 5)]
    run = [running(str(i), "root", f"node{i}", range(8), limit=limit) for i, limit in ((1, 3600), (3, 7200), (4, 10800))]
    maint = SlurmReservation("maint", ("node2",), ("root",), flags=("MAINT",), start_time=NOW + 120, end_time=NOW + 720)
    team = SlurmReservation("team", ("node1",), ("carol",), start_time=NOW + 60, end_time=NOW + 20000)
    fake = FakeBackend([*run, pending("10", "alice", 2, time_limit=1800), pending("11", "bob", 2, t=1, time_limit=60),
                        pending("12", "carol", 2, t=2, time_limit=None, reservation="team")], nodes, [maint, team], now=NOW)
    built = build_state(fake.snapshot(), TOPO, ("main",))
    # 11 ends a minute after team begins, if slurmctld starts it at once: within the slack
    assert built.reserved_for_others == {"10": ("team", "maint"), "11": ("team",)}
    assert {p.job_id: p.exclude for p in built.state.pending} == {"10": ("node1", "node2"), "11": ("node1",), "12": ()}
    assert [(r.job_id, len(r.gpus)) for r in built.state.running] == [("1", 8), ("3", 8), ("4", 8)]
    plan, desired, _actions = cycle(fake, policy="fifo+consolidate+backfill")
    assert "11" in [s.job_id for s in plan.starts] and desired.pins["11"] == ("node2",)
    assert "10" not in desired.pins and "12" not in desired.pins  # 12: ordered, placed by Slurm in its reservation
    # node1's job ends first, but inside carol's reservation: 10 is held on node3
    assert [h.job_id for h in plan.holds] == ["10"]
    assert {TOPO.nodes[int(TOPO.gpu_node[g])].name for g in plan.holds[0].gpus} == {"node3"}


def test_others_reservations_by_time_limit_attachment_and_activity():
    """Maintenance in 30 days keeps off a job without a time limit (slurmctld counts it
    as a year) but not one of a day; an active reservation keeps off every job, even one
    attached to a hold reservation of the daemon's (the daemon may move it anywhere)."""
    nodes = [SlurmNode(f"node{i}", "IDLE", gpus=8, gpu_type="h100", partitions=("main",)) for i in range(1, 5)]
    resv = [SlurmReservation("far", ("node3",), ("root",), flags=("MAINT",), start_time=NOW + 30 * 86400,
                             end_time=NOW + 31 * 86400),
            SlurmReservation("now", ("node4",), ("root",), start_time=NOW - 60, end_time=None, state="ACTIVE"),
            SlurmReservation("attentived-12", ("node1",), ("carol",), start_time=NOW - 30, end_time=NOW + 900)]
    fake = FakeBackend([pending("10", "alice", 1, time_limit=None), pending("11", "bob", 1, t=1, time_limit=86400),
                        pending("12", "carol", 1, t=2, time_limit=600, reservation="attentived-12")], nodes, resv, now=NOW)
    owned = {"attentived-12": {"created": NOW - 30, "start_time": NOW - 30}}
    built = build_state(fake.snapshot(), TOPO, ("main",), owned_reservations=owned)
    assert built.reserved_for_others == {"10": ("now", "far"), "11": ("now",), "12": ("now",)}
    assert {p.job_id: p.exclude for p in built.state.pending} == {"10": ("node4", "node3"), "11": ("node4",),
                                                                  "12": ("node4",)}


def test_an_attach_hold_reserves_no_node_where_another_reservation_begins_within_its_lease():
    """A 5-minute job held on node2, where carol's reservation begins in 10 minutes: the
    hold's own reservation would last 15 (`reservation_ttl`), and Slurm refuses the overlap."""
    nodes = [SlurmNode(f"node{i}", "ALLOCATED", gpus=8, gpu_type="h100", partitions=("main",)) for i in range(1, 5)]
    run = [running(str(i), "root", f"node{i}", range(8), limit=limit)
           for i, limit in ((1, 7200), (2, 120), (3, 7200), (4, 7200))]
    later = SlurmReservation("carol", ("node2",), ("carol",), start_time=NOW + 600, end_time=NOW + 4000)
    fake = FakeBackend([*run, pending("10", "alice", 8, time_limit=300)], nodes, [later], now=NOW)
    plan, desired, _actions = cycle(fake, settings=dataclasses.replace(S, hold_mode="attach"))
    (hold,) = plan.holds
    assert {TOPO.nodes[int(TOPO.gpu_node[g])].name for g in hold.gpus} == {"node2"}  # its limit ends before carol's
    assert not desired.holds and any("no reservation on node2" in n for n in desired.notes), desired.notes
    _plan, blocked, _actions = cycle(fake)  # block mode reserves nothing: kept to node2 as before
    assert blocked.exclusions["10"] == ("node1", "node3", "node4")


def test_a_job_partly_on_a_drained_node_gives_back_only_its_share_there():
    """A two-node job with 40 GB per GPU, node2 drained: when it ends, node1 gets back its
    share (8 x 40 GB), not the whole job's (where memory is allocated, CR_*_Memory)."""
    nodes = [SlurmNode("node1", "ALLOCATED", gpus=8, gpu_type="h100", partitions=("main",), cpus=64,
                       real_memory=512_000, alloc_memory=320_000, alloc_cpus=16),
             SlurmNode("node2", "ALLOCATED", flags=("DRAIN",), gpus=8, gpu_type="h100", partitions=("main",), cpus=64,
                       real_memory=512_000, alloc_memory=320_000, alloc_cpus=16)]
    job = SlurmJob("1", user="root", partition="main", state="RUNNING", gpus=16, gpus_per_node=8, per_node_fixed=True,
                   nodes=("node1", "node2"), gpu_indices={"node1": tuple(range(8)), "node2": tuple(range(8))},
                   submit_time=NOW - 100, start_time=NOW - 50, time_limit=600, priority=1, cpus=32, mem_per_gpu=40_000)
    built = build_state(FakeBackend([job], nodes, now=NOW).snapshot(), TOPO, ("main",),
                        defaults=JobDefaults(memory_consumable=True))
    (run,) = built.state.running
    assert (len(run.gpus), run.cpus, run.mem) == (8, 16, 320_000)


def test_a_job_kept_to_its_partition_is_not_read_as_a_users_exclusion():
    """`a` spans node1-2, each with 2 GPUs free; `b`'s node3-4 idle. A 4-GPU job of `a`
    that fixed no node count: its partition is not its user's ``-x``, so
    ``POLICY:one_node=1`` still waits for one node for it instead of splitting it, and it
    is never placed on `b`'s nodes either way."""
    nodes = [SlurmNode(f"node{i}", "MIXED" if i < 3 else "IDLE", gpus=8, gpu_type="h100", partitions=(part,))
             for i, part in ((1, "a"), (2, "a"), (3, "b"), (4, "b"))]
    run = [running("1", "root", "node1", range(6), partition="a", limit=600),
           running("2", "root", "node2", range(6), partition="a", limit=600)]
    job = SlurmJob("10", user="alice", partition="a", state="PENDING", reason="Priority", gpus=4,
                   submit_time=NOW - 60, priority=1)
    fake = FakeBackend([*run, job], nodes, now=NOW)
    built = build_state(fake.snapshot(), TOPO, ("a", "b"))
    assert built.state.pending[0].exclude == ()
    _, split, _ = cycle(fake, policy="fifo+consolidate", partitions=("a", "b"))
    assert split.pins["10"] == ("node1", "node2")
    plan, one, _ = cycle(fake, policy="fifo+consolidate:one_node=1", partitions=("a", "b"))
    assert "10" not in one.pins and [h.job_id for h in plan.holds] == ["10"]
    assert {TOPO.nodes[int(TOPO.gpu_node[g])].name for g in plan.holds[0].gpus} <= {"node1", "node2"}


def test_jobs_alike_but_for_their_partition_are_not_read_as_one_request():
    """`a`'s nodes idle, `b`'s full: a job of `b` asking what a job of `a` asks must not
    share its "fits now" (the agent then picked it and found no placement, every cycle)."""
    nodes = [SlurmNode(f"node{i}", "IDLE" if i < 3 else "ALLOCATED", gpus=8, gpu_type="h100", partitions=(part,))
             for i, part in ((1, "a"), (2, "a"), (3, "b"), (4, "b"))]
    run = [running("1", "root", "node3", range(8), partition="b", limit=600),
           running("2", "root", "node4", range(8), partition="b", limit=600)]
    fake = FakeBackend([*run, pending("10", "alice", 1, partition="a"), pending("11", "bob", 1, partition="b", t=1)],
                       nodes, now=NOW)
    state = build_state(fake.snapshot(), TOPO, ("a", "b")).state
    assert Context.of(state).feasible.tolist() == [True, False]
    plan = make_policy("attentive").decide(state)
    assert [s.job_id for s in plan.starts] == ["10"]


def test_stale_reservation_with_a_pending_attached_job_is_detached_then_deleted():
    attach = dataclasses.replace(S, hold_mode="attach")
    fake = cluster([pending("1", "alice", 8), pending("2", "bob", 8, t=1)])
    apply(fake, cycle(fake, settings=attach)[2])
    assert fake.jobs["1"].reservation == "attentived-1"
    _p, _d, actions = cycle(fake, settings=attach, plan=Plan(order=("2", "1")))  # no holds now
    kinds = [(a.kind, a.job_id or a.reservation) for a in actions]
    assert kinds.index(("detach", "1")) < kinds.index(("reservation_delete", "attentived-1"))
    apply(fake, actions)
    assert fake.jobs["1"].reservation == "" and fake.reservations == {}


def test_a_job_left_to_slurm_is_named_in_no_action():
    # Slurm refuses its updates for now (daemon/unregistered.py): its pin and exclusion of the
    # daemon's stay; its reservation, which cannot be deleted while it waits in it nor left
    # to hold nodes for a job the daemon no longer plans, is ended (Slurm unlinks the job)
    fake = cluster([pending("1", "alice", 8), pending("2", "bob", 8, t=1)])
    apply(fake, cycle(fake, settings=ATTACH)[2])
    assert fake.jobs["1"].reservation == "attentived-1"
    _p, desired, actions = cycle(fake, settings=ATTACH, left={"1"})
    assert not [a for a in actions if a.job_id == "1"], actions
    assert [(a.kind, a.value) for a in actions if a.reservation == "attentived-1"] == [("reservation_end", "now+5")]
    assert "attentived-1" not in desired.holds
    apply(fake, actions)
    assert fake.reservations["attentived-1"].end_time == fake.now + 5
    assert not [a for a in cycle(fake, settings=ATTACH, left={"1"})[2] if a.reservation == "attentived-1"]  # ending
    fake = cluster([pending("3", "alice", 1)], run=[running("100", "root", "node1", range(6))])
    apply(fake, cycle(fake)[2])
    pinned = {"3": fake.jobs["3"].required_nodes}
    assert pinned["3"]
    _p, _d, actions = cycle(fake, owned=pinned, plan=Plan(order=()), left={"3"})
    assert not [a for a in actions if a.job_id == "3"], actions
    _p, _d, actions = cycle(fake, owned=pinned, plan=Plan(order=()))
    assert ("unpin", "3") in [(a.kind, a.job_id) for a in actions]


def test_reservation_lease_is_renewed_when_half_is_gone():
    fake = cluster([pending("1", "alice", 8), pending("2", "bob", 8, t=1)])
    apply(fake, cycle(fake, settings=ATTACH)[2])
    fake.now = NOW + S.reservation_ttl * 0.6
    _p, _d, actions = cycle(fake, settings=ATTACH)
    renew = [a for a in actions if a.kind == "reservation_update"]
    assert len(renew) == 1 and renew[0].reason == "renew lease"
    apply(fake, actions)
    assert fake.reservations["attentived-1"].end_time >= fake.now + S.reservation_ttl - 60


def test_backfilled_start_on_held_nodes_shrinks_the_reservation():
    plan = Plan(order=("1", "2"), starts=(Start("2", (0,)),), holds=(Hold("1", tuple(range(8, 16)) + (1, 2), NOW + 60),))
    fake = cluster([pending("1", "alice", 10, nodes=1), pending("2", "bob", 1)], run=[])
    _p, desired, _a = cycle(fake, plan=plan, settings=ATTACH)
    assert desired.holds["attentived-1"].nodes == ("node2",)  # node1 is backfilled now
    assert desired.order[:2] == ["2", "1"]


def test_failed_actions_do_not_stop_the_rest_and_updates_are_merged():
    fake = cluster([pending("1", "alice", 1), pending("2", "bob", 1, t=1), pending("3", "carol", 1, t=2)],
                   run=[running("100", "root", "node1", range(8))])
    fake.fail[("update", "2")] = "Access/permission denied for job 2"
    _p, _d, actions = cycle(fake)
    out = execute(actions, fake)
    bad = [o for o in out if not o.ok]
    assert bad and all(o.action.job_id == "2" for o in bad) and "permission" in bad[0].error
    assert sum(1 for c in fake.calls if "JobId=1" in c) == 1  # pin + priority in one update
    assert fake.jobs["1"].required_nodes and fake.jobs["3"].priority >= S.priority_floor
    assert all(o.ok for o in execute([], fake))
    refused = execute([Action("pin", "5;x", nodes=("node1",))], fake)
    assert not refused[0].ok and "refused" in refused[0].error


def test_dry_run_touches_nothing():
    fake = cluster([pending("1", "alice", 4), pending("2", "bob", 8, t=1)])
    out = execute(cycle(fake)[2], fake, dry_run=True)
    assert out and all(o.dry_run for o in out) and fake.calls == []


def test_hand_back():
    attach = dataclasses.replace(S, hold_mode="attach")
    fake = cluster([pending("1", "alice", 8), pending("2", "bob", 8, t=1), pending("3", "carol", 1, t=2)],
                   run=[running("100", "root", "node1", range(7)), running("101", "root", "node2", range(3)),
                        running("102", "root", "node3", range(8)), running("103", "root", "node4", range(8))])
    _p, _d, actions = cycle(fake, settings=attach)
    apply(fake, actions)
    owned = {j.job_id: j.required_nodes for j in fake.jobs.values() if j.pending and j.required_nodes}
    snap = fake.snapshot()
    own = {r.name: r for r in snap.reservations if r.name in BOOKS["book"].owned(snap)}
    assert own
    actions, reset = hand_back_actions(snap, attach, ["main"], owned, own)
    apply(fake, actions)
    fake.hold(reset)
    fake.release(reset)
    assert fake.reservations == {} or all(any(j.active and j.reservation == r for j in fake.jobs.values())
                                          for r in fake.reservations)
    assert all(not S.in_band(j.priority) for j in fake.jobs.values() if j.pending)
    assert all(not j.required_nodes for j in fake.jobs.values() if j.pending)


def test_hand_back_names_no_job_left_to_slurm():
    fake = cluster([pending("1", "alice", 8), pending("2", "bob", 8, t=1), pending("3", "carol", 1, t=2)])
    apply(fake, cycle(fake, settings=ATTACH)[2])
    assert fake.jobs["1"].reservation == "attentived-1"
    snap = fake.snapshot()
    own = {r.name: r for r in snap.reservations if r.name in BOOKS["book"].owned(snap)}
    actions, reset = hand_back_actions(snap, ATTACH, ["main"], PINS["pins"], own, left_to_slurm={"1", "3"})
    assert not [a for a in actions if a.job_id in ("1", "3")] and "1" not in reset and "3" not in reset
    assert ("reservation_end", "attentived-1") in [(a.kind, a.reservation) for a in actions]
    assert "2" in reset  # the others are handed back as before
    everything, _ = hand_back_actions(snap, ATTACH, ["main"], PINS["pins"], own)
    assert ("detach", "1") in [(a.kind, a.job_id) for a in everything]


def test_partial_node_hold_is_a_pin_not_a_reservation():
    fake = cluster([pending("1", "alice", 4), pending("2", "bob", 1, t=1)])
    plan, desired, actions = cycle(fake)
    assert [h.job_id for h in plan.holds] == ["1"] and desired.holds == {}
    assert "1" in desired.exclusions and "1" not in desired.pins
    apply(fake, actions)
    assert fake.jobs["1"].excluded_nodes == desired.exclusions["1"] and fake.reservations == {}
    assert cycle(fake)[2] == []


def test_reservations_it_did_not_create_are_never_touched():
    fake = cluster([pending("1", "alice", 8), pending("9", "carol", 1, partition="other", reservation="attentived-team")])
    for name, flags in (("attentived-maint", ("MAINT", "IGNORE_JOBS")), ("attentived-999", ()), ("attentived-team", ())):
        fake.reservations[name] = SlurmReservation(name, nodes=("node4",), users=("root",), flags=flags,
                                                   start_time=NOW - 10, end_time=NOW + 3600)
    _plan, _d, actions = cycle(fake, settings=ATTACH)
    assert not [a for a in actions if a.reservation in ("attentived-maint", "attentived-999", "attentived-team")]
    assert not [a for a in actions if a.job_id == "9"]
    # a reservation of someone else under the name the daemon would use for its hold
    fake.reservations["attentived-1"] = SlurmReservation("attentived-1", nodes=("node3",), users=("root",),
                                                         start_time=NOW - 100, end_time=NOW + 3600)
    _plan, _d, actions = cycle(fake, settings=ATTACH)
    assert not [a for a in actions if a.reservation == "attentived-1"]


def test_ownership_follows_slurms_start_time(tmp_path):
    fake = cluster([pending("1", "alice", 8), pending("2", "bob", 8, t=1)])
    apply(fake, cycle(fake, settings=ATTACH)[2])
    book = BOOKS["book"]
    assert list(book.owned(fake.snapshot())) == ["attentived-1"]
    mine = fake.reservations["attentived-1"]
    # deleted and re-created by someone else under the same name: not the daemon's any more
    fake.reservations["attentived-1"] = dataclasses.replace(mine, start_time=(mine.start_time or NOW) + 30)
    snap = fake.snapshot()
    built = build_state(snap, TOPO, ("main",), owned_reservations=book.owned(snap))
    assert "attentived-1" not in built.own_reservations


# ---- priorities --------------------------------------------------------------------------------

def _check(order, current, new, s=S):
    merged = {**current, **new}
    vals = [merged[j] for j in order]
    assert all(a > b for a, b in zip(vals, vals[1:])), vals
    assert all(s.priority_floor <= v <= s.priority_ceiling for v in vals)


def test_priorities_minimal_updates():
    order = [str(i) for i in range(10)]
    first = assign_priorities(order, {j: 1 for j in order}, S)
    _check(order, {}, first)
    assert assign_priorities(order, first, S) == {}  # in order: nothing to do
    new = assign_priorities(["x", *order], {**first}, S)
    assert list(new) == ["x"]  # one new job at the head: one update
    new = assign_priorities([*order[:5], "y", *order[5:]], first, S)
    assert list(new) == ["y"]
    swapped = [order[1], order[0], *order[2:]]
    assert len(assign_priorities(swapped, first, S)) == 1


def test_priorities_renumber_when_no_room():
    s = Settings(priority_floor=10, priority_ceiling=1010, priority_step=1)
    cur = {"a": 500, "b": 499}
    new = assign_priorities(["a", "x", "b"], cur, s)
    _check(["a", "x", "b"], cur, new, s)
    assert set(new) >= {"x"}
    with pytest.raises(ValueError):
        assign_priorities([str(i) for i in range(2000)], {}, s)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3_000_000_000), min_size=0, max_size=40), st.randoms(use_true_random=False))
def test_priorities_always_descend_in_band(values, rnd):
    order = [f"j{i}" for i in range(len(values))]
    rnd.shuffle(order)
    current = {f"j{i}": v for i, v in enumerate(values)}
    new = assign_priorities(order, current, S)
    _check(order, current, new)
    assert assign_priorities(order, {**current, **new}, S) == {}


def test_once_slurmctld_stops_answering_the_rest_of_the_plan_is_not_sent():
    fake = FakeBackend()
    fake.fail[("create", "*")] = "scontrol: error: Unable to contact slurm controller (connect failure)"
    actions = [
        Action("reservation_create", reservation="attentived-1", value="15", nodes=("node1",), users=("alice",)),
        Action("reservation_create", reservation="attentived-2", value="15", nodes=("node2",), users=("bob",)),
        Action("priority", job_id="3", value="1000500"),
    ]
    out = execute(actions, fake)
    assert [o.ok for o in out] == [False, False, False]
    assert len(fake.calls) == 1  # only the first command was tried
    assert [o.action for o in out] == actions
    assert all(o.error.startswith("not sent") for o in out[1:])


def test_an_ordinary_failure_does_not_stop_the_plan():
    fake = FakeBackend()
    fake.fail[("create", "attentived-1")] = "Invalid user id"
    actions = [
        Action("reservation_create", reservation="attentived-1", value="15", nodes=("node1",), users=("alice",)),
        Action("reservation_create", reservation="attentived-2", value="15", nodes=("node2",), users=("bob",)),
    ]
    out = execute(actions, fake)
    assert [o.ok for o in out] == [False, True] and len(fake.calls) == 2
