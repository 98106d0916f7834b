#!/bin/bash
# Start the attentived Slurm lab: munged + slurmctld + N slurmd ("node1".."nodeN", default 4),
# each node with 8 fake H100 GPUs in two NVLink islands, nodes grouped under leaf switches
# (sw1, sw2, ...) below one "spine"; with accounting (the default) also MariaDB and slurmdbd,
# a cluster, an account "lab" holding the users, and the daemon's service user as a Slurm
# operator. Everything runs as root on this host, without systemd or cgroups, under the run
# directory, which is wiped first, on its own ports. Needs root and Slurm (install.sh).
# --slurm VERSION (22.05, 24.11, 26.05) picks the Slurm: the host's own packages when its Debian
# release ships VERSION, else a Debian root of the release that does (root.sh, built once and
# cached) in which every daemon then runs (chroot), with the run dir at the same path inside;
# DIR/client-bin then holds the client commands (sinfo, sbatch...), run inside that root.
#
#   bash start.sh [--slurm VERSION] [--nodes N] [--nodes-per-switch K] [--run DIR]
#                 [--port-base P] [--no-accounting] [--no-warmup] [--render-only]
#   then:  . DIR/env.sh      (exports SLURM_CONF, PATH; sinfo, squeue, sbatch... talk to the lab)
#
# Environment (flags win): ATTENTIVED_LAB_RUN (/tmp/attentived-lab), ATTENTIVED_LAB_NODES (4),
# ATTENTIVED_LAB_NODES_PER_SWITCH (2), ATTENTIVED_LAB_PORT_BASE (17817: slurmctld; node i uses
# base+i), ATTENTIVED_LAB_SCHED_TYPE (sched/builtin), ATTENTIVED_LAB_PRIO_TYPE
# (priority/multifactor), ATTENTIVED_LAB_SCHED_PARAMS (fast cadence), ATTENTIVED_LAB_EXTRA_CONF
# (lines appended to slurm.conf; later keys win), ATTENTIVED_LAB_TOPOLOGY (topology.conf's text
# instead of the switches above, e.g. BlockName= lines with TopologyPlugin=topology/block in
# ATTENTIVED_LAB_EXTRA_CONF), ATTENTIVED_LAB_WARMUP (1),
# ATTENTIVED_LAB_USERS ("alice bob carol"; empty: create none), ATTENTIVED_LAB_ACCOUNTING (1;
# 0: no slurmdbd, finished jobs only in the job-completion file), ATTENTIVED_LAB_OPERATOR
# (attentived: the service user made AdminLevel=Operator; empty: none), ATTENTIVED_LAB_SLURM
# (empty: the host's own Slurm), ATTENTIVED_LAB_ROOTS and ATTENTIVED_LAB_MIRROR (see root.sh).
# Ports: slurmctld P, node i P+i, slurmdbd P-1, MariaDB P-2 (127.0.0.1 only).
# --render-only writes DIR/etc (config files) and exits: no root, no Slurm needed.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

NODES=${ATTENTIVED_LAB_NODES:-4}
PER_SWITCH=${ATTENTIVED_LAB_NODES_PER_SWITCH:-2}
PORT=${ATTENTIVED_LAB_PORT_BASE:-17817}
SCHED_TYPE=${ATTENTIVED_LAB_SCHED_TYPE:-sched/builtin}
PRIO_TYPE=${ATTENTIVED_LAB_PRIO_TYPE:-priority/multifactor}
SCHED_PARAMS=${ATTENTIVED_LAB_SCHED_PARAMS:-sched_interval=1,sched_min_interval=0,batch_sched_delay=0,max_rpc_cnt=0}
WARMUP=${ATTENTIVED_LAB_WARMUP:-1}
USERS=${ATTENTIVED_LAB_USERS-alice bob carol}
ACCOUNTING=${ATTENTIVED_LAB_ACCOUNTING:-1}
OPERATOR=${ATTENTIVED_LAB_OPERATOR-attentived}
SLURM=${ATTENTIVED_LAB_SLURM:-}
RENDER_ONLY=0

usage() { sed -n '2,27s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --nodes) NODES=${2:?}; shift;;
        --nodes=*) NODES=${1#*=};;
        --nodes-per-switch) PER_SWITCH=${2:?}; shift;;
        --nodes-per-switch=*) PER_SWITCH=${1#*=};;
        --run) RUN=${2:?}; shift;;
        --run=*) RUN=${1#*=};;
        --port-base) PORT=${2:?}; shift;;
        --port-base=*) PORT=${1#*=};;
        --slurm) SLURM=${2:?}; shift;;
        --slurm=*) SLURM=${1#*=};;
        --no-warmup) WARMUP=0;;
        --accounting) ACCOUNTING=1;;
        --no-accounting) ACCOUNTING=0;;
        --render-only) RENDER_ONLY=1;;
        -h|--help) usage; exit 0;;
        *) usage >&2; lab_die "unknown argument '$1'";;
    esac
    shift
done

lab_check_run
[[ "$NODES" =~ ^[1-9][0-9]*$ ]] && [ "$NODES" -le 128 ] || lab_die "--nodes must be 1..128 (got '$NODES')"
[[ "$PER_SWITCH" =~ ^[1-9][0-9]*$ ]] || lab_die "--nodes-per-switch must be a positive integer (got '$PER_SWITCH')"
[[ "$PORT" =~ ^[1-9][0-9]*$ ]] && [ "$PORT" -ge 1026 ] && [ $((PORT + NODES)) -le 65535 ] ||
    lab_die "--port-base must leave room for $NODES node ports and 2 below it in 1024..65535 (got '$PORT')"
[[ "$ACCOUNTING" =~ ^[01]$ ]] || lab_die "ATTENTIVED_LAB_ACCOUNTING must be 0 or 1 (got '$ACCOUNTING')"
[ -z "$SLURM" ] || lab_suite_for "$SLURM" >/dev/null ||
    lab_die "--slurm must be 22.05 (Debian 12), 24.11 (Debian 13) or 26.05 (Debian sid) (got '$SLURM')"
for u in $USERS $OPERATOR; do
    [[ "$u" =~ ^[a-z][a-z0-9_-]*$ ]] || lab_die "bad user name '$u'"
done
PORT_DBD=$((PORT - 1)); PORT_DB=$((PORT - 2))
for v in "$SCHED_TYPE" "$PRIO_TYPE" "$SCHED_PARAMS"; do
    [[ "$v" =~ ^[A-Za-z0-9_/=,.:-]*$ ]] || lab_die "bad scheduler setting '$v'"
done
t0=$(date +%s%N)

# shellcheck disable=SC2016  # ${Version} is dpkg-query's field
host_slurm() { dpkg-query -W -f '${Version}' slurm-client 2>/dev/null || echo none; }

ROOTFS=""   # the cached Debian root the lab's Slurm runs in (root.sh); empty: the host's Slurm
if [ "$RENDER_ONLY" = 0 ]; then
    [ "$(id -u)" -eq 0 ] || lab_die "the lab runs its daemons as root (slurmd must switch to job users): run as root"
    if lab_running; then
        lab_die "already running in $RUN (stop it first: bash $LAB_HERE/stop.sh --run $RUN)"
    fi
    if [ -n "$SLURM" ]; then
        ROOTFS=$(bash "$LAB_HERE/root.sh" "$SLURM") || lab_die "no Debian root with Slurm $SLURM to run the lab in"
    fi
    if [ -z "$ROOTFS" ]; then
        bash "$LAB_HERE/install.sh" --check --no-accounting >/dev/null 2>&1 ||
            lab_die "Slurm is not installed: run 'bash $LAB_HERE/install.sh' (as root) first"
        [ "$ACCOUNTING" = 0 ] || bash "$LAB_HERE/install.sh" --check >/dev/null 2>&1 ||
            lab_die "slurmdbd or MariaDB is not installed: run 'bash $LAB_HERE/install.sh' (as root) first, or start with --no-accounting"
        case "$(host_slurm)" in
            "$SLURM"*) ;;
            *) lab_die "this host's Slurm is $(host_slurm), not $SLURM";;
        esac
    fi
fi
if [ -d "$RUN" ] && [ -n "$(ls -A "$RUN")" ] && [ ! -e "$RUN/$MARKER" ]; then
    lab_die "$RUN exists, is not empty and is no lab run dir (no $MARKER): not wiping it"
fi
# leftovers of a crashed lab in this run dir (daemons without pid files) go first
[ "$RENDER_ONLY" = 1 ] || [ ! -d "$RUN" ] || ATTENTIVED_LAB_RUN="$RUN" bash "$LAB_HERE/stop.sh" >/dev/null 2>&1 || true
# a run dir with something still mounted in it (a lab's root that stop.sh could not unmount)
# is never wiped; --one-file-system is the second guard against reaching into /proc or /dev
mounted=$(lab_mounts_under "$RUN")
[ -z "$mounted" ] || lab_die "not wiping $RUN: still mounted there: ${mounted//$'\n'/ }"
rm -rf --one-file-system "$RUN"
mkdir -p "$RUN"/{bin,etc,munge,state,spool,log,pid,dev,jobs,mysql}
touch "$RUN/$MARKER"
# demo users must reach slurm.conf and the munge socket; their jobs write into jobs/
chmod 755 "$RUN" "$RUN/etc" "$RUN/munge"
chmod 1777 "$RUN/jobs"

# --- configuration -------------------------------------------------------------------------
range() {  # range PREFIX FIRST LAST -> node3 | node[1-4]
    if [ "$2" = "$3" ]; then echo "$1$2"; else echo "$1[$2-$3]"; fi
}
node_lines=""; switch_lines=""; nsw=0
for ((first = 1; first <= NODES; first += PER_SWITCH)); do
    nsw=$((nsw + 1))
    last=$((first + PER_SWITCH - 1)); [ "$last" -le "$NODES" ] || last=$NODES
    nodes=$(range node "$first" "$last")
    ports=$(range "" $((PORT + first)) $((PORT + last)))
    node_lines+="NodeName=$nodes NodeHostname=localhost NodeAddr=127.0.0.1 Port=$ports"
    node_lines+=" Sockets=2 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=64000"
    node_lines+=" Gres=gpu:h100:8 Features=rack$nsw,sw$nsw State=UNKNOWN"$'\n'
    switch_lines+="SwitchName=sw$nsw Nodes=$nodes"$'\n'
done
switch_lines+="SwitchName=spine Switches=$(range sw 1 "$nsw")"$'\n'
if [ "$ACCOUNTING" = 1 ]; then
    # gres/gpu in AccountingStorageTRES: sacct's AllocTRES and fair-share usage count GPUs.
    # AccountingStoragePass names the munge socket for connections to slurmdbd (AuthInfo does not)
    acct_lines="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$PORT_DBD
AccountingStoragePass=$RUN/munge/munge.sock
AccountingStorageEnforce=associations
AccountingStorageTRES=gres/gpu,gres/gpu:h100"
    billing=" TRESBillingWeights=CPU=0,GRES/gpu=1"
else
    # slurmctld tracks GRES only with slurmdbd, and refuses billing weights on an untracked TRES
    acct_lines="AccountingStorageType=accounting_storage/none"
    billing=""
fi

render() {  # render TEMPLATE OUT
    awk -v nl="${node_lines%$'\n'}" -v al="$acct_lines" \
        '$0 == "@NODE_LINES@" { print nl; next } $0 == "@ACCOUNTING_LINES@" { print al; next } { print }' "$1" |
        sed -e "s|@RUN@|$RUN|g" -e "s|@PORT_CTLD@|$PORT|g" -e "s|@NODE_RANGE@|$(range node 1 "$NODES")|g" \
            -e "s|@SCHED_PARAMS@|$SCHED_PARAMS|g" -e "s|@SCHED_TYPE@|$SCHED_TYPE|g" \
            -e "s|@PRIO_TYPE@|$PRIO_TYPE|g" -e "s|@PORT_DBD@|$PORT_DBD|g" -e "s|@PORT_DB@|$PORT_DB|g" \
            -e "s|@BILLING@|$billing|g" > "$2"
}
render "$LAB_HERE/slurm.conf.in" "$RUN/etc/slurm.conf"
render "$LAB_HERE/gres.conf.in" "$RUN/etc/gres.conf"
if [ "$ACCOUNTING" = 1 ]; then
    # slurmdbd reads slurmdbd.conf beside slurm.conf and refuses it unless only SlurmUser reads it
    render "$LAB_HERE/slurmdbd.conf.in" "$RUN/etc/slurmdbd.conf"
    printf 'StoragePass=%s\n' "$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')" >> "$RUN/etc/slurmdbd.conf"
    chmod 600 "$RUN/etc/slurmdbd.conf"
fi
printf '%s' "${ATTENTIVED_LAB_TOPOLOGY:-$switch_lines}" > "$RUN/etc/topology.conf"
cp "$LAB_HERE/cgroup.conf" "$RUN/etc/"
if [ -n "${ATTENTIVED_LAB_EXTRA_CONF:-}" ]; then
    printf '# ATTENTIVED_LAB_EXTRA_CONF\n%s\n' "$ATTENTIVED_LAB_EXTRA_CONF" >> "$RUN/etc/slurm.conf"
fi
export SLURM_CONF="$RUN/etc/slurm.conf"
cat > "$RUN/env.sh" <<EOT
# attentived Slurm lab ($NODES nodes): . this file to point Slurm's commands at the lab
export SLURM_CONF=$SLURM_CONF
export ATTENTIVED_LAB_RUN=$RUN
EOT
if [ -n "$ROOTFS" ]; then
    # shellcheck disable=SC2016  # $PATH is expanded when env.sh is sourced
    printf '# its Slurm runs in a Debian root: these clients run the commands there\nexport PATH=%s/client-bin:$PATH\n' \
        "$RUN" >> "$RUN/env.sh"
    slurm_version=$(sed -n 's/^slurm=//p' "$ROOTFS/etc/attentived-lab-root")
elif [ "$RENDER_ONLY" = 0 ]; then
    slurm_version=$(host_slurm)
else
    slurm_version=$SLURM   # only the configuration is written: nothing was looked at
fi
cat > "$RUN/lab.info" <<EOT
slurm=$slurm_version
root=$ROOTFS
nodes=$NODES
nodes_per_switch=$PER_SWITCH
port_base=$PORT
users=$USERS
accounting=$ACCOUNTING
operator=$OPERATOR
EOT
# fake GPUs: File= entries must be devices, so symlinks to /dev/null
for i in 0 1 2 3 4 5 6 7; do ln -s /dev/null "$RUN/dev/nvidia$i"; done
if [ "$RENDER_ONLY" = 1 ]; then
    echo "slurm lab: configuration written to $RUN/etc"
    exit 0
fi

# a port already taken (another lab, a real Slurm) would only show up as a slurmctld/slurmd
# that dies at once: check them all first (connecting to a free port is refused at once)
first_port=$PORT; [ "$ACCOUNTING" = 0 ] || first_port=$PORT_DB
for ((p = first_port; p <= PORT + NODES; p++)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
        lab_die "port $p is in use (another lab?): choose another --port-base / ATTENTIVED_LAB_PORT_BASE"
    fi
done

# from here on a failure (a failing command or lab_die) stops and unmounts what was started
trap 'rc=$?; [ "$rc" = 0 ] || { echo "slurm lab: start failed; stopping what was started (logs: $RUN/log)" >&2;
      ATTENTIVED_LAB_RUN="$RUN" bash "$LAB_HERE/stop.sh" >&2; exit "$rc"; }' EXIT

# Slurm picks its role from argv[0]: Debian installs slurmctld-wlm etc., and started under those
# names slurmd drops the GRES (gpu) silently. Run them through links with the canonical names:
# to the host's binaries, or with a Debian root to RUN/bin/daemon, which runs the root's (and
# enters the root first when started from the host).
if [ -n "$ROOTFS" ]; then
    render "$LAB_HERE/daemon.in" "$RUN/bin/daemon"
    chmod 755 "$RUN/bin/daemon"
    for d in slurmctld slurmd slurmstepd; do ln -s "$RUN/bin/daemon" "$RUN/bin/$d"; done
else
    for d in slurmctld slurmd slurmstepd; do ln -s "/usr/sbin/$d-wlm" "$RUN/bin/$d"; done
fi

if [ -n "$USERS$OPERATOR" ]; then
    # shellcheck disable=SC2086
    bash "$LAB_HERE/users.sh" $USERS $OPERATOR
fi

# --- the Debian root (--slurm VERSION that the host's release does not ship) ----------------
# The lab's own view of the cached root: an overlay whose writes (users, /run, /tmp) land in
# RUN/root-rw and go with the run dir, so the cache never changes and labs never share state.
# Inside it: the host's /proc, /sys (with its cgroup mounts, which slurmd's cgroup plugin
# reads), /dev (with /dev/pts) and the run dir itself at the same path as outside, so every
# path in the configuration names the same file on both sides. Each bind is made a slave or
# private mount so nothing mounted or unmounted in the root reaches the host's own mounts.
# stop.sh unmounts them all in reverse order.
mount_root() {
    local r=$RUN/root d
    mkdir -p "$r" "$RUN/root-rw/upper" "$RUN/root-rw/work"
    mount -t overlay attentived-lab -o "lowerdir=$ROOTFS,upperdir=$RUN/root-rw/upper,workdir=$RUN/root-rw/work" "$r"
    mount --make-private "$r"
    for d in proc sys dev; do
        mount --rbind "/$d" "$r/$d"
        mount --make-rslave "$r/$d"
    done
    mkdir -p "$r$RUN"
    mount --bind "$RUN" "$r$RUN"
    mount --make-private "$r$RUN"
}

# The lab's users inside the root with the host's names, uids and gids: Slurm passes uids
# between a client, slurmctld and the job, and both sides must agree on who that is.
root_users() {
    local u uid group
    for u in "$@"; do
        uid=$(id -u "$u"); group=$(id -gn "$u")
        if ! "${IN_ROOT[@]}" getent group "$group" >/dev/null; then
            "${IN_ROOT[@]}" groupadd -g "$(id -g "$u")" "$group"
        fi
        "${IN_ROOT[@]}" useradd -M -u "$uid" -g "$group" -d /nonexistent -s /usr/sbin/nologin \
            -c "attentived lab user" "$u"
    done
}

# RUN/client-bin: one link per client command of the root's Slurm (sinfo, sbatch, sacct...)
# to RUN/bin/client, which runs the command of its link's name inside the root
make_clients() {
    local c
    render "$LAB_HERE/client.in" "$RUN/bin/client"
    chmod 755 "$RUN/bin/client"
    mkdir -p "$RUN/client-bin"
    for c in $("${IN_ROOT[@]}" dpkg -L slurm-client | sed -n 's|^/usr/bin/\([a-z]*\)$|\1|p'); do
        ln -s "$RUN/bin/client" "$RUN/client-bin/$c"
    done
}

lab_enter_root      # with a root: IN_ROOT=(chroot RUN/root), RUN/client-bin first on PATH
if [ -n "$ROOTFS" ]; then
    mount_root
    # shellcheck disable=SC2086
    root_users $USERS $OPERATOR
    make_clients
fi

# munge: private key, socket, pid and log (never touches /etc/munge or /run/munge)
dd if=/dev/urandom of="$RUN/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$RUN/munge/munge.key"
"${IN_ROOT[@]}" munged --force --num-threads=10 --socket="$RUN/munge/munge.sock" \
    --key-file="$RUN/munge/munge.key" --pid-file="$RUN/pid/munged.pid" \
    --log-file="$RUN/log/munged.log" --seed-file="$RUN/munge/munged.seed"
for _ in $(seq 100); do [ -S "$RUN/munge/munge.sock" ] && break; sleep 0.05; done
[ -S "$RUN/munge/munge.sock" ] || { tail -3 "$RUN/log/munged.log" >&2; false; }

if [ "$ACCOUNTING" = 1 ]; then
    "${IN_ROOT[@]}" mariadb-install-db --no-defaults --datadir="$RUN/mysql/data" --user=root --skip-test-db \
        --auth-root-authentication-method=socket > "$RUN/log/mariadb-install.log" 2>&1 ||
        { tail -5 "$RUN/log/mariadb-install.log" >&2; false; }
    lab_start_mariadb "$PORT_DB"
    pass=$(sed -n 's/^StoragePass=//p' "$RUN/etc/slurmdbd.conf")
    lab_sql -e "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
                GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" ||
        { tail -5 "$RUN/log/mariadb.log" >&2; false; }
    lab_start_slurmdbd
    # the cluster before slurmctld starts (it registers itself); root's association comes with it
    sacctmgr -i -Q add cluster attentivedlab >/dev/null
    sacctmgr -i -Q add account lab Cluster=attentivedlab Description=lab Organization=lab >/dev/null
    # shellcheck disable=SC2086
    [ -z "$USERS" ] || sacctmgr -i -Q add user $(echo $USERS | tr ' ' ,) Account=lab >/dev/null
    # the daemon's service user, as docs/operations.md sets it up: an operator in root's account
    [ -z "$OPERATOR" ] || sacctmgr -i -Q add user "$OPERATOR" Account=root AdminLevel=Operator >/dev/null
fi

# slurmctld daemonizes; -c: ignore any saved state
"${IN_ROOT[@]}" "$RUN/bin/slurmctld" -c -f "$SLURM_CONF"
up=0
for i in $(seq 200); do
    if scontrol ping 2>/dev/null | grep -q UP; then up=1; break; fi
    # gave up already (bad config, port taken)? then do not wait 20 s for it
    if [ "$i" -gt 5 ] && ! grep -qsaF "$RUN/bin/slurmctld" /proc/[0-9]*/cmdline; then break; fi
    sleep 0.1
done
[ "$up" = 1 ] || { tail -5 "$RUN/log/slurmctld.log" >&2; false; }

# one slurmd per emulated node, all on this host: -N names the node, Port= in slurm.conf keeps
# them apart, %n in the spool/pid/log paths gives each its own files
pids=()
for ((i = 1; i <= NODES; i++)); do
    mkdir -p "$RUN/spool/node$i"
    "${IN_ROOT[@]}" "$RUN/bin/slurmd" -f "$SLURM_CONF" -N "node$i" -d "$RUN/bin/slurmstepd" &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done

idle=0
for _ in $(seq 600); do
    idle=$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)
    [ "$idle" -eq "$NODES" ] && break
    sleep 0.1
done
[ "$idle" -eq "$NODES" ] || { sinfo -N -l >&2; echo "slurm lab: only $idle of $NODES nodes idle; see $RUN/log/" >&2; false; }

if [ -n "$USERS" ]; then
    u=${USERS%% *}
    # a user's client must read slurm.conf and reach the munge socket (and, with a root, enter
    # it through a user namespace): ask slurmctld as that user
    why="a parent dir of $RUN not world-searchable?"
    [ -z "$ROOTFS" ] || why+=" no unprivileged user namespaces to enter the root?"
    # (a client that cannot read slurm.conf looks for a configless slurmctld in DNS, which
    # takes a minute to fail here: test the file first, and bound the ping)
    { runuser -u "$u" -- test -r "$SLURM_CONF" && timeout 10 runuser -u "$u" -- scontrol ping >/dev/null 2>&1; } ||
        echo "slurm lab: warning: user $u cannot reach the lab ($why): jobs as $u will fail" >&2
fi

# Warm-up job: proves munge, slurmd, slurmstepd and the GPUs work end to end, and makes
# slurmctld apply SchedulerParameters (until its first scheduling pass batch_sched_delay is 3 s,
# so the first real job would wait). It stays visible in `squeue -t all` as job 1 "warmup".
if [ "$WARMUP" = 1 ]; then
    w=$(sbatch --parsable -J warmup -p main -o /dev/null -e /dev/null --chdir "$RUN/jobs" \
        --gres=gpu:1 --wrap true)
    st=""
    for _ in $(seq 300); do
        st=$(squeue -h -t all -j "$w" -o %T 2>/dev/null)
        [ "$st" = COMPLETED ] && break
        sleep 0.05
    done
    [ "$st" = COMPLETED ] || { echo "slurm lab: warm-up job $w is ${st:-gone}" >&2; false; }
fi
trap - EXIT
printf 'slurm lab: up in %.1f s: %s idle nodes. . %s/env.sh  (or export SLURM_CONF=%s)\n' \
    "$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { print (b - a) / 1e9 }')" "$idle" "$RUN" "$SLURM_CONF"
