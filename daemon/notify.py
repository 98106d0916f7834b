"""systemd's sd_notify protocol without libsystemd: one datagram to ``$NOTIFY_SOCKET``.

The daemon sends ``READY=1`` after its first good Slurm snapshot, ``WATCHDOG=1`` after every
cycle (good or failed: a daemon backing off from a dead slurmctld is alive), ``STATUS=...``
with a one-line summary, ``RELOADING=1``/``READY=1`` around a SIGHUP reload and
``STOPPING=1`` on shutdown. Without ``$NOTIFY_SOCKET`` every call is a no-op returning False.
An abstract socket (``@name``) is supported as systemd uses it.
"""

from __future__ import annotations

import os
import socket
import time


class Notifier:
    def __init__(self, address: str | None = None) -> None:
        self.address = address if address is not None else os.environ.get("NOTIFY_SOCKET", "")
        self.ready_sent = False

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def watchdog_usec(self) -> int | None:
        """``$WATCHDOG_USEC`` when it is meant for this process (``$WATCHDOG_PID`` unset or ours)."""
        usec = os.environ.get("WATCHDOG_USEC", "")
        pid = os.environ.get("WATCHDOG_PID", "")
        if not usec.isdigit() or (pid and pid != str(os.getpid())):
            return None
        return int(usec)

    def send(self, *lines: str) -> bool:
        if not self.address:
            return False
        addr = self.address
        if addr.startswith("@"):
            addr = "\0" + addr[1:]
        payload = "\n".join(line.replace("\n", " ") for line in lines).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.connect(addr)
                s.sendall(payload)
        except OSError:
            return False
        return True

    def ready(self, status: str = "") -> bool:
        sent = self.send("READY=1", *( [f"STATUS={status}"] if status else []), f"MAINPID={os.getpid()}")
        # Without $NOTIFY_SOCKET there is nobody to tell: readiness is settled either way
        # (otherwise the service would log "ready" again after every cycle).
        self.ready_sent = self.ready_sent or sent or not self.address
        return sent

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={text}")

    def reloading(self) -> bool:
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def stopping(self) -> bool:
        return self.send("STOPPING=1")
