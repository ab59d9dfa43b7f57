"""Ports for the servers the tests start."""
from __future__ import annotations

import random
import socket
from pathlib import Path


def free_port() -> int:
    """A free localhost port below the kernel's ephemeral range. A port the kernel hands out
    (bind to port 0) can be taken again by any outgoing connection before the server binds it,
    and the ranks of the suite's background jobs open hundreds of those."""
    low, _ = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    for port in random.sample(range(max(1024, low - 12000), low), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port below the ephemeral range (which starts at {low})")
