"""Start-up checks of Slurm's settings (``scontrol show config``) against what the daemon needs.

The daemon turns its plan into priorities, node pins and reservations; that reproduces the
plan exactly only under some settings:

- ``SchedulerType=sched/builtin``: Slurm starts jobs strictly by priority and a job that does
  not fit blocks its partition, as the plan does. Under ``sched/backfill`` the planned starts
  still happen first and on the planned nodes (they are the highest priorities and pinned),
  but Slurm's backfill may also start lower jobs the plan keeps waiting, whenever its own
  estimate says they do not delay a higher one (the daemon's hold reservations keep them
  off held nodes). The next cycle sees those jobs as running and plans around them.
- ``PriorityType=priority/multifactor``: an operator-set priority (``scontrol update
  Priority=``) sticks. With ``priority/basic`` the start order is submit order.
- Multifactor weights whose sum reaches ``priority_floor``: Slurm's own priorities could
  reach the daemon's band and be taken for its own.
- ``GresTypes`` must include ``gpu`` and ``SelectType`` should be ``select/cons_tres``
  (GPU indices per job).
- ``SchedulerParameters`` with ``disable_job_shrink`` (advised): slurmctld reads an
  operator's ``ReqNodeList`` on a *running* job as a shrink to those nodes (``_update_job``
  in job_mgr.c). A pin sent to a job Slurm started between the snapshot and the update is
  refused when the pin is not within the job's nodes, the usual case; a job that Slurm
  started on more nodes than the plan pinned (a ``--gpus`` job spread wider) would lose the
  others. With the setting Slurm refuses every such update.
- ``command_timeout`` above 5 s with slurmdbd before 24.11: Slurm holds an update of a job
  slurmdbd has not registered for 5 s before refusing it (daemon/unregistered.py); a
  shorter timeout sees no answer, which reads as slurmctld gone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .records import SlurmVersion


@dataclass(frozen=True)
class Finding:
    level: str  # "warning" or "error" or "info"
    key: str
    message: str


_WEIGHTS = ("PriorityWeightAge", "PriorityWeightAssoc", "PriorityWeightFairShare", "PriorityWeightJobSize",
            "PriorityWeightPartition", "PriorityWeightQOS")


#: seconds slurmctld (before 24.11) holds an update of a job slurmdbd has not registered
DB_INDEX_HOLD = 5.0


def check_slurm_config(conf: Mapping[str, str], *, priority_floor: int = 1_000_000,
                       command_timeout: float = 30.0) -> list[Finding]:
    out: list[Finding] = []
    sched = conf.get("SchedulerType", "")
    if sched != "sched/builtin":
        out.append(Finding("warning", "SchedulerType", (
            f"SchedulerType={sched or '?'}: the daemon's planned starts still go first and on the planned nodes, "
            "but Slurm may start lower jobs the plan keeps waiting (backfill); use sched/builtin for exact plan order")))
    prio = conf.get("PriorityType", "")
    if prio != "priority/multifactor":
        out.append(Finding("warning", "PriorityType", (
            f"PriorityType={prio or '?'}: priorities the daemon sets may not decide the start order; "
            "use priority/multifactor")))
    total = 0
    for w in _WEIGHTS:
        v = conf.get(w, "0").split()[0]
        if v.isdigit():
            total += int(v)
    tres = conf.get("PriorityWeightTRES", "")
    if tres and tres != "(null)":
        for part in tres.split(","):
            _, _, val = part.partition("=")
            if val.replace(".", "", 1).isdigit():
                total += int(float(val))
    if total >= priority_floor:
        out.append(Finding("warning", "PriorityWeight*", (
            f"multifactor weights sum to {total} >= priority_floor {priority_floor}: Slurm's own priorities may reach "
            "the daemon's band; raise priority_floor above them")))
    gres = conf.get("GresTypes", "")
    if "gpu" not in [g.strip() for g in gres.split(",")]:
        out.append(Finding("error", "GresTypes", f"GresTypes={gres or '(null)'} does not include gpu: Slurm knows no GPUs"))
    select = conf.get("SelectType", "")
    if select and select != "select/cons_tres":
        out.append(Finding("warning", "SelectType", f"SelectType={select}: GPU indices per job need select/cons_tres"))
    if (conf.get("AccountingStorageType", "") == "accounting_storage/slurmdbd" and command_timeout <= DB_INDEX_HOLD
            and SlurmVersion.older_than(conf.get("SLURM_VERSION", ""), 24, 11, unknown=True)):
        out.append(Finding("warning", "command_timeout", (
            f"command_timeout = {command_timeout:g} s: Slurm {conf.get('SLURM_VERSION', '?')} holds an update of a job "
            f"slurmdbd has not registered yet for {DB_INDEX_HOLD:g} s before refusing it; with a shorter timeout that "
            "refusal looks like slurmctld not answering. Set command_timeout above 5")))
    if "disable_job_shrink" not in conf.get("SchedulerParameters", ""):
        out.append(Finding("info", "SchedulerParameters", (
            "no disable_job_shrink: Slurm reads a ReqNodeList on a running job as a request to shrink it to those "
            "nodes, so a pin that reaches a job Slurm started a moment before could drop nodes from it (only a job "
            "on more nodes than planned, rare); with disable_job_shrink Slurm refuses such a pin")))
    if conf.get("TopologyPlugin", "") in ("", "topology/none", "topology/flat", "(null)"):  # flat: 25.05's default
        out.append(Finding("info", "TopologyPlugin", "no topology plugin: switches come from topology.yaml, topology.conf or the cluster file only"))
    return out


OPERATOR_LEVELS = ("operator", "administrator")


def keeps_accounting(storage: str) -> bool:
    """Whether ``AccountingStorageType`` names an accounting database (sacct, sacctmgr and
    admin levels work) rather than none. ``scontrol show config`` prints
    ``accounting_storage/none`` for it up to 24.11 and ``(null)`` from 26.05 on (recorded)."""
    return storage not in ("", "(null)", "accounting_storage/none")


def operator_problem(user: str, uid: int, slurm_user: str, accounting: str, admin_level: str | None) -> str:
    """Why Slurm will refuse the daemon's writes ("" when it will not).

    Changing other users' jobs (``scontrol update JobId=... Priority=/ReqNodeList=``) and
    creating reservations need root, SlurmUser, or AdminLevel Operator/Administrator in the
    accounting database. ``admin_level`` is what ``sacctmgr show user`` said (None: it could
    not be asked). Read-only probe: nothing in Slurm is changed to find out."""
    slurm_user = slurm_user.split("(")[0].strip()
    if uid == 0 or (slurm_user and user == slurm_user):
        return ""
    if admin_level is not None and admin_level.strip().lower() in OPERATOR_LEVELS:
        return ""
    need = ("Slurm operator rights: 'scontrol update' of other users' jobs (Priority, ReqNodeList) and "
            "'scontrol create reservation' will fail (Slurm 22.05 answers 'Invalid user id'; other versions "
            "'Access/permission denied')")
    if admin_level is None:
        where = (f"this Slurm has no accounting database (AccountingStorageType={accounting or '?'}), so it cannot "
                 "grant AdminLevel=Operator" if not keeps_accounting(accounting)
                 else "'sacctmgr show user' could not be asked for its AdminLevel")
        fix = (f"run attentived as root or as SlurmUser ({slurm_user or '?'})" if not keeps_accounting(accounting)
               else f"grant it with 'sacctmgr modify user {user} set AdminLevel=Operator', or run as root/SlurmUser")
        return (f"attentived runs as {user} (uid {uid}), which is neither root nor SlurmUser ({slurm_user or '?'}); "
                f"{where}. Missing: {need}. Fix: {fix}, or use --dry-run / --shadow, which change nothing.")
    return (f"attentived runs as {user} (uid {uid}) with AdminLevel={admin_level.strip() or 'None'}: missing {need}. "
            f"Fix: 'sacctmgr modify user {user} set AdminLevel=Operator' (or run as root/SlurmUser {slurm_user or '?'}), "
            "or use --dry-run / --shadow, which change nothing.")
