"""tests/timeline.py: the per-worker file spans `make test` prints, against hand-derived values."""

from tests.timeline import Timeline, busy_share


def _timeline() -> Timeline:
    t = Timeline()
    # gw0 runs a.py (one test: setup 100-101, call 101-111, teardown 111-112), then b.py (two calls).
    for when, start, stop in (("setup", 100, 101), ("call", 101, 111), ("teardown", 111, 112)):
        t.add("gw0", "tests/e2e/a.py::test_one", when, start, stop)
    t.add("gw0", "tests/unit/b.py::test_x", "call", 112, 113)
    t.add("gw0", "tests/unit/b.py::test_y[1]", "call", 113, 115)
    # gw1 runs c.py alone, the long one: it ends 35 s after gw0.
    t.add("gw1", "tests/soak/c.py::test_soak", "call", 102, 150)
    return t


def test_a_file_spans_its_first_start_to_its_last_stop_with_its_phases_summed():
    spans = _timeline().workers()
    a, b = spans["gw0"]
    assert (a.path, a.start, a.end, a.busy, a.tests) == ("tests/e2e/a.py", 100, 112, 12, 1)
    assert (b.path, b.start, b.end, b.busy, b.tests) == ("tests/unit/b.py", 112, 115, 3, 2)
    assert [s.path for s in spans["gw1"]] == ["tests/soak/c.py"]


def test_the_summary_names_each_workers_end_and_the_idle_tail():
    lines = _timeline().summary()
    assert lines[0] == "gw0: 2 files, busy 15 s, first test at 0 s, last file ended at 15 s"
    assert lines[1] == "gw1: 1 files, busy 48 s, first test at 2 s, last file ended at 50 s"
    assert lines[2] == "idle tail: the first worker out of files ended 35 s before the last one"
    assert lines[3] == "gw0 ran last: tests/e2e/a.py (0-12 s), tests/unit/b.py (12-15 s)"
    assert _timeline().rows()[0] == "gw0\ttests/e2e/a.py\t0.00\t12.00\t12.00\t1"


def test_nothing_is_printed_without_reports():
    assert Timeline().summary() == []


def test_busy_share_is_the_busy_part_of_the_cpu_time_between_the_samples_in_the_window():
    # Samples (wall, busy, idle): 10 s on 2 cores, 15 busy core-seconds and 5 idle from t=100 to t=110.
    samples = [(90, 0.0, 0.0), (100, 40.0, 10.0), (105, 48.0, 12.0), (110, 55.0, 15.0)]
    assert busy_share(samples, since=100, until=110) == (0.75, 5.0)
    assert busy_share(samples, since=105, until=200) == (7 / 10, 3.0)
    assert busy_share(samples, since=95, until=105) == (8 / 10, 2.0)
    assert busy_share(samples, since=106, until=200) is None  # one sample is no interval


def test_the_summary_and_rows_carry_the_cpu_samples_from_the_first_test_on():
    t = _timeline()
    t.cpu = [(90, 0.0, 0.0), (100, 40.0, 10.0), (150, 120.0, 30.0), (160, 121.0, 49.0)]
    assert t.summary()[-1].endswith("busy 80% of the run (20 core-seconds idle), 80% in its last 60 s")
    assert t.rows()[-1] == "cpu\t\t0.00\t50.00\t80.00\t0"
    # the intervals before the first test's start and after the last test's end (150) are left out
    assert sum(r.startswith("cpu") for r in t.rows()) == 1
