"""The one measurement harness (dlbench.harness): the loop every runner times with."""

import time

import pytest

from dlbench import harness, nvtx_ranges


class RecordingHook:
    def __init__(self, events):
        self.events = events

    def measure_start(self):
        self.events.append("start")

    def iteration_end(self):
        self.events.append("iteration")

    def measure_end(self):
        self.events.append("end")


@pytest.fixture
def ranges(monkeypatch):
    events = []
    monkeypatch.setattr(nvtx_ranges, "_impl", (lambda name: events.append(("push", name)),
                                               lambda: events.append(("pop",))))
    return events


def test_timed_loop_excludes_warmup_and_splits_data_wait_from_compute(ranges):
    # Two slow warmup steps, far slower than the measured ones, so that the bounds below
    # tell them apart even on a loaded machine.
    durations = iter([0.3, 0.3, 0.01, 0.01, 0.01])

    def fetch():
        time.sleep(0.002)
        return None

    loop = harness.timed_loop(fetch, lambda _: time.sleep(next(durations)), lambda: None, 2, 3)
    assert len(loop.times_s) == 3
    assert all(0.011 <= t < 0.2 for t in loop.times_s)
    assert 0.005 <= loop.data_wait_s < 0.2 and 0.03 <= loop.compute_s < 0.3
    assert loop.data_wait_s + loop.compute_s == pytest.approx(sum(loop.times_s))
    assert ranges[0] == ("push", "warmup") and ("push", "measure") in ranges
    assert ("push", "batch 2") in ranges and ("push", "batch 3") not in ranges
    assert sum(e[0] == "push" for e in ranges) == sum(e[0] == "pop" for e in ranges)


def test_a_loop_marks_only_the_ranges_it_has_work_for(ranges):
    """No empty "warmup" or "measure" range: nsys captures the first "measure" range and
    would stop at an empty one (a language model's warm generations run no measured
    step)."""
    harness.timed_loop(lambda: None, lambda _: None, lambda: None, 0, 2)
    assert ranges[0] == ("push", "measure") and ("push", "warmup") not in ranges
    ranges.clear()
    harness.timed_loop(lambda: None, lambda _: None, lambda: None, 3, 0)
    assert ranges == [("push", "warmup"), ("pop",)]


def test_sync_ends_every_iteration_before_its_clock_stops(ranges):
    """The device's work is inside the iteration's time: sync runs before the clock reads."""
    pending = []

    def step(_):
        pending.append(0.02)  # work the 'device' still has queued

    def sync():
        while pending:
            time.sleep(pending.pop())

    loop = harness.timed_loop(lambda: None, step, sync, 1, 2)
    assert all(t >= 0.02 for t in loop.times_s) and not pending


def test_hooks_see_the_measured_iterations_only(ranges):
    events = []
    counter = iter(range(10))
    harness.timed_loop(lambda: next(counter), lambda i: events.append(f"step {i}"),
                       lambda: None, 2, 3, hooks=[RecordingHook(events)])
    assert events == ["step 0", "step 1", "start", "step 2", "iteration", "step 3",
                      "iteration", "step 4", "iteration", "end"]


def test_hooks_are_ended_when_a_step_fails(ranges):
    events = []
    counter = iter(range(5))

    def step(i):
        if i == 2:
            raise RuntimeError("out of memory")

    with pytest.raises(RuntimeError):
        harness.timed_loop(lambda: next(counter), step, lambda: None, 1, 3,
                           hooks=[RecordingHook(events)])
    assert events == ["start", "iteration", "end"]
    assert sum(e[0] == "push" for e in ranges) == sum(e[0] == "pop" for e in ranges)
