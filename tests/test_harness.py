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


class FakeClock:
    """``time`` for the harness: perf_counter reads a clock each step moves on."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


def settling_step(clock, durations):
    """A step taking ``durations[i]`` on the fake clock in its i-th call, recorded."""
    calls = []

    def step(_):
        clock.now += durations(len(calls))
        calls.append(clock.now)

    return step, calls


def test_a_warm_up_until_steady_goes_on_until_the_times_settle(monkeypatch, ranges):
    """Times that fall from 3 to 1 (a cache filling, clocks rising): a fixed warm-up of 10
    measures the fall (drifting); until steady, warm-up goes on until the last 20
    iterations move less than 5%, and the measured times are steady. The warm-up is
    recorded: iterations, settled, seconds, the last window's drift."""
    import math

    from dlbench import drift

    def durations(i):
        return 1.0 + 2.0 * math.exp(-i / 8)

    clock = FakeClock()
    monkeypatch.setattr(harness, "time", clock)
    step, _ = settling_step(clock, durations)
    fixed = harness.timed_loop(lambda: None, step, lambda: None, 10, 30)
    assert fixed.warmup is None and drift.trend(fixed.times_s).drifting
    step, calls = settling_step(clock, durations)
    loop = harness.timed_loop(lambda: None, step, lambda: None, 10, 30,
                              steady=harness.UntilSteady())
    warmup = loop.warmup
    assert warmup["settled"] and 30 < warmup["iterations"] < 80
    assert abs(warmup["drift"]) < drift.NOTABLE
    assert len(calls) == warmup["iterations"] + 30
    assert warmup["seconds"] == pytest.approx(sum(map(durations, range(warmup["iterations"]))))
    assert not drift.trend(loop.times_s).drifting
    assert max(loop.times_s) / min(loop.times_s) < 1.05
    assert ("push", "warmup") in ranges and ("push", "measure") in ranges
    assert harness.warmup_facts(loop) == {"warmup": warmup}
    assert harness.warmup_facts(fixed) == {}


def test_a_warm_up_that_never_settles_stops_at_its_limits_and_says_so(monkeypatch):
    """Times rising for ever stop the warm-up at STEADY_MAX_ITERATIONS past the cell's
    own, or at STEADY_MAX_S, settled false."""
    clock = FakeClock()
    monkeypatch.setattr(harness, "time", clock)
    monkeypatch.setattr(harness, "STEADY_MAX_ITERATIONS", 50)
    step, calls = settling_step(clock, lambda i: 1.0 + 0.1 * i)
    loop = harness.timed_loop(lambda: None, step, lambda: None, 5, 3,
                              steady=harness.UntilSteady())
    assert loop.warmup["iterations"] == 55 and loop.warmup["settled"] is False
    monkeypatch.setattr(harness, "STEADY_MAX_S", 100.0)
    step, calls = settling_step(clock, lambda i: 1.0 + 0.1 * i)
    loop = harness.timed_loop(lambda: None, step, lambda: None, 5, 3,
                              steady=harness.UntilSteady())
    assert loop.warmup["settled"] is False and 100.0 <= loop.warmup["seconds"] < 105.0
    assert loop.warmup["iterations"] < 55


def test_processes_warm_up_alike_until_every_one_is_done(monkeypatch):
    """A data-parallel cell's processes: warm-up ends when ``agree`` says every one is
    done, asked once per iteration past the window (the same count on every process)."""
    clock = FakeClock()
    monkeypatch.setattr(harness, "time", clock)
    asked = []

    def agree(done):  # another process settles 7 iterations later
        asked.append(done)
        return done and len(asked) > 7

    step, calls = settling_step(clock, lambda i: 1.0)
    loop = harness.timed_loop(lambda: None, step, lambda: None, 0, 2,
                              steady=harness.UntilSteady(agree))
    assert asked == [True] * 8 and loop.warmup["iterations"] == harness.STEADY_WINDOW + 7
    assert harness.until_steady(type("Args", (), {"warmup_until_steady": False})()) is None


def test_input_split_is_the_rank_that_waited_longest_with_every_ranks_wait():
    split = harness.input_split([(0.5, 9.5), (4.0, 6.0), (4.0, 6.1)])
    assert (split.data_wait_s, split.compute_s, split.rank) == (4.0, 6.0, 1)
    assert split.facts() == {"data_wait_rank": 1, "ranks_data_wait_s": [0.5, 4.0, 4.0]}
    with pytest.raises(ValueError, match="no rank's split"):
        harness.input_split([])
