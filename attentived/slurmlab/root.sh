#!/bin/bash
# The Debian root a lab runs Slurm VERSION in when this host's own release does not ship it
# (start.sh --slurm 24.11 on Debian 12): a minimal Debian of the release that does (24.11:
# Debian 13 "trixie"), built once with debootstrap from the mirror in the host's apt sources,
# with Slurm, munge, slurmdbd and MariaDB installed and their services kept from starting.
# Labs never change it: each one mounts it read-only under an overlay of its own (start.sh).
#   bash root.sh VERSION           print the root's path, building it first when missing
#                                  (root and network needed; ~2 min); print nothing when the
#                                  host's own release ships VERSION (its packages serve)
#   bash root.sh --check VERSION   print the path when built; exit 1 when not
# Environment: ATTENTIVED_LAB_ROOTS (/var/cache/attentived: where roots are kept, as
# slurm-VERSION-SUITE/), ATTENTIVED_LAB_MIRROR (default: the host's apt mirror of its own
# release). Two starts never build at once (a lock), and a root is built in a temporary
# directory renamed into place when complete, so a half-built one is never used.
set -Eeuo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

PKGS=(slurmctld slurmd slurm-client munge slurmdbd slurm-wlm-mysql-plugin mariadb-server mariadb-client)
ROOTS=${ATTENTIVED_LAB_ROOTS:-/var/cache/attentived}
STAMP=etc/attentived-lab-root     # written last: a root without it is not finished

CHECK=0
[ "${1:-}" = --check ] && { CHECK=1; shift; }
[ $# -eq 1 ] || lab_die "usage: bash root.sh [--check] VERSION"
VERSION=$1
SUITE=$(lab_suite_for "$VERSION") || lab_die "no Debian release known for Slurm '$VERSION' (known: 22.05, 24.11, 26.05)"
[ "$SUITE" != "$(lab_host_suite)" ] || exit 0
[[ "$ROOTS" =~ ^/[A-Za-z0-9._/+-]+$ ]] || lab_die "ATTENTIVED_LAB_ROOTS must be an absolute path of A-Za-z0-9._/+- (got '$ROOTS')"
DIR=${ROOTS%/}/slurm-$VERSION-$SUITE
LOG=$DIR.build.log

built() { [ -f "$DIR/$STAMP" ] && echo "$DIR"; }
built && exit 0
[ "$CHECK" = 0 ] || exit 1
[ "$(id -u)" -eq 0 ] || lab_die "building the Debian $SUITE root for Slurm $VERSION needs root"
mkdir -p "$ROOTS"

# one build at a time; whoever waited finds the root built
exec 9> "$DIR.lock"
flock -w 1800 9 || lab_die "$DIR.lock is held by another build for over 30 min"
built && exit 0

discard() {  # a directory that may still hold mounts (an interrupted debootstrap)
    lab_umount_under "$1" && rm -rf --one-file-system "$1"
}
for old in "$DIR" "$ROOTS/.slurm-$VERSION-$SUITE".build.*; do
    [ ! -e "$old" ] || discard "$old"
done

STEP=""
step() { STEP=$*; echo "slurm lab: Slurm $VERSION root: $*" >&2; echo "=== $*" >> "$LOG"; }
fail() {
    tail -n 15 "$LOG" | sed 's/^/    /' >&2
    lab_die "building the Debian $SUITE root for Slurm $VERSION failed while: $STEP (log: $LOG)"
}

# The mirror the host itself installs from, as apt sees it (sources.list or deb822 .sources)
host_mirror() {
    # shellcheck disable=SC2016  # $(...) are apt's own format fields
    apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' 2>/dev/null |
        awk -v s="$(lab_host_suite)" '$2 == s && $3 == "main" { sub("/$", "", $1); print $1; exit }'
}

: > "$LOG"
tmp=$(mktemp -d "$ROOTS/.slurm-$VERSION-$SUITE.build.XXXXXX")
chmod 755 "$tmp"                     # it becomes "/": every user of the root must enter it
trap 'discard "$tmp"' EXIT
trap fail ERR
t0=$(date +%s)

step "finding the mirror"
MIRROR=${ATTENTIVED_LAB_MIRROR:-$(host_mirror)}
[ -n "$MIRROR" ] || { echo "no Debian mirror for the host's release in its apt sources; set ATTENTIVED_LAB_MIRROR" >> "$LOG"; false; }
step "reaching $MIRROR (no network to the registry?)"
if command -v wget >/dev/null; then
    wget -q -T 15 -t 2 -O /dev/null "$MIRROR/dists/$SUITE/Release" >> "$LOG" 2>&1
else
    curl -fsS -m 30 -o /dev/null "$MIRROR/dists/$SUITE/Release" >> "$LOG" 2>&1
fi
step "finding debootstrap"
if ! command -v debootstrap >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >> "$LOG" 2>&1
fi

step "debootstrap --variant=minbase $SUITE from $MIRROR"
debootstrap --variant=minbase "$SUITE" "$tmp" "$MIRROR" >> "$LOG" 2>&1

step "installing ${PKGS[*]}"
# invoke-rc.d asks policy-rc.d: no service of the root ever starts by itself, the lab starts
# its daemons by hand under its run dir
printf '#!/bin/sh\n# attentived slurmlab/root.sh: services never start by themselves here\nexit 101\n' \
    > "$tmp/usr/sbin/policy-rc.d"
chmod 755 "$tmp/usr/sbin/policy-rc.d"
cp /etc/hosts "$tmp/etc/hosts"       # the lab's slurm.conf names localhost
mount --bind /proc "$tmp/proc"       # package scripts (MariaDB's) read /proc
mount --make-rslave "$tmp/proc"
# sid's Release file is valid for a week; a mirror that is a snapshot serves an expired one
APT_UPDATE=(apt-get update -q)
[ "$SUITE" != sid ] || APT_UPDATE+=(-o Acquire::Check-Valid-Until=false)
{
    chroot "$tmp" "${APT_UPDATE[@]}"
    chroot "$tmp" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${PKGS[@]}"
    chroot "$tmp" apt-get clean
} >> "$LOG" 2>&1
umount "$tmp/proc"

step "checking the root"
# shellcheck disable=SC2016  # ${Version} is dpkg-query's field
slurm=$(chroot "$tmp" dpkg-query -W -f '${Version}' slurm-client)
case "$slurm" in "$VERSION".*) ;; *) echo "its slurm-client is $slurm, not $VERSION" >> "$LOG"; false;; esac
printf 'suite=%s\nslurm=%s\nmirror=%s\nbuilt=%s\n' "$SUITE" "$slurm" "$MIRROR" "$(date -Is)" > "$tmp/$STAMP"
mv -T "$tmp" "$DIR"
trap - EXIT ERR
echo "slurm lab: Slurm $slurm root built in $(($(date +%s) - t0)) s: $DIR ($(du -sm "$DIR" | cut -f1) MB)" >&2
echo "$DIR"
