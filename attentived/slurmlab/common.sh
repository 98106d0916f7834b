# Sourced by start.sh, stop.sh, reset.sh and root.sh: defaults, the run directory, small helpers.
# shellcheck shell=bash disable=SC2034  # its variables are for the scripts that source it
# Every setting can come from the environment (ATTENTIVED_LAB_*) or, in start.sh, a flag.
LAB_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUN=${ATTENTIVED_LAB_RUN:-/tmp/attentived-lab}
MARKER=.attentived-lab            # a run dir is only ever wiped when it carries this file

lab_die() { echo "slurm lab: $*" >&2; exit 1; }

# The Debian release whose packages ship each Slurm version the lab runs (start.sh --slurm).
lab_suite_for() {  # VERSION -> suite; fails for a version the lab does not know
    case "$1" in
        22.05) echo bookworm;;
        24.11) echo trixie;;
        26.05) echo sid;;
        *) return 1;;
    esac
}
lab_host_suite() { (. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}"); }

# Mount points below DIR, the most recently mounted first: the order to unmount them in.
lab_mounts_under() {
    awk -v d="${1%/}/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | tac
}
# Unmount everything below DIR, in reverse order; a mount still busy is detached lazily
# (and named), so that a wipe of DIR can never reach into /proc, /sys or /dev.
lab_umount_under() {
    local m rc=0
    for m in $(lab_mounts_under "$1"); do
        umount "$m" 2>/dev/null && continue
        # already gone with a parent detached lazily before it: nothing to do
        lab_mounts_under "$1" | grep -qxF -- "$m" || continue
        echo "slurm lab: $m is busy: detaching it lazily" >&2
        umount -l "$m" || rc=1
    done
    return $rc
}

# The run dir is wiped by start.sh and put into sed expressions: keep it simple and deep.
lab_check_run() {
    RUN=${RUN%/}
    [[ "$RUN" =~ ^/[A-Za-z0-9._+-]+/[A-Za-z0-9._/+-]+$ ]] ||
        lab_die "run dir must be an absolute path at least two levels deep made of A-Za-z0-9._/+- (got '$RUN')"
    case "/$RUN/" in */../*|*/./*) lab_die "run dir must not contain . or .. (got '$RUN')";; esac
}

lab_alive() {  # pid exists and is no zombie
    [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null || return 1
    local stat; stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }; [ "${stat%% *}" != Z ]
}
lab_pid_of() { cat "$RUN/pid/$1.pid" 2>/dev/null || true; }

# True when this run dir's slurmctld is up (pid file names a live process started from $RUN).
lab_running() {
    local p; p=$(lab_pid_of slurmctld)
    lab_alive "$p" || return 1
    tr '\0' ' ' 2>/dev/null < "/proc/$p/cmdline" | grep -qF "$RUN/"
}

# PIDs of every daemon of this lab, found through /proc (pid files may be gone or stale):
# slurmctld/slurmd/slurmstepd/slurmdbd/mariadbd/munged processes whose command line or
# environment names $RUN.
lab_processes() {
    local f p exe
    {
        grep -lsaF -- "$RUN/" /proc/[0-9]*/cmdline
        grep -lszxF -- "SLURM_CONF=$RUN/etc/slurm.conf" /proc/[0-9]*/environ
    } 2>/dev/null | while read -r f; do
        p=${f#/proc/}; p=${p%%/*}
        exe=$(readlink "/proc/$p/exe" 2>/dev/null) || continue
        case "${exe##*/}" in slurmctld*|slurmd*|slurmstepd*|munged*|mariadbd*|mysqld*) echo "$p";; esac
    done | sort -un
}

# PIDs of job processes of this lab (environment has SLURM_JOB_ID and this lab's SLURM_CONF).
lab_job_processes() {
    local f
    grep -lszxF -- "SLURM_CONF=$RUN/etc/slurm.conf" /proc/[0-9]*/environ 2>/dev/null | while read -r f; do
        grep -qsz '^SLURM_JOB_ID=' "$f" 2>/dev/null && { f=${f#/proc/}; echo "${f%%/*}"; }
    done
    return 0
}

# A lab whose Slurm runs in a Debian root (start.sh --slurm, lab.info names the root): IN_ROOT
# runs a command (a daemon) inside it, and the lab's client commands, which run inside it
# too, come first on PATH. On a lab of the host's own Slurm IN_ROOT is empty.
lab_enter_root() {
    IN_ROOT=()
    grep -qs '^root=.' "$RUN/lab.info" || return 0
    IN_ROOT=(chroot "$RUN/root")
    export PATH="$RUN/client-bin:$PATH"
}

# PIDs of every process inside this lab's root (daemons, jobs, clients), found by the root
# directory they run in: what must end before the root can be unmounted.
lab_root_processes() {
    local p
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/root" 2>/dev/null)" = "$RUN/root" ] && echo "${p#/proc/}"
    done
    return 0
}

# `[--run DIR]`, the one option of stop.sh and reset.sh: sets RUN and SLURM_CONF.
lab_run_option() {  # USAGE ARGS...
    local usage=$1; shift
    while [ $# -gt 0 ]; do
        case "$1" in
            --run) RUN=${2:?}; shift;;
            --run=*) RUN=${1#*=};;
            *) lab_die "usage: $usage";;
        esac
        shift
    done
    lab_check_run
    export SLURM_CONF="$RUN/etc/slurm.conf"
    lab_enter_root
}

# MariaDB and slurmdbd of a lab with accounting (in its root when it has one, lab_enter_root):
# start.sh starts them, reset.sh brings back one that a test stopped. MariaDB gets its own
# data dir, socket and port on 127.0.0.1 (never /etc/mysql or /run/mysqld); it returns once
# the server answers. No TLS on that loopback port: MariaDB 11.8 (Debian 13) offers TLS with
# certificates of its own, and Slurm 24.11's slurmdbd then fails its first query ("5027 Number
# of columns in result (=1) set execeeds maxmimum allowed number of columns (=0)") and exits.
lab_sql() { "${IN_ROOT[@]}" mariadb --no-defaults --skip-ssl --socket="$RUN/mysql/mysqld.sock" -u root "$@"; }
lab_start_mariadb() {  # PORT
    "${IN_ROOT[@]}" mariadbd --no-defaults --datadir="$RUN/mysql/data" --socket="$RUN/mysql/mysqld.sock" \
        --port="$1" --bind-address=127.0.0.1 --skip-name-resolve --skip-ssl --pid-file="$RUN/pid/mariadbd.pid" \
        --log-error="$RUN/log/mariadb.log" --user=root --innodb-buffer-pool-size=64M \
        --innodb-log-file-size=16M --innodb-flush-log-at-trx-commit=2 > /dev/null 2>&1 &
    local _
    for _ in $(seq 300); do lab_sql -e 'SELECT 1' >/dev/null 2>&1 && return 0; sleep 0.1; done
    tail -5 "$RUN/log/mariadb.log" >&2
    return 1
}
# slurmdbd daemonizes, finds slurmdbd.conf beside $SLURM_CONF and creates its tables on the
# first start; it returns once sacctmgr gets an answer through it.
lab_start_slurmdbd() {
    "${IN_ROOT[@]}" slurmdbd
    local i
    for i in $(seq 300); do
        sacctmgr -n -P show cluster format=Cluster >/dev/null 2>&1 && return 0
        if [ "$i" -gt 20 ] && ! lab_alive "$(lab_pid_of slurmdbd)"; then break; fi
        sleep 0.1
    done
    tail -5 "$RUN/log/slurmdbd.log" >&2
    return 1
}
