"""glibc's float32 ``sinf`` and ``cosf`` on x86-64, bit for bit, vectorised.

nebula builds its tables with ``cosf``/``sinf`` (glibc's, from Arm's optimized-routines). Those
are not correctly rounded: about one argument in ten of nebula's angles gives a result one ulp
away from ``float32(sin(double(x)))``, and nebula's ground-truth clouds carry glibc's value. So
this module evaluates glibc's algorithm for ``|x| < 120`` (every angle nebula passes), in double
precision exactly as the C does (``s_sinf.c``, ``s_cosf.c``, ``s_sincosf.h``, the non-
``TOINT_INTRINSICS`` build of x86-64):

- ``|x| < 2^-12`` (top 12 bits of the float's magnitude below those of ``2^-12``): ``sinf(x) =
  x``, ``cosf(x) = 1``;
- ``top12(|x|) < top12(pi/4)`` (``|x| < 0.75``): the polynomial on ``x`` directly;
- otherwise ``r = x * hpi_inv`` with ``hpi_inv = 2/pi * 2^24``, quadrant ``n = ((int32) r +
  0x800000) >> 24``, ``x = x - n * hpi``, then ``x * sign[n & 3]``, the second coefficient set
  (negated cosine) when ``n & 2``, and the sine (``n & 1 == 0``) or cosine polynomial (cosine:
  ``n ^ 1``);
- sine polynomial: ``x3 = x * x2; s1 = S2 + x2 * S3; x7 = x3 * x2; s = x + x3 * S1; s + x7 *
  s1``; cosine: ``x4 = x2 * x2; c2 = C3 + x2 * C4; c1 = C0 + x2 * C1; x6 = x4 * x2; c = c1 + x4 *
  C2; c + x6 * c2``; the double result is rounded to float32 once.

A GPU twin should use these tables as data rather than its own ``sinf``/``cosf``.
"""

from __future__ import annotations

import numpy as np

HPI_INV = float.fromhex("0x1.45F306DC9C883p+23")
HPI = float.fromhex("0x1.921FB54442D18p0")
C = tuple(
    float.fromhex(h)
    for h in (
        "0x1p0",
        "-0x1.ffffffd0c621cp-2",
        "0x1.55553e1068f19p-5",
        "-0x1.6c087e89a359dp-10",
        "0x1.99343027bf8c3p-16",
    )
)
S = tuple(
    float.fromhex(h)
    for h in ("-0x1.555545995a603p-3", "0x1.1107605230bc4p-7", "-0x1.994eb3774cf24p-13")
)
SIGN = np.array([1.0, -1.0, -1.0, 1.0])
_PIO4F = np.float32(float.fromhex("0x1.921FB54442D18p-1"))
_TINY = np.float32(2.0**-12)


def _top12(x: np.ndarray) -> np.ndarray:
    return (x.view(np.uint32) >> 20) & 0x7FF


def _sin_poly(x: np.ndarray, x2: np.ndarray) -> np.ndarray:
    x3 = x * x2
    s1 = S[1] + x2 * S[2]
    x7 = x3 * x2
    s = x + x3 * S[0]
    return s + x7 * s1


def _cos_poly(x2: np.ndarray, negate: np.ndarray) -> np.ndarray:
    sign = np.where(negate, -1.0, 1.0)
    x4 = x2 * x2
    c2 = sign * C[3] + x2 * (sign * C[4])
    c1 = sign * C[0] + x2 * (sign * C[1])
    x6 = x4 * x2
    c = c1 + x4 * (sign * C[2])
    return c + x6 * c2


def _sincos(y: np.ndarray, cosine: bool) -> np.ndarray:
    y = np.ascontiguousarray(y, dtype=np.float32)
    if np.any(np.abs(y) >= 120.0) or not np.all(np.isfinite(y)):
        raise ValueError("glibc sinf/cosf emulation covers |x| < 120 only")
    top = _top12(y)
    x = y.astype(np.float64)
    small = top < _top12(np.array([_PIO4F]))[0]
    r = x * HPI_INV
    n = (np.trunc(r).astype(np.int64).astype(np.int32) + 0x800000) >> 24
    n = np.where(small, 0, n)
    reduced = np.where(small, x, x - n * HPI)
    signed = np.where(small, reduced, reduced * SIGN[n & 3])
    x2 = reduced * reduced
    quadrant = (n ^ 1) if cosine else n
    negate = ~small & ((n & 2) != 0)
    value = np.where(quadrant & 1 == 0, _sin_poly(signed, x2), _cos_poly(x2, negate))
    out = value.astype(np.float32)
    tiny = top < _top12(np.array([_TINY]))[0]
    return np.where(tiny, np.float32(1.0) if cosine else y, out)


def glibc_sinf(x: np.ndarray) -> np.ndarray:
    """glibc's ``sinf`` of float32 values with ``|x| < 120``."""
    return _sincos(np.asarray(x), cosine=False)


def glibc_cosf(x: np.ndarray) -> np.ndarray:
    """glibc's ``cosf`` of float32 values with ``|x| < 120``."""
    return _sincos(np.asarray(x), cosine=True)
