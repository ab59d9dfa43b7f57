"""Human-readable sizes and times for plot labels: ``human_bytes(4096) == "4.1 kB"``.

Decimal (SI) prefixes throughout, because link bandwidths are quoted that way ("400 GB/s")
and the course's formulas divide bytes by bandwidth. Three significant figures at most:
"3.5 ms", "14 GB", "400 GB/s".
"""
from __future__ import annotations

import math

_BYTE_UNITS = ("B", "kB", "MB", "GB", "TB", "PB")
_SECOND_UNITS = ((1e-9, "ns"), (1e-6, "µs"), (1e-3, "ms"), (1.0, "s"))


def _short(x: float) -> str:
    """``3.456 -> "3.5"``, ``14.2 -> "14"``, ``400.4 -> "400"``."""
    return f"{x:.1f}" if abs(x) < 9.95 else f"{x:.0f}"


def human_bytes(n: float) -> str:
    """Bytes with a decimal prefix: ``4 -> "4 B"``, ``4000 -> "4.0 kB"``, ``14e9 -> "14 GB"``."""
    n = float(n)
    if not math.isfinite(n):
        return f"{n} B"
    sign, n = ("-" if n < 0 else ""), abs(n)
    if round(n) < 1000:
        return f"{sign}{n:.0f} B"
    i = 0
    while i < len(_BYTE_UNITS) - 1 and float(_short(n)) >= 1000:  # promote 999.97 kB to 1.0 MB
        n /= 1000
        i += 1
    return f"{sign}{_short(n)} {_BYTE_UNITS[i]}"


def human_rate(bytes_per_second: float) -> str:
    """A bandwidth: ``400e9 -> "400 GB/s"``."""
    return human_bytes(bytes_per_second) + "/s"


def human_seconds(s: float) -> str:
    """A duration: ``3.5e-3 -> "3.5 ms"``, ``2e-6 -> "2.0 µs"``, ``90 -> "1.5 min"``."""
    s = float(s)
    if s == 0 or not math.isfinite(s):
        return f"{s:g} s"
    sign, s = ("-" if s < 0 else ""), abs(s)
    if s >= 59.95:
        if float(_short(s / 60)) < 60:
            return f"{sign}{_short(s / 60)} min"
        return f"{sign}{_short(s / 3600)} h"
    scale, unit = _SECOND_UNITS[0]
    for scale, unit in _SECOND_UNITS:
        if float(_short(s / scale)) < 1000:
            break
    return f"{sign}{_short(s / scale)} {unit}"
