#!/bin/bash
# Install what the attentived Slurm lab needs (Debian 12 / 13): slurmctld, slurmd, the Slurm
# client commands and munge. Does nothing when they are already there.
#   usage: bash install.sh [--check]      (--check: only report, exit 1 when something is missing)
# Never installs slurm-wlm-emulator: that package cannot run a cluster and re-points
# /usr/sbin/slurmd and friends through update-alternatives.
set -euo pipefail

PKGS=(slurmctld slurmd slurm-client munge)
NEEDED=(/usr/sbin/slurmctld-wlm /usr/sbin/slurmd-wlm /usr/sbin/slurmstepd-wlm
        /usr/bin/sbatch /usr/bin/squeue /usr/bin/sinfo /usr/bin/scontrol /usr/bin/scancel
        /usr/sbin/munged)

version() {  # sinfo --version needs a slurm.conf on 22.05, so ask dpkg
    dpkg-query -W -f '${Version}' slurm-client 2>/dev/null || echo unknown
}
missing() {
    local f; for f in "${NEEDED[@]}"; do [ -x "$f" ] || echo "$f"; done
}

miss=$(missing)
if [ -z "$miss" ]; then
    echo "slurm lab: Slurm $(version) and munge are installed"
    exit 0
fi
if [ "${1:-}" = --check ]; then
    echo "slurm lab: missing: $(echo $miss)" >&2
    exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "slurm lab: missing $(echo $miss)" >&2
    echo "slurm lab: installing needs root: sudo apt-get install -y --no-install-recommends ${PKGS[*]}" >&2
    exit 1
fi
command -v apt-get >/dev/null || { echo "slurm lab: no apt-get here; install ${PKGS[*]} by hand" >&2; exit 1; }

export DEBIAN_FRONTEND=noninteractive
echo "slurm lab: installing ${PKGS[*]}"
apt-get update -q
apt-get install -y -q --no-install-recommends "${PKGS[@]}"

miss=$(missing)
[ -z "$miss" ] || { echo "slurm lab: still missing after install: $(echo $miss)" >&2; exit 1; }
echo "slurm lab: installed Slurm $(version)"
