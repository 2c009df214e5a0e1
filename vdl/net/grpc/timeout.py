"""The ``grpc-timeout`` request header: ``1*8DIGIT unit`` with unit in H M S m u n."""

from __future__ import annotations

import math

_UNIT_SECONDS: dict[str, float] = {
    "H": 3600.0,
    "M": 60.0,
    "S": 1.0,
    "m": 1e-3,
    "u": 1e-6,
    "n": 1e-9,
}

# Finest unit first: encoding picks the first unit whose value fits in 8 digits, which is
# the most precise representation available.
_ENCODE_ORDER: tuple[tuple[str, float], ...] = (
    ("n", 1e-9),
    ("u", 1e-6),
    ("m", 1e-3),
    ("S", 1.0),
    ("M", 60.0),
    ("H", 3600.0),
)
_MAX_VALUE = 99_999_999


def parse_grpc_timeout(value: str) -> float:
    """Seconds from a ``grpc-timeout`` value; raises ValueError if it is malformed."""
    if len(value) < 2 or len(value) > 9:
        raise ValueError(f"invalid grpc-timeout {value!r}")
    digits, unit = value[:-1], value[-1]
    if not digits.isascii() or not digits.isdigit() or unit not in _UNIT_SECONDS:
        raise ValueError(f"invalid grpc-timeout {value!r}")
    return int(digits) * _UNIT_SECONDS[unit]


def format_grpc_timeout(seconds: float) -> str:
    """A ``grpc-timeout`` value for a relative timeout, rounded up so it never shrinks."""
    if seconds <= 0:
        # Already expired: the smallest positive value makes the server fail it at once.
        return "1n"
    for unit, scale in _ENCODE_ORDER:
        # Rounding first keeps float noise (0.1 / 1e-6 = 100000.00000000001) from adding a unit.
        count = math.ceil(round(seconds / scale, 6))
        if count <= _MAX_VALUE:
            return f"{count}{unit}"
    return f"{_MAX_VALUE}H"
