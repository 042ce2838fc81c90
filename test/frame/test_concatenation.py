"""Sweeps grouped as Autoware's ``concatenate_and_time_sync_node`` groups them
(``frame/time_sync.py``'s rules, ``frame/concatenation.py``'s collector).

The sample sensor kit's three LiDARs (``input_topics`` right, top, left; offsets 0, 15 and 16 ms;
noise windows 10 ms; timeout 0.2 s), stamped from the sample bag's first second. Each scenario is
driven by the injected clock alone: the advanced and naive matches and their edges, a timeout
with a sensor missing, a sweep arriving after its group was published (on its own, published or
dropped as Autoware does), a sensor's second sweep in one group, stamps and a clock going
backwards, the pool of three open groups, a replay restarting, an empty group. The join order is
checked against what GCC 12's libstdc++ ``unordered_map`` gave for the same topics.
"""

from __future__ import annotations

from itertools import permutations

import pytest

from gpu_euclidean_cluster.core.config import ConfigError
from gpu_euclidean_cluster.frame.concatenation import (
    CLOCK_BACKWARDS,
    COLLECTOR_DROPPED,
    DROPPED_LATE,
    DUPLICATE,
    ERROR,
    LATE,
    OK,
    OUT_OF_ORDER,
    SweepCollector,
)
from gpu_euclidean_cluster.frame.time_sync import (
    ConcatenationSettings,
    autoware_join_order,
    format_stamp,
    libstdcxx_hash,
    motion_compensation_notice,
)

from ..conftest import LIDAR_DATA_DIR

RIGHT, TOP, LEFT = (
    f"/sensing/lidar/{name}/pointcloud_before_sync" for name in ("right", "top", "left")
)
KIT = ConcatenationSettings(
    (RIGHT, TOP, LEFT), offsets_ns=(0, 15_000_000, 16_000_000), noise_windows_ns=(10_000_000,) * 3
)
NAIVE = ConcatenationSettings((RIGHT, TOP, LEFT), strategy="naive")
MS = 1_000_000
T0 = 1_614_315_746_338_000_000  # the sample bag's first stamp
A = T0 + 30 * MS  # when the first sweep arrives


def kinds(out) -> list[tuple[str, tuple[str, ...]]]:
    return [(event.kind, event.sensors) for event in out.events]


def test_advanced_groups_offset_stamps_and_publishes_when_all_arrived():
    collector = SweepCollector(KIT)
    assert collector.add(RIGHT, T0, A, "r").groups == ()
    assert collector.add(TOP, T0 + 17 * MS, A + 5 * MS, "t").groups == ()
    out = collector.add(LEFT, T0 + 13 * MS, A + 9 * MS, "l")
    (group,) = out.groups
    assert (group.trigger, group.outcome, group.missing) == ("complete", "published", ())
    assert group.stamp_ns == T0  # the oldest stamp
    assert group.stamps == {RIGHT: T0, TOP: T0 + 17 * MS, LEFT: T0 + 13 * MS}
    assert [sweep.payload for sweep in group.sweeps] == ["l", "t", "r"]  # reverse arrival
    level, message, values = group.diagnostic()
    assert (level, message) == (OK, "OK")  # Autoware's diagnostics interface says OK as "OK"
    assert values[:3] == (
        ("Concatenated pointcloud timestamp", "1614315746.338000000"),
        ("Minimum reference timestamp", "1614315746.328000000"),
        ("Maximum reference timestamp", "1614315746.348000000"),
    )
    assert ("Concatenated: " + LEFT, "True") in values
    assert values[-1] == ("Pointcloud concatenation succeeded", "True")
    assert collector.open_groups == 0 and out.events == ()


@pytest.mark.parametrize(
    ("top_time", "joins"),
    [(20 * MS - 1, True), (20 * MS, False), (-20 * MS + 1, True), (-20 * MS, False)],
)
def test_the_noise_windows_add_up_and_their_edges_are_open(top_time, joins):
    # the right sweep opens [T0 - 10 ms, T0 + 10 ms]; top's own 10 ms widens it to 20 ms
    collector = SweepCollector(KIT)
    collector.add(RIGHT, T0, A, "r")
    collector.add(TOP, T0 + 15 * MS + top_time, A + MS, "t")
    assert collector.open_groups == (1 if joins else 2)


def test_a_timeout_publishes_the_sweeps_that_arrived():
    collector = SweepCollector(KIT)
    collector.add(RIGHT, T0, A, "r")
    collector.add(TOP, T0 + 15 * MS, A + 5 * MS, "t")
    assert collector.next_deadline_ns() == A + 200 * MS
    assert collector.poll(A + 200 * MS - 1).groups == ()
    (group,) = collector.poll(A + 200 * MS).groups
    assert (group.trigger, group.outcome, group.missing) == ("timeout", "published", (LEFT,))
    level, message, values = group.diagnostic()
    assert (level, message) == (
        ERROR,
        "Concatenated pointcloud is published but misses some topics",
    )
    assert ("Concatenated: " + LEFT, "False") in values
    assert not any(key == "Timestamp: " + LEFT for key, _ in values)
    assert collector.next_deadline_ns() is None


def test_a_late_sweep_is_reported_and_grouped_alone_as_autoware_does():
    collector = SweepCollector(KIT)
    collector.add(RIGHT, T0, A, "r")
    collector.add(TOP, T0 + 15 * MS, A + 5 * MS, "t")
    collector.poll(A + 200 * MS)
    out = collector.add(LEFT, T0 + 17 * MS, A + 250 * MS, "l")
    assert kinds(out) == [(LATE, (LEFT,))] and LEFT in out.events[0].message
    (alone,) = collector.poll(A + 450 * MS).groups
    # stamped after the published group: Autoware publishes it, a cloud of one LiDAR
    assert (alone.present, alone.outcome) == ((LEFT,), "published")


def test_a_late_sweep_stamped_before_the_published_group_is_dropped():
    collector = SweepCollector(KIT)
    collector.add(TOP, T0 + 15 * MS, A, "t")
    collector.add(LEFT, T0 + 16 * MS, A + 5 * MS, "l")
    (group,) = collector.poll(A + 200 * MS).groups
    assert group.stamp_ns == T0 + 15 * MS
    assert kinds(collector.add(RIGHT, T0, A + 230 * MS, "r")) == [(LATE, (RIGHT,))]
    out = collector.poll(A + 430 * MS)
    (alone,) = out.groups
    assert alone.outcome == "dropped_late" and kinds(out) == [(DROPPED_LATE, (RIGHT,))]
    level, message, _ = alone.diagnostic()
    assert level == ERROR and message.startswith(
        "Concatenated pointcloud was dropped due to missing topics and its timestamp"
    )


def test_a_second_sweep_of_a_sensor_in_one_window_replaces_the_first():
    collector = SweepCollector(KIT)
    collector.add(RIGHT, T0, A, "first")
    out = collector.add(RIGHT, T0 + MS, A + MS, "second")
    assert kinds(out) == [(DUPLICATE, (RIGHT,))]
    collector.add(TOP, T0 + 15 * MS, A + 2 * MS, "t")
    (group,) = collector.add(LEFT, T0 + 16 * MS, A + 3 * MS, "l").groups
    assert group.stamps[RIGHT] == T0 + MS
    assert [sweep.payload for sweep in group.sweeps] == ["l", "t", "second"]


def test_naive_matches_the_closest_arrival_among_groups_missing_the_sensor():
    collector = SweepCollector(NAIVE)
    collector.add(RIGHT, T0, A, "r1")
    out = collector.add(RIGHT, T0 + 100 * MS, A + 50 * MS, "r2")  # holds right: a new group
    assert out.events == () and collector.open_groups == 2
    collector.add(TOP, T0, A + 60 * MS, "t")  # 10 ms from r2's group, 60 from r1's
    (group,) = collector.add(LEFT, T0, A + 70 * MS, "l").groups
    assert [sweep.payload for sweep in group.sweeps] == ["l", "t", "r2"]
    (first,) = collector.poll(A + 200 * MS).groups
    assert first.present == (RIGHT,)
    assert ("First pointcloud arrival timestamp", format_stamp(A)) in first.diagnostic()[2]


def test_a_clock_going_back_keeps_the_remaining_time():
    collector = SweepCollector(KIT)
    collector.add(RIGHT, T0, A, "r")
    out = collector.poll(A - 100 * MS)
    assert kinds(out) == [(CLOCK_BACKWARDS, ())] and "100.000 ms" in out.events[0].message
    assert collector.next_deadline_ns() == A + 100 * MS
    assert collector.poll(A + 100 * MS - 1).groups == ()
    assert len(collector.poll(A + 100 * MS).groups) == 1
    out = collector.add(TOP, T0 + 15 * MS, A, "t")
    assert kinds(out) == [(CLOCK_BACKWARDS, (TOP,))]


def test_a_stamp_that_does_not_advance_is_reported():
    collector = SweepCollector(KIT)
    collector.add(RIGHT, T0, A, "r")
    out = collector.add(RIGHT, T0 - 100 * MS, A + MS, "older")
    assert kinds(out) == [(OUT_OF_ORDER, (RIGHT,))]
    assert "1614315746.238000000" in out.events[0].message


def test_at_most_three_groups_are_open_and_the_oldest_is_discarded():
    collector = SweepCollector(KIT)
    for k in range(3):
        collector.add(RIGHT, T0 + 100 * MS * k, A + k, f"r{k}")
    out = collector.add(TOP, T0 + 315 * MS, A + 3, "t")
    assert kinds(out) == [(COLLECTOR_DROPPED, (RIGHT,))]
    assert collector.open_groups == 3
    groups = collector.flush(A + 10).groups
    assert [g.trigger for g in groups] == ["flush"] * 3
    assert [g.sweeps[0].payload for g in groups] == ["r1", "r2", "t"]


@pytest.mark.parametrize(
    ("late_allowed", "expected"), [(False, "dropped_late"), (True, "published")]
)
def test_older_groups_are_dropped_unless_a_replay_restarted(late_allowed, expected):
    settings = ConcatenationSettings(KIT.sensors, "naive", publish_previous_but_late=late_allowed)
    collector = SweepCollector(settings)

    def complete(stamp: int, now: int) -> str:
        for k, sensor in enumerate(settings.sensors):
            out = collector.add(sensor, stamp, now + k, sensor)
        return out.groups[0].outcome

    assert complete(T0, A) == "published"
    assert complete(T0 - 30_000 * MS, A + 10 * MS) == "published"  # 30 s back: a replay loop
    assert complete(T0 - 35_000 * MS, A + 20 * MS) == expected  # 5 s older than the last one


def test_an_empty_group_is_published_with_an_error_status():
    """Autoware 2025+ publishes an empty cloud when every source is empty; its status is an
    error ("Concatenated pointcloud is empty"), and a later group stamped before it is late."""
    collector = SweepCollector(NAIVE, point_count=len)
    for k, sensor in enumerate(NAIVE.sensors):
        out = collector.add(sensor, T0 + 10 * MS, A + k, [])
    (group,) = out.groups
    assert group.outcome == "published" and group.empty
    assert group.diagnostic()[:2] == (ERROR, "Concatenated pointcloud is empty")
    for k, sensor in enumerate(NAIVE.sensors):
        out = collector.add(sensor, T0 + 5 * MS, A + 10 + k, [1])
    assert out.groups[0].outcome == "dropped_late" and not out.groups[0].empty


def test_the_run_time_keys_follow_autowares_order():
    collector = SweepCollector(NAIVE, point_count=len)
    for k, sensor in enumerate(NAIVE.sensors[:-1]):
        collector.add(sensor, T0 + k * MS, A + k, [1])
    (group,) = collector.flush(A + 5 * MS).groups
    _, _, values = group.diagnostic(processing_ms=0.25, now_ns=T0 + 30 * MS)
    keys = [key for key, _ in values]
    first, second = NAIVE.sensors[0], NAIVE.sensors[1]
    assert keys[:4] == [
        "Concatenated pointcloud timestamp",
        "First pointcloud arrival timestamp",
        "Processing time (ms)",
        "Pipeline latency (ms)",
    ]
    assert keys[4:7] == [f"Concatenated: {first}", f"Timestamp: {first}", f"Latency (ms): {first}"]
    assert f"Latency (ms): {second}" in keys and keys[-1] == "Pointcloud concatenation succeeded"
    assert dict(values)["Pipeline latency (ms)"] == f"{30.0:.9f}"  # the oldest sweep's
    assert dict(values)["Processing time (ms)"] == f"{0.25:.9f}"


def test_bad_input_is_refused_in_one_line():
    collector = SweepCollector(KIT)
    with pytest.raises(ValueError, match="unknown sensor 'rear'"):
        collector.add("rear", T0, A, None)
    with pytest.raises(ValueError, match="stamp_ns must be an integer"):
        collector.add(RIGHT, 1.5, A, None)


def test_settings_read_from_the_sample_kit_and_validated():
    yaml = pytest.importorskip("yaml")
    path = LIDAR_DATA_DIR / "sample_sensor_kit" / "concatenate_and_time_sync_node.param.yaml"
    if not path.exists():
        pytest.skip(f"{path} not found")
    parameters = yaml.safe_load(path.read_text())["/**"]["ros__parameters"]
    assert ConcatenationSettings.from_autoware_parameters(parameters) == KIT
    dotted = {"input_topics": [RIGHT, TOP], "matching_strategy.type": "naive", "timeout_sec": 0.1}
    assert ConcatenationSettings.from_autoware_parameters(dotted).timeout_ns == 100 * MS
    bad = {
        "sensors must be 2": {"sensors": (RIGHT,)},
        "distinct": {"sensors": (RIGHT, RIGHT)},
        "offsets_ns must hold one": {"offsets_ns": (0,)},
        "noise windows must be >= 0": {"noise_windows_ns": (0, -1, 0)},
        "strategy must be one of": {"strategy": "exact"},
        "timeout_ns must be an integer >= 1": {"timeout_ns": 0},
    }
    for problem, change in bad.items():
        fields = {"sensors": KIT.sensors, "offsets_ns": KIT.offsets_ns}
        fields["noise_windows_ns"] = KIT.noise_windows_ns
        with pytest.raises(ConfigError, match=problem):
            ConcatenationSettings(**{**fields, **change})


def test_the_join_order_is_libstdcxx_unordered_maps():
    # values printed by g++ 12 (std::hash<std::string>, std::unordered_map iteration)
    assert libstdcxx_hash(RIGHT) == 627780479303588984
    assert libstdcxx_hash("a") == 4993892634952068459
    assert libstdcxx_hash("abcdefgh") == 8664279048047335611
    assert libstdcxx_hash("abcdefghi") == 13036955925923793583
    for arrived in permutations((RIGHT, TOP, LEFT)):
        assert autoware_join_order(arrived) == arrived[::-1]
    rear = "/sensing/lidar/rear/pointcloud_before_sync"  # right's bucket of 13
    assert autoware_join_order((RIGHT, TOP, rear)) == (TOP, rear, RIGHT)
    names = ("top", "left", "right", "rear", "front", "front_left", "front_right", "rear_left")
    names += ("rear_right", "side_left", "side_right", "roof", "bumper", "tail", "mirror")  # 15
    topics = tuple(f"/sensing/lidar/{name}/pointcloud_before_sync" for name in names)
    joined = [topic.split("/")[3] for topic in autoware_join_order(topics)]
    assert joined == [
        *("mirror", "tail", "top", "right", "rear", "left", "front", "front_left", "roof"),
        *("front_right", "rear_left", "rear_right", "side_right", "side_left", "bumper"),
    ]


def test_motion_compensation_without_a_twist_is_said():
    notice = motion_compensation_notice(KIT, twist_available=False)
    assert notice is not None and "without motion compensation" in notice
    assert motion_compensation_notice(KIT, twist_available=True) is None
    uncompensated = ConcatenationSettings(KIT.sensors, "naive", is_motion_compensated=False)
    assert motion_compensation_notice(uncompensated, twist_available=False) is None
    assert format_stamp(-1) == "-0.000000001"
