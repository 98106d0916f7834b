#!/bin/bash
# Create the lab's demo users (default: alice bob carol) if they do not exist yet: system-less
# plain accounts without home or login shell. Jobs are then submitted as them from root with
#   runuser -u alice -- sbatch ...      (no shell involved; su would need a login shell)
# Their job output must go to a world-writable directory (start.sh makes $RUN/jobs mode 1777).
set -euo pipefail
users=("$@")
[ ${#users[@]} -gt 0 ] || users=(alice bob carol)
[ "$(id -u)" -eq 0 ] || { echo "users.sh: needs root to add users" >&2; exit 1; }
for u in "${users[@]}"; do
    case "$u" in [a-z]*) ;; *) echo "users.sh: bad user name '$u'" >&2; exit 1;; esac
    id -u "$u" >/dev/null 2>&1 && continue
    # another process may hold the passwd lock (or add the same user) at the same moment
    for try in 1 2 3 4 5; do
        useradd -M -U -d /nonexistent -s /usr/sbin/nologin -c "attentived lab user" "$u" 2>/dev/null && break
        id -u "$u" >/dev/null 2>&1 && break
        [ "$try" = 5 ] && { echo "users.sh: could not add user $u" >&2; exit 1; }
        sleep 0.5
    done
done
