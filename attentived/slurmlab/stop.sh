#!/bin/bash
# Stop the attentived Slurm lab: cancel its jobs, end its daemons (pid files first, then any
# lab daemon (slurmctld, slurmd, slurmstepd, slurmdbd, MariaDB, munged) that still names the
# run dir), then, for a lab whose Slurm runs in a Debian root (start.sh --slurm), whatever still
# runs in that root, and unmount it in reverse order; keep its files.
#   bash stop.sh [--run DIR]        (default $ATTENTIVED_LAB_RUN or /tmp/attentived-lab)
# Exit 0 when nothing of the lab is left running or mounted.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
lab_run_option "stop.sh [--run DIR]" "$@"

if lab_running; then
    # cancel jobs first, so no slurmstepd or job process outlives the lab
    jobs=$(squeue -h -t PD,R,S,CG,CF -o %i 2>/dev/null | tr '\n' ' ')
    if [ -n "${jobs// }" ]; then
        # shellcheck disable=SC2086
        timeout 10 scancel $jobs 2>/dev/null
        for _ in $(seq 100); do
            [ -z "$(timeout 5 squeue -h -t R,CG,S -o %i 2>/dev/null)" ] && break
            sleep 0.1
        done
    fi
fi

stopped=""
term_all() {  # SIGTERM the given pids, wait up to 10 s, then SIGKILL what is left
    local p left=""
    for p in "$@"; do lab_alive "$p" && kill -TERM "$p" 2>/dev/null && stopped="$stopped $p"; done
    for _ in $(seq 100); do
        left=""; for p in "$@"; do lab_alive "$p" && left="$left $p"; done
        [ -z "$left" ] && return 0
        sleep 0.1
    done
    for p in $left; do kill -KILL "$p" 2>/dev/null; done
    sleep 0.2
}

# every Slurm daemon of the lab at once, then slurmdbd (slurmctld hands it what it still
# holds), MariaDB, and munged last (the others need it to shut down). Found
# through /proc, not pid files: that also catches slurmstepds and daemons of a crashed lab, and
# never a process that merely reused an old pid.
declare -A seen=()
slurm=(); dbd=(); db=(); munge=()
for p in $(lab_processes); do
    [ -n "${seen[$p]:-}" ] && continue; seen[$p]=1
    exe=$(readlink "/proc/$p/exe" 2>/dev/null) || continue
    case "${exe##*/}" in
        munged*) munge+=("$p");;
        slurmdbd*) dbd+=("$p");;
        mariadbd*|mysqld*) db+=("$p");;
        slurmctld*|slurmd*|slurmstepd*) slurm+=("$p");;
    esac
done
[ ${#slurm[@]} -eq 0 ] || term_all "${slurm[@]}"
# job processes whose slurmstepd is gone (a lab that was killed rather than stopped)
mapfile -t orphans < <(lab_job_processes)
[ ${#orphans[@]} -eq 0 ] || term_all "${orphans[@]}"
[ ${#dbd[@]} -eq 0 ] || term_all "${dbd[@]}"
[ ${#db[@]} -eq 0 ] || term_all "${db[@]}"
[ ${#munge[@]} -eq 0 ] || term_all "${munge[@]}"
rm -f "$RUN"/pid/*.pid 2>/dev/null
# anything else in the lab's root (a job or client left over): the root cannot go while it runs
mapfile -t rest < <(lab_root_processes)
[ ${#rest[@]} -eq 0 ] || term_all "${rest[@]}"
lab_umount_under "$RUN" || echo "slurm lab: could not unmount everything under $RUN" >&2

left=$({ lab_processes; lab_root_processes; } | sort -un | tr '\n' ' ')
if [ -n "${left// }" ]; then
    echo "slurm lab: processes still running: $left" >&2
    exit 1
fi
mounted=$(lab_mounts_under "$RUN" | tr '\n' ' ')
if [ -n "${mounted// }" ]; then
    echo "slurm lab: still mounted: $mounted" >&2
    exit 1
fi
echo "slurm lab: stopped${stopped:+ (pids:$stopped)}"
