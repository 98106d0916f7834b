#!/bin/bash
# Install what the attentived Slurm lab needs (Debian 12 / 13): slurmctld, slurmd, the Slurm
# client commands and munge; for accounting (the lab's default) also slurmdbd, its MySQL
# plugin and MariaDB. Does nothing when they are already there.
#   usage: bash install.sh [--check] [--no-accounting]
#     --check: only report, exit 1 when something is missing
#     --no-accounting: Slurm and munge only
# The packages' own services (mariadb, slurmdbd, munge, slurmctld...) are not started by the
# install (a temporary policy-rc.d): the lab runs its own daemons under its run dir.
# Never installs slurm-wlm-emulator: that package cannot run a cluster and re-points
# /usr/sbin/slurmd and friends through update-alternatives.
set -euo pipefail

CHECK=0; ACCOUNTING=1
for a in "$@"; do
    case "$a" in
        --check) CHECK=1;;
        --no-accounting) ACCOUNTING=0;;
        *) echo "usage: bash install.sh [--check] [--no-accounting]" >&2; exit 2;;
    esac
done

PKGS=(slurmctld slurmd slurm-client munge)
NEEDED=(/usr/sbin/slurmctld-wlm /usr/sbin/slurmd-wlm /usr/sbin/slurmstepd-wlm
        /usr/bin/sbatch /usr/bin/squeue /usr/bin/sinfo /usr/bin/scontrol /usr/bin/scancel
        /usr/sbin/munged)
if [ "$ACCOUNTING" = 1 ]; then
    PKGS+=(slurmdbd slurm-wlm-mysql-plugin mariadb-server mariadb-client)
    NEEDED+=(/usr/sbin/slurmdbd /usr/bin/sacct /usr/bin/sacctmgr /usr/sbin/mariadbd
             /usr/bin/mariadb /usr/bin/mariadb-install-db)
fi

version() {  # sinfo --version needs a slurm.conf on 22.05, so ask dpkg
    dpkg-query -W -f '${Version}' slurm-client 2>/dev/null || echo unknown
}
missing() {
    local f; for f in "${NEEDED[@]}"; do [ -x "$f" ] || echo "$f"; done
    [ "$ACCOUNTING" = 0 ] || compgen -G '/usr/lib/*/slurm-wlm/accounting_storage_mysql.so' >/dev/null ||
        echo "accounting_storage_mysql.so"
}
what() { if [ "$ACCOUNTING" = 1 ]; then echo "Slurm $(version), munge, slurmdbd and MariaDB"; else echo "Slurm $(version) and munge"; fi; }

miss=$(missing)
if [ -z "$miss" ]; then
    echo "slurm lab: $(what) are installed"
    exit 0
fi
if [ "$CHECK" = 1 ]; then
    echo "slurm lab: missing: $(echo $miss)" >&2
    exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "slurm lab: missing $(echo $miss)" >&2
    echo "slurm lab: installing needs root: sudo apt-get install -y --no-install-recommends ${PKGS[*]}" >&2
    exit 1
fi
command -v apt-get >/dev/null || { echo "slurm lab: no apt-get here; install ${PKGS[*]} by hand" >&2; exit 1; }

# keep the packages' services from starting (invoke-rc.d and deb-systemd-invoke ask this file)
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    trap 'rm -f "$policy"' EXIT
    printf '#!/bin/sh\n# attentived slurmlab/install.sh: no service starts while it installs\nexit 101\n' > "$policy"
    chmod 755 "$policy"
fi
export DEBIAN_FRONTEND=noninteractive
echo "slurm lab: installing ${PKGS[*]}"
apt-get update -q
apt-get install -y -q --no-install-recommends "${PKGS[@]}"

miss=$(missing)
[ -z "$miss" ] || { echo "slurm lab: still missing after install: $(echo $miss)" >&2; exit 1; }
echo "slurm lab: installed $(what)"
