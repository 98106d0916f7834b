# Sourced by start.sh, stop.sh and reset.sh: defaults, the run directory, small helpers.
# Every setting can come from the environment (ATTENTIVED_LAB_*) or, in start.sh, a flag.
LAB_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUN=${ATTENTIVED_LAB_RUN:-/tmp/attentived-lab}
MARKER=.attentived-lab            # a run dir is only ever wiped when it carries this file

lab_die() { echo "slurm lab: $*" >&2; exit 1; }

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
}

# MariaDB and slurmdbd of a lab with accounting: start.sh starts them, reset.sh brings back one
# that a test stopped. MariaDB gets its own data dir, socket and port on 127.0.0.1 (never
# /etc/mysql or /run/mysqld); it returns once the server answers.
lab_sql() { mariadb --no-defaults --socket="$RUN/mysql/mysqld.sock" -u root "$@"; }
lab_start_mariadb() {  # PORT
    mariadbd --no-defaults --datadir="$RUN/mysql/data" --socket="$RUN/mysql/mysqld.sock" --port="$1" \
        --bind-address=127.0.0.1 --skip-name-resolve --pid-file="$RUN/pid/mariadbd.pid" \
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
    slurmdbd
    local i
    for i in $(seq 300); do
        sacctmgr -n -P show cluster format=Cluster >/dev/null 2>&1 && return 0
        if [ "$i" -gt 20 ] && ! lab_alive "$(lab_pid_of slurmdbd)"; then break; fi
        sleep 0.1
    done
    tail -5 "$RUN/log/slurmdbd.log" >&2
    return 1
}
