"""LZF decompression (liblzf's format), for PCD ``binary_compressed`` data.

An LZF stream is a sequence of tokens. A control byte ``c < 32`` starts a literal run of
``c + 1`` bytes copied from the input; otherwise ``c >> 5`` is the match length minus 2 (7 means
"plus the next byte") and ``(c & 31) << 8 | next byte`` is the distance minus 1 back into the
output.
The loop below runs once per token, not per point: a token covers up to 32 literal bytes or
264 matched bytes, and each is copied with one slice operation.

The output is allocated once, at the size the caller expects, and no token may write past it: a
stream cannot make the decompressor allocate more than it was told to expect. The longest match
(264 bytes) takes three input bytes, so no stream expands more than :data:`MAX_EXPANSION` times.
"""

from __future__ import annotations

#: Most bytes one input byte of a valid stream can expand to (a 3-byte token, a 264-byte match).
MAX_EXPANSION = 88


class LzfError(ValueError):
    """The compressed data is corrupt or does not decompress to the expected size."""


def lzf_decompress(data: bytes | bytearray | memoryview, expected_size: int) -> bytearray:
    """Decompress ``data``, which must expand to exactly ``expected_size`` bytes.

    Raises:
        LzfError: a token runs past the input, a match refers before the start of the output,
            or the output size differs from ``expected_size``.
    """
    src = bytes(data)
    end = len(src)
    out = bytearray(expected_size)
    op = 0
    ip = 0
    while ip < end:
        ctrl = src[ip]
        ip += 1
        if ctrl < 32:
            length = ctrl + 1
            if ip + length > end:
                raise LzfError(f"literal run of {length} bytes at input offset {ip - 1} is cut off")
            _check_room(op, length, expected_size, ip)
            out[op : op + length] = src[ip : ip + length]
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
            _check_room(op, length, expected_size, ip)
            _copy_match(out, op, distance, length, ip)
        op += length
    if op != expected_size:
        raise LzfError(f"data decompresses to {op} bytes, expected {expected_size}")
    return out


def _check_room(op: int, length: int, expected_size: int, ip: int) -> None:
    if op + length > expected_size:
        raise LzfError(
            f"data decompresses to more than the {expected_size} bytes expected "
            f"(token before input offset {ip})"
        )


def _copy_match(out: bytearray, op: int, distance: int, length: int, ip: int) -> None:
    """Write ``length`` bytes at ``op`` copied from ``distance`` bytes back.

    The source may overlap the bytes being written (distance < length), in which case the last
    ``distance`` bytes repeat, as in a byte-by-byte copy.
    """
    start = op - distance
    if start < 0:
        raise LzfError(f"match before input offset {ip} refers before the start of the output")
    if distance >= length:
        out[op : op + length] = out[start : start + length]
    else:
        repeats = -(-length // distance)
        out[op : op + length] = (out[start:op] * repeats)[:length]
