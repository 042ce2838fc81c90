"""Test helpers for the Hesai decoder: packets built from known returns, and a reference decoder.

The packet layouts here are written independently of the package's
``pointcloud_io/hesai/sensors.py``: each is nebula's packed structure field by field, in
declaration order, with each field's size, so a wrong offset on either side makes the two
disagree.

:class:`ReferenceDecoder` transcribes nebula's ``HesaiDecoder::unpack`` and its ``ScanCutter``
literally, one packet, block group and channel at a time, in scalar Python (float32 arithmetic
through NumPy scalars, glibc's ``sinf``/``cosf`` through the package's emulation): the
vectorised decoder must give the same sweeps, bit for bit in every field.
"""

from __future__ import annotations

import calendar
import math
import struct
import time
from dataclasses import dataclass, field

import numpy as np

from gpu_euclidean_cluster.pointcloud_io.hesai import timing
from gpu_euclidean_cluster.pointcloud_io.velodyne.libm import glibc_cosf, glibc_sinf
from gpu_euclidean_cluster.pointcloud_io.velodyne.packets import POINT_DTYPE

F = np.float32

#: Each packet structure: header kind, blocks, channels, unit bytes, fine azimuth, SOB blocks,
#: bytes between body and tail (body CRC, functional safety), tail fields (name, bytes) in
#: declaration order, bytes after the tail nebula's structure still holds.
LAYOUTS: dict[str, dict] = {
    "40P": dict(header=0, blocks=10, channels=40, unit=3, fine=False, sob=True, between=0,
                tail=[("reserved1", 5), ("high_temperature", 1), ("reserved2", 2),
                      ("motor_speed", 2), ("timestamp", 4), ("return_mode", 1),
                      ("factory", 1), ("date_time", 6)], after=0, year=2000),
    "64": dict(header=8, blocks=6, channels=64, unit=3, fine=False, sob=False, between=0,
               tail=[("reserved1", 5), ("high_temperature", 1), ("reserved2", 2),
                     ("motor_speed", 2), ("timestamp", 4), ("return_mode", 1), ("factory", 1),
                     ("date_time", 6)], after=0, year=2000),
    "XT": dict(header=12, blocks=8, channels=32, unit=4, fine=False, sob=False, between=0,
               tail=[("reserved1", 10), ("return_mode", 1), ("motor_speed", 2),
                     ("date_time", 6), ("timestamp", 4), ("factory", 1)], after=4, year=1900),
    "QT64": dict(header=12, blocks=4, channels=64, unit=4, fine=False, sob=False, between=0,
                 tail=[("reserved1", 10), ("motor_speed", 2), ("timestamp", 4),
                       ("return_mode", 1), ("factory", 1), ("date_time", 6)], after=4,
                 year=1900),
    "QT128": dict(header=12, blocks=2, channels=128, unit=4, fine=False, sob=False,
                  between=4 + 17,
                  tail=[("reserved1", 5), ("mode_flag", 1), ("reserved2", 6),
                        ("return_mode", 1), ("motor_speed", 2), ("date_time", 6),
                        ("timestamp", 4), ("factory", 1), ("udp_sequence", 4), ("crc", 4)],
                  after=0, year=1900),
    "AT128": dict(header=12, blocks=2, channels=128, unit=4, fine=True, sob=False, between=4,
                  tail=[("reserved1", 6), ("high_temperature", 1), ("reserved2", 11),
                        ("motor_speed", 2), ("timestamp", 4), ("return_mode", 1),
                        ("factory", 1), ("date_time", 6)], after=0, year=None),
    "OT128": dict(header=12, blocks=2, channels=128, unit=3, fine=False, sob=False,
                  between=4 + 17,
                  tail=[("reserved1", 9), ("azimuth_state", 2), ("operational_state", 1),
                        ("return_mode", 1), ("motor_speed", 2), ("date_time", 6),
                        ("timestamp", 4), ("factory", 1), ("udp_sequence", 4),
                        ("imu", 2 + 2 + 2 + 4 + 6 * 2), ("crc", 4)], after=0, year=1900),
}  # fmt: skip
#: The UDP protocol version a ``Header12B`` layout's packets carry (the shared bags': QT128 3.2,
#: XT32 6.1; nebula's QT64, XT16 and XT32M bags: 3.1, 6.1, 6.1; Hesai's SDKs: AT128 4.3,
#: Pandar128/OT128 1.4).
PROTOCOLS = {"XT": (6, 1), "QT64": (3, 1), "QT128": (3, 2), "AT128": (4, 3), "OT128": (1, 4)}
#: nebula's model name -> (layout, channels override).
MODEL_LAYOUTS = {
    "Pandar40P": ("40P", None),
    "Pandar40M": ("40P", None),
    "Pandar64": ("64", None),
    "PandarQT64": ("QT64", None),
    "PandarQT128": ("QT128", None),
    "PandarXT16": ("XT", 16),
    "PandarXT32": ("XT", None),
    "PandarXT32M": ("XT", None),
    "PandarAT128": ("AT128", None),
    "Pandar128E4X": ("OT128", None),
}


def layout(model: str) -> dict:
    """The model's layout, with its block count and channels."""
    name, channels = MODEL_LAYOUTS[model]
    spec = dict(LAYOUTS[name])
    if channels:
        spec["channels"] = channels
    if model == "PandarXT32M":
        spec["blocks"] = 6
    return spec


def packet_bytes(model: str) -> int:
    """Bytes of nebula's structure for ``model``, from the layout."""
    spec = layout(model)
    block = 2 + int(spec["fine"]) + 2 * int(spec["sob"]) + spec["channels"] * spec["unit"]
    tail = sum(size for _, size in spec["tail"])
    return spec["header"] + spec["blocks"] * block + spec["between"] + tail + spec["after"]


def _date_bytes(seconds: int, year_offset: int | None) -> bytes:
    if year_offset is None:  # SecondsSinceEpoch: a zero byte, 5 bytes big endian
        return b"\0" + seconds.to_bytes(5, "big")
    y, mo, d, h, mi, s = time.gmtime(seconds)[:6]
    return bytes([y - year_offset, mo, d, h, mi, s])


def encode_packet(
    model: str,
    encoder: np.ndarray,
    raw: np.ndarray,
    reflectivity: np.ndarray,
    mode: int,
    seconds: int,
    micros: int,
    dis_unit_mm: int = 4,
    **tail: int,
) -> tuple[np.ndarray, int]:
    """One packet of ``model`` as (1500,) uint8 data and its size.

    Args:
        encoder: (B,) block azimuths (AT128: ``(azimuth << 8) + fine``).
        raw, reflectivity: (B, C) raw distances and reflectivities.
        mode: the return-mode byte; ``seconds``/``micros``: the packet's date and microseconds.
        tail: other tail fields by name (``mode_flag``, ``azimuth_state``, ...).
    """
    spec = layout(model)
    out = bytearray()
    if spec["header"] == 12:
        major, minor = PROTOCOLS[MODEL_LAYOUTS[model][0]]
        out += struct.pack("<HBBxxBBxBBB", 0xFFEE, major, minor, spec["channels"],
                           spec["blocks"], dis_unit_mm, 2, 0)  # fmt: skip
    elif spec["header"] == 8:
        out += struct.pack("<HBBxBxx", 0xFFEE, spec["channels"], spec["blocks"], dis_unit_mm)
    for b in range(spec["blocks"]):
        if spec["sob"]:
            out += struct.pack("<H", 0xEEFF)
        if spec["fine"]:
            out += struct.pack("<HB", int(encoder[b]) >> 8, int(encoder[b]) & 0xFF)
        else:
            out += struct.pack("<H", int(encoder[b]))
        for c in range(spec["channels"]):
            out += struct.pack("<HB", int(raw[b, c]), int(reflectivity[b, c]))
            if spec["unit"] == 4:
                out += b"\0"
    out += bytes(spec["between"])
    values = {"return_mode": mode, "timestamp": micros, **tail}
    for name, size in spec["tail"]:
        if name == "date_time":
            out += _date_bytes(seconds, spec["year"])
        else:
            out += int(values.get(name, 0)).to_bytes(size, "little")
    out += bytes(spec["after"])
    data = np.zeros(1500, np.uint8)
    data[: len(out)] = np.frombuffer(bytes(out), np.uint8)
    return data, len(out)


def _field_offset(spec: dict, name: str) -> int:
    at = packet_bytes_of(spec) - spec["after"] - sum(size for _, size in spec["tail"])
    for field_name, size in spec["tail"]:
        if field_name == name:
            return at
        at += size
    raise KeyError(name)


def packet_bytes_of(spec: dict) -> int:
    block = 2 + int(spec["fine"]) + 2 * int(spec["sob"]) + spec["channels"] * spec["unit"]
    tail = sum(size for _, size in spec["tail"])
    return spec["header"] + spec["blocks"] * block + spec["between"] + tail + spec["after"]


# ---------------------------------------------------------------------------------------------
# the reference decoder


RETURNS = {0x33: 1, 0x34: 1, 0x37: 1, 0x38: 1, 0x39: 2, 0x3A: 2, 0x3B: 2, 0x3C: 2, 0x3D: 3,
           0x3E: 2}  # fmt: skip
TWO_PI = F(2) * F(math.pi)
DEG = F(math.pi / 180.0)


def _norm(angle: float, modulus: float = float(TWO_PI)) -> np.float32:
    a = float(F(angle))
    return F(a - math.floor(a / modulus) * modulus)


def _between(start, end, angle, si=True, ei=True) -> bool:
    return bool(_between_any(start, end, angle, si, ei))


def _between_any(start, end, angle, si, ei):
    if start == end and start == angle:
        return si or ei
    if start == end:
        return True
    if not si and angle == start:
        return False
    if not ei and angle == end:
        return False
    if end < start:
        return angle <= end or start <= angle
    return start <= angle <= end


def _offset(model: str, block: int, channel: int, n: int, packet: dict) -> int:
    """nebula's ``get_packet_relative_point_time_offset``, one return."""
    return int(
        timing.point_time_offsets(
            model,
            np.array([block]),
            np.array([channel]),
            np.array([n]),
            np.array([packet["mode_flag"]]),
            np.array([packet["operational_state"]]),
            np.array([packet["azimuth_state"]]),
        )[0]
    )


@dataclass
class ReferenceDecoder:
    """nebula's decoder, scalar (see the module docstring).

    Args:
        model: nebula's model name; ``settings``: the package's decoder settings (its fields);
        ``angles``: a function ``(encoder, channel) -> (azimuth, elevation, sin_az, cos_az,
        sin_el, cos_el)`` and ``azimuths(encoder) -> (list of channel azimuths, lag, lead)``.
    """

    model: str
    settings: object
    corrector: object
    min_range: float
    max_range: float
    swaps: bool
    sweeps: list = field(default_factory=list)
    state: dict | None = None
    buffers: list = field(default_factory=lambda: [[], []])
    stamps: list = field(default_factory=lambda: [0, 0])

    def parse(self, data: np.ndarray) -> dict:
        spec = layout(self.model)
        raw = bytes(data)
        at = spec["header"]
        blocks = []
        for _ in range(spec["blocks"]):
            if spec["sob"]:
                at += 2
            encoder = struct.unpack_from("<H", raw, at)[0]
            at += 2
            if spec["fine"]:
                encoder = (encoder << 8) + raw[at]
                at += 1
            units = []
            for _ in range(spec["channels"]):
                units.append(struct.unpack_from("<HB", raw, at))
                at += spec["unit"]
            blocks.append((encoder, units))

        def tail(name):
            offset = _field_offset(spec, name)
            size = dict(spec["tail"])[name]
            return int.from_bytes(raw[offset : offset + size], "little")

        date = raw[_field_offset(spec, "date_time") : _field_offset(spec, "date_time") + 6]
        if spec["year"] is None:
            seconds = int.from_bytes(date[1:], "big")
        else:
            seconds = calendar.timegm((date[0] + spec["year"], date[1], date[2], date[3],
                                       date[4], date[5]))  # fmt: skip
        names = dict(spec["tail"])
        dis_unit = 4 / 1000.0 if spec["header"] == 0 else raw[9 if spec["header"] == 12 else 5]
        return {
            "blocks": blocks,
            "mode": tail("return_mode"),
            "stamp": (seconds * 1_000_000_000 + tail("timestamp") * 1000) % 2**64,
            "dis_unit": dis_unit if spec["header"] == 0 else dis_unit / 1000.0,
            "mode_flag": tail("mode_flag") if "mode_flag" in names else 0,
            "operational_state": tail("operational_state") if "operational_state" in names else 0,
            "azimuth_state": tail("azimuth_state") if "azimuth_state" in names else 0,
        }

    # -- the scan cutter, literally ----------------------------------------------------------

    def _fov(self, azimuth) -> bool:
        start, end = self.settings.fov_radians
        return True if start == end else _between(start, end, azimuth)

    def _step(self, azimuths, lag, lead, packet, block) -> dict:
        cut = self.settings.cut_radians
        channels = len(azimuths)
        if self.state is None:
            in_fov = [self._fov(a) for a in azimuths]
            quarter = TWO_PI / F(4)
            start_r, end_r = _norm(cut - quarter), _norm(cut + quarter)
            mm = [azimuths[lag], azimuths[lead]]
            end_half = _norm(cut + TWO_PI / F(2))
            intersects = (
                all(_between(start_r, end_r, a) for a in mm)
                and sum(_between(cut, end_half, a, False, True) for a in mm) == 1
            )
            if not intersects:
                buffers = [0] * channels
                if in_fov[lag] or in_fov[lead]:
                    self._stamp(0, packet, block)
            else:
                buffers = [1 if _between(cut, end_half, a, False, True) else 0 for a in azimuths]
                if any(f and b == 0 for f, b in zip(in_fov, buffers, strict=True)):
                    self._stamp(0, packet, block)
                if any(f and b == 1 for f, b in zip(in_fov, buffers, strict=True)):
                    self._stamp(1, packet, block)
            self.state = {
                "current": 0,
                "last": list(azimuths),
                "buffers": buffers,
                "in_fov": in_fov,
                "bstate": buffers[0] if len(set(buffers)) == 1 else "D",
                "fstate": in_fov[0] if len(set(in_fov)) == 1 else "D",
            }
            return self.state
        s = self.state
        for c in range(channels):
            s["in_fov"][c] = self._fov(azimuths[c])
            if _between(s["last"][c], azimuths[c], cut, True, False):
                s["buffers"][c] = (s["buffers"][c] + 1) % 2
            s["last"][c] = azimuths[c]
        before = (s["bstate"], s["fstate"])
        b_low, b_high = s["buffers"][lag], s["buffers"][lead]
        f_low, f_high = s["in_fov"][lag], s["in_fov"][lead]
        s["bstate"] = b_low if b_low == b_high else "D"
        s["fstate"] = f_low if f_low == f_high else "D"
        stamp, emit = self._fsm(before, (s["bstate"], s["fstate"]), s["current"])
        if stamp is not None:
            self._stamp(stamp, packet, block)
        if emit is not None:
            self.sweeps.append((self.buffers[emit], self.stamps[emit]))
            self.buffers[emit] = []
            s["current"] = (s["current"] + 1) % 2
        return s

    def _fsm(self, before, after, current):
        at_end = self.settings.cuts_at_fov_end

        def state(bstate, fstate):
            if bstate == "D":
                return ("C", current)
            if at_end and fstate is False:
                return ("O", bstate)
            return ("F", bstate)

        a, b = state(*before), state(*after)
        if a == b:
            return None, None
        if not at_end:  # FsmCutInFov
            table = {
                (("F", 0), ("C", 0)): (1, None),
                (("F", 0), ("F", 1)): (1, 0),
                (("C", 0), ("F", 1)): (None, 0),
                (("F", 1), ("C", 1)): (0, None),
                (("F", 1), ("F", 0)): (0, 1),
                (("C", 1), ("F", 0)): (None, 1),
            }
            return table.get((a, b), (None, None))
        for x in (0, 1):  # FsmCutAtFovEnd, both buffers' halves
            y = 1 - x
            table = {
                (("O", x), ("F", x)): (x, None),
                (("O", x), ("C", x)): (x, None),
                (("O", x), ("O", y)): (y, x),
                (("F", x), ("O", y)): (None, x),
                (("F", x), ("F", y)): (y, x),
                (("C", x), ("O", y)): (None, x),
                (("C", x), ("F", y)): (y, x),
            }
            if (a, b) in table:
                return table[(a, b)]
        return None, None

    def _stamp(self, buffer: int, packet: dict, block: int) -> None:
        n = RETURNS[packet["mode"]]
        channels = len(packet["blocks"][0][1])
        earliest = min(
            _offset(self.model, b, c, n, packet)
            for b in range(block, block + n)
            for c in range(channels)
        )
        self.stamps[buffer] = (packet["stamp"] + earliest) % 2**64

    # -- unpack ------------------------------------------------------------------------------

    def unpack(self, data: np.ndarray) -> None:
        packet = self.parse(data)
        n = RETURNS[packet["mode"]]
        for block in range(0, len(packet["blocks"]), n):
            encoder = packet["blocks"][block][0]
            azimuths, lag, lead = self.corrector.azimuths(encoder)
            s = self._step(azimuths, lag, lead, packet, block)
            if s["fstate"] == "D" or s["fstate"] is True:
                self._convert(packet, block, n, encoder, s)

    def _convert(self, packet, start, n, encoder, s) -> None:
        angles = self.corrector.angles(encoder)
        mode = packet["mode"]
        channels = len(packet["blocks"][0][1])
        for c in range(channels):
            units = [packet["blocks"][start + r][1][c] for r in range(n)]
            dists = [F(u[0] * packet["dis_unit"]) for u in units]
            for r in range(n):
                raw, refl = units[r]
                dist = dists[r]
                valid = raw != 0
                if (dist < F(self.min_range) or F(self.max_range) < dist
                        or float(dist) < self.settings.min_range
                        or self.settings.max_range < float(dist)):  # fmt: skip
                    valid = False
                others = [i for i in range(n) if i != r]
                identical = any(units[i] == units[r] for i in others)
                kind = self._kind(mode, r, units, identical)
                if kind == 6 and r != n - 1:
                    valid = False
                if r != n - 1 and any(
                    float(abs(dists[i] - dist)) < self.settings.dual_return_distance_threshold
                    for i in others
                ):
                    valid = False
                if not valid or not s["in_fov"][c]:
                    continue
                az, el, sin_az, cos_az, sin_el, cos_el = angles[c]
                frame = s["buffers"][c]
                since = ((packet["stamp"] - self.stamps[frame]) % 2**64) % 2**32
                stamp = (since + _offset(self.model, start + r, c, n, packet)) % 2**32
                xy = dist * cos_el
                self.buffers[frame].append(
                    (xy * sin_az, xy * cos_az, dist * sin_el, refl, kind, c, az, el, dist, stamp)
                )

    def _kind(self, mode: int, r: int, units, identical: bool) -> int:
        if identical:
            return 6
        strongest = all(units[r][1] >= units[i][1] for i in range(len(units)) if i != r)
        first = r == 0
        table = {
            0x33: 2, 0x34: 7, 0x37: 3, 0x38: 1,
            0x39: (10 if first else 3) if strongest else (1 if first else 8),
            0x3A: 2 if first else 7,
            0x3B: 2 if first else 1,
            0x3C: (9 if first else 3) if strongest else (2 if first else 8),
            0x3D: (2, 1, 3)[r],
            0x3E: 3 if first else 8,
        }  # fmt: skip
        kind = table[mode]
        if self.swaps and mode == 0x3B:
            kind = {2: 1, 1: 2}[kind]
        return kind

    def take_sweeps(self) -> list[tuple[np.ndarray, int]]:
        """The sweeps completed so far, as (points, stamp_ns), and forget them."""
        out = []
        for rows, stamp in self.sweeps:
            points = np.zeros(len(rows), POINT_DTYPE)
            for i, name in enumerate(POINT_DTYPE.names):
                points[name] = [row[i] for row in rows]
            out.append((points, int(stamp)))
        self.sweeps = []
        return out


@dataclass
class ReferenceCalibrationAngles:
    """The calibration-based corrector, row by row (degrees from the CSV, float32)."""

    elevation_deg: np.ndarray
    azimuth_deg: np.ndarray

    def __post_init__(self):
        self.elevation = self.elevation_deg.astype(F) * DEG
        self.offset = self.azimuth_deg.astype(F) * DEG

    def _spatial(self, encoder):
        block = F((encoder / 100.0) * (math.pi / 180.0))
        return block + self.offset

    def azimuths(self, encoder):
        spatial = self._spatial(encoder)
        return [_norm(a) for a in spatial], int(np.argmin(self.offset)), int(np.argmax(self.offset))

    def angles(self, encoder):
        spatial = self._spatial(encoder)
        sin_az, cos_az = glibc_sinf(spatial), glibc_cosf(spatial)
        sin_el, cos_el = glibc_sinf(self.elevation), glibc_cosf(self.elevation)
        return [
            (_norm(spatial[c]), self.elevation[c], sin_az[c], cos_az[c], sin_el[c], cos_el[c])
            for c in range(spatial.shape[0])
        ]


@dataclass
class ReferenceCorrectionAngles:
    """The AT128's correction-based corrector from the ``.dat`` bytes, parsed here."""

    data: bytes

    def __post_init__(self):
        d = self.data
        at = d.find(b"\xee\xff")
        channels, mirrors, frames, resolution = d[at + 4], d[at + 5], d[at + 6], d[at + 15]
        at += 16
        values = struct.unpack_from(f"<{2 * mirrors}I{2 * channels}i", d, at)
        at += 8 * mirrors + 8 * channels
        adjust = struct.unpack_from(f"<{360 * channels}b", d, at)
        wrap8 = lambda v: (v * resolution + 128) % 256 - 128  # noqa: E731
        self.frames = frames
        self.start = [v * resolution for v in values[:mirrors]]
        self.end = [v * resolution for v in values[mirrors : 2 * mirrors]]
        self.azimuth = [v * resolution for v in values[2 * mirrors : 2 * mirrors + channels]]
        self.elevation = [v * resolution for v in values[2 * mirrors + channels :]]
        self.az_adjust = [wrap8(v) for v in adjust[: 180 * channels]] + [0] * 13000
        self.el_adjust = [wrap8(v) for v in adjust[180 * channels :]] + [0] * 13000
        self.channels = channels

    def _field(self, encoder):
        for i in range(self.frames):
            if _between(self.start[i], self.end[i], encoder):
                return i
        raise AssertionError(f"azimuth {encoder} in no field")

    @staticmethod
    def _adjust(table, channel, encoder):
        i = math.floor(F(F(encoder) / F(51200)))
        k = F(F(encoder - i * 51200) / F(51200))
        value = F(F(F(1) - k) * F(table[channel * 180 + i])) + F(
            k * F(table[channel * 180 + i + 1])
        )
        return int(math.copysign(math.floor(abs(float(value)) + 0.5), float(value)))

    def _azimuth_exact(self, encoder, c):
        exact = (encoder - self.start[self._field(encoder)]) * 2 - self.azimuth[c]
        exact += self._adjust(self.az_adjust, c, encoder) * 256
        return exact % 9216000

    def azimuths(self, encoder):
        values = [
            F((self._azimuth_exact(encoder, c) / 25600.0) * (math.pi / 180.0))
            for c in range(self.channels)
        ]
        return values, int(np.argmin(values)), int(np.argmax(values))

    def angles(self, encoder):
        out = []
        for c in range(self.channels):
            az = self._azimuth_exact(encoder, c)
            el = self.elevation[c] + self._adjust(self.el_adjust, c, encoder) * 256
            el_rad = F((float(F(2) * F(el)) * math.pi) / 9216000)
            table = [F(F(F(2 * j) * F(math.pi)) / F(9216000)) for j in (az, el % 9216000)]
            sin_t, cos_t = glibc_sinf(np.array(table)), glibc_cosf(np.array(table))
            az_rad = F((az / 25600.0) * (math.pi / 180.0))
            out.append((az_rad, el_rad, sin_t[0], cos_t[0], sin_t[1], cos_t[1]))
        return out


# ---------------------------------------------------------------------------------------------
# synthetic streams


def synthetic_stream(
    model: str,
    packets: int,
    step: int,
    mode: int,
    seed: int,
    first: int = 0,
    turn: int = 36000,
    period_us: int = 200,
    **tail: int,
) -> tuple[np.ndarray, np.ndarray]:
    """``packets`` packets of ``model`` whose block groups turn by ``step`` encoder units each,
    from ``first``: ``(P, 1500)`` data and ``(P,)`` sizes.

    The returns are drawn from ``seed``: a distance of 0.5-60 m (1 in 12 missing), in multi-return
    modes later returns at a random gap (some identical, some within 0.1 m, some missing), random
    reflectivities; packets are ``period_us`` apart."""
    spec = layout(model)
    blocks, channels = spec["blocks"], spec["channels"]
    n = RETURNS[mode]
    rng = np.random.default_rng(seed)
    rows, sizes = [], []
    group = 0
    for p in range(packets):
        encoder = np.zeros(blocks, np.int64)
        raw = np.zeros((blocks, channels), np.int64)
        refl = rng.integers(0, 256, (blocks, channels))
        for start in range(0, blocks, n):
            encoder[start : start + n] = (first + group * step) % turn
            group += 1
            base = rng.integers(125, 15000, channels)
            base[rng.random(channels) < 1 / 12] = 0
            raw[start] = base
            for r in range(1, n):
                kind = rng.integers(0, 4, channels)
                gap = np.choose(kind, [0, rng.integers(1, 20, channels),
                                       rng.integers(30, 3000, channels), -base])  # fmt: skip
                raw[start + r] = np.clip(base + gap, 0, 65535)
                refl[start + r] = np.where(kind == 0, refl[start], refl[start + r])
        micros = p * period_us
        data, size = encode_packet(model, encoder, raw, refl, mode, 1_700_000_000 + micros // 10**6,
                                   micros % 10**6, **tail)  # fmt: skip
        rows.append(data)
        sizes.append(size)
    return np.stack(rows), np.array(sizes)
