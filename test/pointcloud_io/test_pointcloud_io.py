"""Point cloud file I/O: readers, the PCD writer, LZF, and every bad-file case."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster.pointcloud_io import (
    Cloud,
    PointCloudFileError,
    detect_format,
    load_points,
    read_pcd,
    write_pcd,
)
from gpu_euclidean_cluster.pointcloud_io.lzf import LzfError, lzf_decompress

from .._pointcloud_io_helpers import FRAME_POINTS, data_file


def _random_cloud(n: int = 50, seed: int = 0, height: int = 1) -> Cloud:
    rng = np.random.default_rng(seed)
    xyz = rng.normal(scale=20.0, size=(n, 3)).astype(np.float32)
    xyz[3] = np.nan
    xyz[5, 1] = np.inf
    fields = {
        "intensity": rng.random(n).astype(np.float32),
        "ring": rng.integers(0, 64, n).astype(np.uint16),
        "t": rng.random(n),
        "label": rng.integers(-(2**31), 2**31 - 1, n).astype(np.int32),
        "flag": rng.integers(-128, 127, n).astype(np.int8),
        "id": rng.integers(0, 2**63, n, dtype=np.uint64),
        "normal": rng.normal(size=(n, 3)).astype(np.float32),
    }
    return Cloud(xyz=xyz, fields=fields, height=height)


def _assert_same_cloud(actual: Cloud, expected: Cloud) -> None:
    np.testing.assert_array_equal(actual.xyz, expected.xyz)
    assert actual.fields.keys() == expected.fields.keys()
    for name, values in expected.fields.items():
        assert actual.fields[name].dtype == values.dtype, name
        np.testing.assert_array_equal(actual.fields[name], values, err_msg=name)
    assert (actual.height, actual.width) == (expected.height, expected.width)


def _pcd_header(
    fields: str,
    size: str,
    type_: str,
    count: str | None,
    points: int,
    data: str,
    height: int = 1,
    version: str = "0.7",
) -> bytes:
    lines = [f"VERSION {version}", f"FIELDS {fields}", f"SIZE {size}", f"TYPE {type_}"]
    if count is not None:
        lines.append(f"COUNT {count}")
    lines += [
        f"WIDTH {points // height}",
        f"HEIGHT {height}",
        "VIEWPOINT 0 0 0 1 0 0 0",
        f"POINTS {points}",
        f"DATA {data}",
    ]
    return ("\n".join(lines) + "\n").encode()


# --- Cloud ---------------------------------------------------------------------------------


def test_cloud_derives_width_and_checks_its_arrays() -> None:
    cloud = Cloud(np.zeros((6, 3), np.float32), {"i": np.arange(6)}, height=2)
    assert (cloud.num_points, len(cloud), cloud.width, cloud.is_organized) == (6, 6, 3, True)
    with pytest.raises(ValueError, match=r"\(N, 3\)"):
        Cloud(np.zeros((6, 4), np.float32))
    with pytest.raises(ValueError, match="float32"):
        Cloud(np.zeros((6, 3)))
    with pytest.raises(ValueError, match="rows"):
        Cloud(np.zeros((6, 3), np.float32), {"i": np.arange(5)})
    with pytest.raises(ValueError, match="height"):
        Cloud(np.zeros((6, 3), np.float32), height=4)


def test_finite_mask_flags_nan_and_inf_rows() -> None:
    cloud = _random_cloud()
    mask = cloud.finite_mask()
    assert not mask[3] and not mask[5] and mask.sum() == cloud.num_points - 2


# --- format detection ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("a.bin", "kitti"),
        ("dir.x/n.pcd.bin", "nuscenes"),
        ("A.PCD", "pcd"),
        ("p.npy", "npy"),
        ("sweep.PCD.BIN", "nuscenes"),
    ],
)
def test_format_from_name(name: str, fmt: str) -> None:
    assert detect_format(name) == fmt


def test_unknown_formats_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "cloud.las"
    path.write_bytes(b"\0" * 16)
    with pytest.raises(PointCloudFileError, match=r"cloud\.las: cannot tell the format"):
        load_points(path)
    with pytest.raises(PointCloudFileError, match="unknown format 'las'"):
        load_points(path, format="las")


# --- KITTI / nuScenes ----------------------------------------------------------------------


def test_kitti_round_trip_keeps_nan_rows(tmp_path: Path) -> None:
    table = np.random.default_rng(1).normal(size=(100, 4)).astype(np.float32)
    table[7, :3] = np.nan
    path = tmp_path / "frame.bin"
    table.tofile(path)
    cloud = load_points(path)
    np.testing.assert_array_equal(cloud.xyz, table[:, :3])
    np.testing.assert_array_equal(cloud.fields["intensity"], table[:, 3])
    assert list(cloud.fields) == ["intensity"] and cloud.xyz.flags.c_contiguous


def test_nuscenes_round_trip_has_uint16_ring(tmp_path: Path) -> None:
    table = np.random.default_rng(2).normal(size=(64, 5)).astype(np.float32)
    table[:, 4] = np.arange(64) % 32
    path = tmp_path / "sweep.pcd.bin"
    table.tofile(path)
    cloud = load_points(path)
    np.testing.assert_array_equal(cloud.xyz, table[:, :3])
    np.testing.assert_array_equal(cloud.fields["intensity"], table[:, 3])
    assert cloud.fields["ring"].dtype == np.uint16
    np.testing.assert_array_equal(cloud.fields["ring"], np.arange(64) % 32)


def test_nuscenes_reader_refuses_non_ring_values(tmp_path: Path) -> None:
    table = np.ones((10, 5), np.float32)
    table[4, 4] = 2.5
    path = tmp_path / "sweep.pcd.bin"
    table.tofile(path)
    with pytest.raises(PointCloudFileError, match=r"ring of point 4 is 2\.5,"):
        load_points(path)


@pytest.mark.parametrize(("name", "record"), [("f.bin", 16), ("f.pcd.bin", 20)])
def test_size_not_a_multiple_of_the_record(tmp_path: Path, name: str, record: int) -> None:
    path = tmp_path / name
    path.write_bytes(b"\0" * (record * 3 + 6))
    with pytest.raises(PointCloudFileError, match=f"not a multiple of the {record}-byte"):
        load_points(path)


@pytest.mark.parametrize("fmt", ["kitti", "nuscenes", "pcd", "npy"])
def test_missing_file_names_the_path(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "absent.xyz"
    with pytest.raises(FileNotFoundError, match=r"absent\.xyz: no such file"):
        load_points(path, format=fmt)


def test_directory_is_not_a_cloud(tmp_path: Path) -> None:
    folder = tmp_path / "frames.bin"
    folder.mkdir()
    with pytest.raises(IsADirectoryError, match="is a directory"):
        load_points(folder)


def test_empty_kitti_file_is_an_empty_cloud(tmp_path: Path) -> None:
    path = tmp_path / "empty.bin"
    path.write_bytes(b"")
    cloud = load_points(path)
    assert cloud.xyz.shape == (0, 3) and cloud.fields["intensity"].shape == (0,)


# --- npy -----------------------------------------------------------------------------------


def test_npy_plain_columns(tmp_path: Path) -> None:
    table = np.arange(42, dtype=np.float64).reshape(6, 7)
    np.save(tmp_path / "p.npy", table)
    cloud = load_points(tmp_path / "p.npy")
    assert cloud.xyz.dtype == np.float32
    np.testing.assert_array_equal(cloud.xyz, table[:, :3])
    assert list(cloud.fields) == ["intensity", "ring", "column5", "column6"]
    np.testing.assert_array_equal(cloud.fields["column6"], table[:, 6])


def test_npy_organised_plain_and_structured(tmp_path: Path) -> None:
    grid = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    np.save(tmp_path / "g.npy", grid)
    cloud = load_points(tmp_path / "g.npy")
    assert (cloud.height, cloud.width) == (2, 3)
    np.testing.assert_array_equal(cloud.xyz, grid.reshape(6, 4)[:, :3])

    records = np.zeros(
        (2, 3), dtype=[("i", "u1"), ("x", "f8"), ("y", "f4"), ("z", "i2"), ("n", "f4", (3,))]
    )
    records["x"] = np.arange(6).reshape(2, 3)
    records["n"] = 7
    np.save(tmp_path / "s.npy", records)
    cloud = load_points(tmp_path / "s.npy")
    assert (cloud.height, cloud.width, list(cloud.fields)) == (2, 3, ["i", "n"])
    np.testing.assert_array_equal(cloud.xyz[:, 0], np.arange(6))
    assert cloud.fields["n"].shape == (6, 3) and (cloud.fields["n"] == 7).all()


@pytest.mark.parametrize(
    ("array", "reason"),
    [
        (np.zeros((5, 2)), r"not \(N, C\)"),
        (np.zeros(5), r"not \(N, C\)"),
        (np.array([["a", "b", "c"]]), "not numeric"),
        (np.zeros(4, dtype=[("x", "f4"), ("y", "f4")]), "no z field"),
    ],
)
def test_npy_bad_layouts(tmp_path: Path, array: np.ndarray, reason: str) -> None:
    np.save(tmp_path / "bad.npy", array)
    with pytest.raises(PointCloudFileError, match=reason):
        load_points(tmp_path / "bad.npy")


def test_npy_object_and_garbage_files(tmp_path: Path) -> None:
    np.save(tmp_path / "obj.npy", np.array([[1, 2, None]], dtype=object), allow_pickle=True)
    with pytest.raises(PointCloudFileError, match=r"obj\.npy: not a readable \.npy array"):
        load_points(tmp_path / "obj.npy")
    (tmp_path / "junk.npy").write_bytes(b"definitely not numpy")
    with pytest.raises(PointCloudFileError, match="not a readable"):
        load_points(tmp_path / "junk.npy")


# --- PCD round trips and hand-written files ------------------------------------------------


@pytest.mark.parametrize("encoding", ["binary", "ascii"])
@pytest.mark.parametrize("height", [1, 5])
def test_pcd_round_trip(tmp_path: Path, encoding: str, height: int) -> None:
    cloud = _random_cloud(n=50, seed=height, height=height)
    path = tmp_path / "c.pcd"
    write_pcd(path, cloud, encoding=encoding)
    assert f"DATA {encoding}\n".encode() in path.read_bytes()[:400]
    _assert_same_cloud(load_points(path), cloud)


@pytest.mark.parametrize("encoding", ["binary", "ascii"])
def test_pcd_empty_cloud_round_trip(tmp_path: Path, encoding: str) -> None:
    cloud = Cloud(np.zeros((0, 3), np.float32), {"intensity": np.zeros(0, np.float32)})
    write_pcd(tmp_path / "e.pcd", cloud, encoding=encoding)
    _assert_same_cloud(read_pcd(tmp_path / "e.pcd"), cloud)


def test_pcd_writer_refuses_what_pcd_cannot_hold(tmp_path: Path) -> None:
    cloud = Cloud(np.zeros((2, 3), np.float32), {"c": np.zeros(2, np.complex64)})
    with pytest.raises(ValueError, match="dtype complex64"):
        write_pcd(tmp_path / "c.pcd", cloud)
    with pytest.raises(ValueError, match="unknown PCD encoding"):
        write_pcd(tmp_path / "c.pcd", _random_cloud(), encoding="binary_compressed")


def test_pcd_binary_any_field_order_f8_xyz_and_padding(tmp_path: Path) -> None:
    dtype = np.dtype(
        [
            ("intensity", "<f4"),
            ("_", "u1", (3,)),
            ("z", "<f8"),
            ("y", "<f8"),
            ("ring", "<u2"),
            ("x", "<f8"),
        ]
    )
    records = np.zeros(6, dtype)
    records["x"], records["y"], records["z"] = np.arange(6), -np.arange(6), 0.5
    records["intensity"], records["ring"] = 0.25, np.arange(6) + 100
    records["_"] = 0xAB
    path = tmp_path / "ordered.pcd"
    header = _pcd_header(
        "intensity _ z y ring x", "4 1 8 8 2 8", "F U F F U F", "1 3 1 1 1 1", 6, "binary", height=2
    )
    path.write_bytes(header + records.tobytes())
    cloud = read_pcd(path)
    np.testing.assert_array_equal(cloud.xyz, np.c_[np.arange(6), -np.arange(6), np.full(6, 0.5)])
    assert list(cloud.fields) == ["intensity", "ring"] and (cloud.height, cloud.width) == (2, 3)
    np.testing.assert_array_equal(cloud.fields["ring"], np.arange(6) + 100)


def test_pcd_ascii_v06_without_count_with_comments_and_crlf(tmp_path: Path) -> None:
    text = (
        "# written by hand\r\nVERSION .6\r\nFIELDS x y z rgb\r\nSIZE 4 4 4 4\r\n"
        "TYPE F F F U\r\nWIDTH 3\r\nHEIGHT 1\r\nPOINTS 3\r\nDATA ascii\r\n"
        "1 2 3 4294967295\r\nnan nan nan 0\r\n-1.5e3 0 .25 7\r\n"
    )
    (tmp_path / "h.pcd").write_text(text, newline="")
    cloud = read_pcd(tmp_path / "h.pcd")
    np.testing.assert_array_equal(cloud.xyz, [[1, 2, 3], [np.nan] * 3, [-1500, 0, 0.25]])
    np.testing.assert_array_equal(cloud.fields["rgb"], [4294967295, 0, 7])
    assert cloud.fields["rgb"].dtype == np.uint32


def test_pcd_unknown_header_line_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    header = _pcd_header("x y z", "4 4 4", "F F F", None, 1, "ascii")
    (tmp_path / "u.pcd").write_bytes(header.replace(b"DATA", b"COLOR red\nDATA") + b"1 2 3\n")
    with caplog.at_level(logging.WARNING):
        cloud = read_pcd(tmp_path / "u.pcd")
    assert cloud.num_points == 1 and "COLOR red" in caplog.text


def test_pcd_trailing_binary_bytes_are_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    header = _pcd_header("x y z", "4 4 4", "F F F", "1 1 1", 2, "binary")
    (tmp_path / "t.pcd").write_bytes(header + np.ones(7, "<f4").tobytes())
    with caplog.at_level(logging.WARNING):
        cloud = read_pcd(tmp_path / "t.pcd")
    assert cloud.num_points == 2 and "4 bytes after the last point" in caplog.text


# --- binary_compressed ---------------------------------------------------------------------

#: liblzf's compression (python-lzf 0.2.6) of 8 points, fields one after another:
#: x = 0.25 i (F4), y = 0 (F4), z = 1.5 (F4), intensity = 10 i (F8), ring = i (U2),
#: normal = (0, 0, 1) (F4 x 3). Literal runs, short and long (overlapping) matches.
_LZF_FIXTURE = bytes.fromhex(
    "010000400001803e2005033f00004020030080200300a0200300c0200300e02003e017004027e01303e00300"
    "012440800d0034a007003ea0070044a0070049a007004e800701805120070c01000200030004000500060007"
    "803e600040a7c000e03f0b01803f"
)
_LZF_FIXTURE_SIZE = 8 * (4 + 4 + 4 + 8 + 2 + 12)


def _compressed_pcd(
    path: Path, body: bytes, uncompressed: int, announced: int | None = None
) -> None:
    header = _pcd_header(
        "x _ y z intensity ring normal",
        "4 1 4 4 8 2 4",
        "F U F F F U F",
        "1 2 1 1 1 1 3",
        8,
        "binary_compressed",
        height=2,
    )
    sizes = np.array([len(body) if announced is None else announced, uncompressed], "<u4")
    path.write_bytes(header + sizes.tobytes() + body)


def test_pcd_binary_compressed_written_by_liblzf(tmp_path: Path) -> None:
    assert len(_LZF_FIXTURE) < _LZF_FIXTURE_SIZE  # so the stream holds back-references
    _compressed_pcd(tmp_path / "c.pcd", _LZF_FIXTURE, _LZF_FIXTURE_SIZE)
    cloud = read_pcd(tmp_path / "c.pcd")
    i = np.arange(8)
    np.testing.assert_array_equal(cloud.xyz, np.c_[0.25 * i, np.zeros(8), np.full(8, 1.5)])
    np.testing.assert_array_equal(cloud.fields["intensity"], 10.0 * i)
    np.testing.assert_array_equal(cloud.fields["ring"], i)
    np.testing.assert_array_equal(cloud.fields["normal"], np.tile([0, 0, 1], (8, 1)))
    assert (cloud.height, cloud.width) == (2, 4)
    assert cloud.fields["normal"].flags.writeable


def test_pcd_binary_compressed_matches_liblzf_on_a_large_cloud(tmp_path: Path) -> None:
    lzf = pytest.importorskip("lzf", reason="python-lzf (liblzf) not installed: cross-check only")
    cloud = _random_cloud(n=5000, seed=9)
    fields = {"x": cloud.xyz[:, 0], "y": cloud.xyz[:, 1], "z": cloud.xyz[:, 2], **cloud.fields}
    raw = b"".join(np.ascontiguousarray(v).tobytes() for v in fields.values())
    body = lzf.compress(raw, len(raw) + len(raw) // 16 + 64)
    header = _pcd_header(
        " ".join(fields),
        "4 4 4 4 2 8 4 1 8 4",
        "F F F F U F I I U F",
        "1 1 1 1 1 1 1 1 1 3",
        5000,
        "binary_compressed",
    )
    path = tmp_path / "big.pcd"
    path.write_bytes(header + np.array([len(body), len(raw)], "<u4").tobytes() + body)
    _assert_same_cloud(read_pcd(path), cloud)


def test_pcd_binary_compressed_bad_data(tmp_path: Path) -> None:
    path = tmp_path / "c.pcd"
    _compressed_pcd(path, _LZF_FIXTURE[:-20], _LZF_FIXTURE_SIZE, announced=len(_LZF_FIXTURE))
    with pytest.raises(PointCloudFileError, match="truncated PCD data"):
        read_pcd(path)
    _compressed_pcd(path, _LZF_FIXTURE, _LZF_FIXTURE_SIZE + 16)
    with pytest.raises(PointCloudFileError, match="uncompressed size 288 bytes"):
        read_pcd(path)
    _compressed_pcd(path, _LZF_FIXTURE[:-20], _LZF_FIXTURE_SIZE)
    with pytest.raises(PointCloudFileError, match="corrupt PCD compressed data"):
        read_pcd(path)


# --- LZF -----------------------------------------------------------------------------------


def test_lzf_literal_and_overlapping_matches() -> None:
    # literal "ab", match length 3 distance 2 -> "aba", long match (7 + 10 + 2) distance 1.
    stream = bytes([1, 97, 98, 0b001_00000, 1, 0b111_00000, 10, 0])
    assert lzf_decompress(stream, 24) == b"ababa" + b"a" * 19


@pytest.mark.parametrize(
    ("stream", "size", "reason"),
    [
        (bytes([5, 1, 2]), 6, "literal run of 6 bytes"),
        (bytes([0, 1, 0b001_00000, 4]), 4, "refers before the start"),
        (bytes([0, 1, 0b111_00000]), 12, "cut off"),
        (bytes([0, 1, 0b001_00000]), 4, "cut off"),
        (bytes([1, 1, 2]), 3, "decompresses to 2 bytes, expected 3"),
    ],
)
def test_lzf_corrupt_streams(stream: bytes, size: int, reason: str) -> None:
    with pytest.raises(LzfError, match=reason):
        lzf_decompress(stream, size)


# --- bad PCD files -------------------------------------------------------------------------

_GOOD = ("x y z", "4 4 4", "F F F", "1 1 1")


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"VERSION 0.7\nFIELDS x y z\n", "no DATA line"),
        (b"\x89\xff\xfe garbage\n", "non-ASCII bytes"),
        (_pcd_header(*_GOOD, 1, "zip"), "DATA 'zip'"),
        (_pcd_header(*_GOOD, 1, "ascii", version="0.5"), "unsupported PCD version"),
        (_pcd_header("x y", "4 4", "F F", "1 1", 1, "ascii"), "no z field"),
        (_pcd_header("x y z", "4 4 4", "F F I", "1 1 1", 1, "ascii"), "z must be F4 or F8"),
        (_pcd_header("x y z", "4 4 4", "F F F", "1 1 2", 1, "ascii"), "z must be F4 or F8"),
        (_pcd_header("x y z", "4 4", "F F F", "1 1 1", 1, "ascii"), "3 FIELDS but 2 SIZE"),
        (_pcd_header("x y z i", "4 4 4 2", "F F F F", None, 1, "ascii"), "unsupported SIZE 2"),
        (_pcd_header("x y z i", "4 4 4 4", "F F F Q", None, 1, "ascii"), "TYPE 'Q'"),
        (_pcd_header("x y z x", "4 4 4 4", "F F F F", None, 1, "ascii"), "duplicate fields"),
        (_pcd_header(*_GOOD, 4, "ascii").replace(b"POINTS 4", b"POINTS 5"), "POINTS 5 != WIDTH"),
        (_pcd_header(*_GOOD, 4, "ascii").replace(b"WIDTH 4", b"WIDTH -4"), "WIDTH must be"),
        (_pcd_header(*_GOOD, 2, "binary") + b"\0" * 20, "need 24 bytes, the file has 20"),
        (_pcd_header(*_GOOD, 2, "ascii") + b"1 2 3\n4 5\n", "truncated PCD ascii data"),
        (_pcd_header(*_GOOD, 1, "ascii") + b"1 2 3\n4 5 6\n", "corrupt PCD ascii data"),
        (_pcd_header(*_GOOD, 1, "ascii") + b"1 two 3\n", "field y has values that are not F4"),
        (_pcd_header(*_GOOD, 2, "binary_compressed") + b"\0\0", "no compressed-size words"),
    ],
)
def test_bad_pcd_files(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "bad.pcd"
    path.write_bytes(content)
    with pytest.raises(PointCloudFileError, match=reason) as caught:
        load_points(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "\n" not in message


# --- real frames ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(FRAME_POINTS))
def test_real_frames_load_with_their_point_counts(name: str) -> None:
    cloud = load_points(data_file(name))
    assert cloud.xyz.shape == (FRAME_POINTS[name], 3)
    assert cloud.fields["intensity"].shape == (FRAME_POINTS[name],)
    assert cloud.finite_mask().all()
    if name.endswith(".pcd.bin"):
        assert set(np.unique(cloud.fields["ring"])) == set(range(32))


def test_real_frame_survives_pcd_round_trip(tmp_path: Path) -> None:
    cloud = load_points(data_file("nuscenes_lidar_top.pcd.bin"))
    for encoding in ("binary", "ascii"):
        write_pcd(tmp_path / f"{encoding}.pcd", cloud, encoding=encoding)
        _assert_same_cloud(read_pcd(tmp_path / f"{encoding}.pcd"), cloud)
