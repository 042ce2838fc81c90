"""LZF decompression (liblzf's format), for PCD ``binary_compressed`` data.

An LZF stream is a sequence of tokens. A control byte ``c < 32`` starts a literal run of
``c + 1`` bytes copied from the input; otherwise ``c >> 5`` is the match length minus 2 (7 means
"plus the next byte") and ``(c & 31) << 8 | next byte`` is the distance minus 1 back into the
output.
The loop below runs once per token, not per point: a token covers up to 32 literal bytes or
264 matched bytes, and each is copied with one slice operation.
"""

from __future__ import annotations


class LzfError(ValueError):
    """The compressed data is corrupt or does not decompress to the expected size."""


def lzf_decompress(data: bytes | bytearray | memoryview, expected_size: int) -> bytes:
    """Decompress ``data``, which must expand to exactly ``expected_size`` bytes.

    Raises:
        LzfError: a token runs past the input, a match refers before the start of the output,
            or the output size differs from ``expected_size``.
    """
    src = bytes(data)
    end = len(src)
    out = bytearray()
    ip = 0
    while ip < end:
        ctrl = src[ip]
        ip += 1
        if ctrl < 32:
            length = ctrl + 1
            if ip + length > end:
                raise LzfError(f"literal run of {length} bytes at input offset {ip - 1} is cut off")
            out += src[ip : ip + length]
            ip += length
        else:
            length = ctrl >> 5
            if length == 7:
                if ip >= end:
                    raise LzfError(f"match at input offset {ip - 1} is cut off")
                length += src[ip]
                ip += 1
            if ip >= end:
                raise LzfError(f"match at input offset {ip - 1} is cut off")
            distance = ((ctrl & 31) << 8 | src[ip]) + 1
            ip += 1
            length += 2
            _copy_match(out, distance, length, ip)
        if len(out) > expected_size:
            break
    if len(out) != expected_size:
        raise LzfError(f"data decompresses to {len(out)} bytes, expected {expected_size}")
    return bytes(out)


def _copy_match(out: bytearray, distance: int, length: int, ip: int) -> None:
    """Append ``length`` bytes starting ``distance`` back from the end of ``out``.

    The source may overlap the bytes being written (distance < length), in which case the last
    ``distance`` bytes repeat, as in a byte-by-byte copy.
    """
    start = len(out) - distance
    if start < 0:
        raise LzfError(f"match before input offset {ip} refers before the start of the output")
    if distance >= length:
        out += out[start : start + length]
    else:
        pattern = out[start:]
        repeats = -(-length // distance)
        out += (pattern * repeats)[:length]
