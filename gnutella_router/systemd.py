"""Telling systemd how the router is doing: the sd_notify protocol, in the standard library.

Theory of operation
-------------------
A unit of ``Type=notify`` starts its service with ``NOTIFY_SOCKET`` in the environment:
the address of an AF_UNIX datagram socket that systemd reads. A message is one datagram
of newline-separated ``KEY=VALUE`` lines (sd_notify(3)):

* ``READY=1`` once the service serves (systemd holds units ordered after it, and
  ``systemctl start``, until then);
* ``STATUS=...``, one line of free text that ``systemctl status`` shows;
* ``RELOADING=1`` when a reload begins (with ``MONOTONIC_USEC``, the monotonic clock in
  microseconds, which systemd 253's ``Type=notify-reload`` asks for) and ``READY=1``
  when it is done;
* ``STOPPING=1`` when shutting down;
* ``WATCHDOG=1``, a keep-alive. With ``WatchdogSec=`` set, systemd passes
  ``WATCHDOG_USEC`` (and ``WATCHDOG_PID``, the process it means) and kills the
  service (then restarts it, as ``Restart=`` says) when no keep-alive arrives within
  that time; sd_watchdog_enabled(3) advises one every half of it.

An address that begins with ``@`` is in Linux's abstract namespace: the ``@`` stands
for a NUL byte. Any other address must be an absolute path (systemd's other forms,
such as ``vsock:``, are not for a service on the same machine, and are ignored).

Sending never blocks and never fails the caller: the socket is non-blocking, and a
datagram that cannot be sent (no one reads the socket, its queue is full) is counted
and the caller told False; status lines are advice, and a missed keep-alive is what the
watchdog exists to notice. :meth:`Notifier.from_environment` takes the variables out
of the environment once read, as sd_notify's ``unset_environment`` does, so that no
process this one starts speaks for it.

No library: the protocol is a few lines over the standard library's sockets. Of the
packages that offer it, ``sdnotify`` has had no release since 2017, and
``systemd-python`` and ``cysystemd`` bind libsystemd, which needs a C compiler and the
library's headers where the router must install without either.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import MutableMapping

__all__ = ["Notifier", "notify_address"]

MAX_STATUS_CHARACTERS = 200
"""A status line is cut to this length (systemctl shows one line)."""


def notify_address(text: str) -> str | bytes | None:
    """The socket address ``NOTIFY_SOCKET`` names, or None for none this process can use:
    ``@name`` is ``b"\\0name"`` in the abstract namespace, ``/path`` a path."""
    if text.startswith("@") and len(text) > 1:
        return b"\0" + text[1:].encode()
    if text.startswith("/"):
        return text
    return None


class Notifier:
    """Sends notifications to systemd's socket (see the module)."""

    def __init__(self, address: str | bytes, *, watchdog_usec: int | None = None) -> None:
        self.address = address
        self.watchdog_interval = watchdog_usec / 2e6 if watchdog_usec else None
        """Seconds between keep-alives (half of ``WATCHDOG_USEC``), or None when systemd
        watches nothing."""
        self.sent = 0
        self.failed = 0
        self.last_error: str | None = None
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._socket.setblocking(False)

    @classmethod
    def from_environment(
        cls, environ: MutableMapping[str, str] | None = None, *, pid: int | None = None
    ) -> Notifier | None:
        """The notifier systemd asked for in ``environ`` (default: this process's), or
        None when it asked for none. The variables are taken out of ``environ``.

        ``WATCHDOG_USEC`` counts only when ``WATCHDOG_PID`` is absent or names ``pid``
        (default: this process): a watchdog meant for another process is not ours.
        """
        environ = os.environ if environ is None else environ
        text = environ.pop("NOTIFY_SOCKET", "")
        watchdog = environ.pop("WATCHDOG_USEC", "")
        watchdog_pid = environ.pop("WATCHDOG_PID", "")
        address = notify_address(text)
        if address is None:
            return None
        usec: int | None = int(watchdog) if watchdog.isdigit() and int(watchdog) > 0 else None
        if watchdog_pid and watchdog_pid != str(os.getpid() if pid is None else pid):
            usec = None
        return cls(address, watchdog_usec=usec)

    def send(self, *lines: str) -> bool:
        """Send ``KEY=VALUE`` lines as one message; whether it left."""
        try:
            self._socket.sendto("\n".join(lines).encode(), self.address)
        except OSError as exc:
            self.failed += 1
            self.last_error = str(exc)
            return False
        self.sent += 1
        return True

    def ready(self, status: str | None = None) -> bool:
        """The service serves (also: a reload is done)."""
        return self.send("READY=1", *_status(status))

    def reloading(self, status: str | None = None) -> bool:
        """A reload begins; :meth:`ready` when it ends."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send("RELOADING=1", f"MONOTONIC_USEC={usec}", *_status(status))

    def stopping(self, status: str | None = None) -> bool:
        """The service is shutting down."""
        return self.send("STOPPING=1", *_status(status))

    def status(self, text: str) -> bool:
        """A line for ``systemctl status``."""
        return self.send(*_status(text))

    def watchdog(self) -> bool:
        """A keep-alive: the service is well."""
        return self.send("WATCHDOG=1")

    def close(self) -> None:
        self._socket.close()


def _status(text: str | None) -> list[str]:
    if text is None:
        return []
    line = " ".join(text.split())[:MAX_STATUS_CHARACTERS]
    return [f"STATUS={line}"]
