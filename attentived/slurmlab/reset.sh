#!/bin/bash
# Return a running lab to a clean state between tests (much cheaper than stop + start):
# cancel every job, delete every reservation, restart a stopped MariaDB or slurmdbd and dead
# slurmds, put partitions UP (deleting any a test made) and every node back in service, and
# wait until all nodes are idle.
# Finished jobs stay visible in `squeue -t all` / `squeue --json`; job ids keep counting.
#   bash reset.sh [--run DIR]       exit 0 when the lab is clean
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
lab_run_option "reset.sh [--run DIR]" "$@"
lab_running || lab_die "not running in $RUN"
NODES=$(sed -n 's/^nodes=//p' "$RUN/lab.info")
PORT=$(sed -n 's/^port_base=//p' "$RUN/lab.info")

# a test may have stopped accounting to fake an outage: bring it back first, so that slurmctld
# hands it what it queued meanwhile
if [ "$(sed -n 's/^accounting=//p' "$RUN/lab.info")" = 1 ]; then
    lab_alive "$(lab_pid_of mariadbd)" || lab_start_mariadb $((PORT - 2)) || lab_die "MariaDB did not come back"
    lab_alive "$(lab_pid_of slurmdbd)" || lab_start_slurmdbd || lab_die "slurmdbd did not come back"
fi
active() { squeue -h -t PD,R,S,CG,CF -o %i 2>/dev/null; }

jobs=$(active | tr '\n' ' ')
# shellcheck disable=SC2086
[ -z "${jobs// }" ] || scancel $jobs
for _ in $(seq 100); do [ -z "$(active)" ] && break; sleep 0.1; done

for r in $(scontrol -o show reservation 2>/dev/null | sed -n 's/^ReservationName=\([^ ]*\).*/\1/p'); do
    scontrol delete ReservationName="$r"
done
for part in main other; do scontrol update PartitionName="$part" State=UP; done
# a test may have made a partition of its own: only the lab's two stay
for part in $(scontrol -o show partition 2>/dev/null | sed -n 's/^PartitionName=\([^ ]*\).*/\1/p'); do
    case "$part" in main | other) ;; *) scontrol delete PartitionName="$part" ;; esac
done

# a test may have killed a slurmd to fake a node failure: bring it back
for ((i = 1; i <= NODES; i++)); do
    lab_alive "$(lab_pid_of "slurmd-node$i")" ||
        "${IN_ROOT[@]}" "$RUN/bin/slurmd" -f "$SLURM_CONF" -N "node$i" -d "$RUN/bin/slurmstepd"
done

nodes=$(sinfo -h -N -t drain,down,fail,maint -o %N | sort -u | paste -sd, -)
[ -z "$nodes" ] || scontrol update NodeName="$nodes" State=RESUME
# a resumed node reads "idle*" until slurmctld pings it; completing nodes need a moment too
states() { sinfo -h -N -o '%N %T' 2>/dev/null | sort -u; }
for _ in $(seq 150); do
    [ "$(states | grep -c ' idle$')" -eq "$NODES" ] && break
    sleep 0.1
done
bad=$(states | grep -v ' idle$' | paste -sd' ' -)
[ -z "$(active)" ] || lab_die "jobs still active: $(active | paste -sd, -)"
[ -z "$(scontrol -o show reservation 2>/dev/null | grep ReservationName)" ] || lab_die "reservations left"
[ -z "$bad" ] || lab_die "nodes not idle: $bad"
