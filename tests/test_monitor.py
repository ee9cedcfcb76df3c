"""The resource monitor: real psutil sampling of this process tree, RAPL counters from a
powercap tree, NVML through a test double (no NVIDIA driver here), and the runner's record."""

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from dlbench import aggregate, monitor
from dlbench import result as R


def busy(seconds):
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


def test_the_mean_cpu_weighs_each_reading_by_the_interval_it_covers():
    """A 5 ms interval that caught one 10 ms tick reads 200 %; beside 50 ms at 100 % it
    is a twelfth of the time, not half of the readings (the first reading, without an
    interval behind it, left out)."""
    t = [0.0, 0.050, 0.055, 0.060]
    cpu = [999.0, 100.0, 200.0, None]
    assert monitor._interval_mean(t, cpu) == pytest.approx((100 * 0.05 + 200 * 0.005) / 0.055)
    assert monitor._interval_mean([0.0], [50.0]) is None


def test_samples_rss_and_cpu_of_the_process_and_its_children():
    """A child holding 120 MB must show in the peak RSS; a busy loop in the CPU figures."""
    hold = "import sys, time; x = bytearray(120 * 2**20); sys.stdout.write('up\\n'); " \
           "sys.stdout.flush(); time.sleep(30)"
    mon = monitor.ResourceMonitor(20)
    own_rss = psutil.Process().memory_info().rss
    child = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "up\n"
        with mon:
            busy(1.2)  # the child list is refreshed every second: it is seen from the start
    finally:
        child.kill()
        child.wait()
    s = mon.summary(items=10)
    assert s["enabled"] and s["sample_count"] >= 10
    assert s["duration_s"] == pytest.approx(1.2, abs=0.3)
    host = s["host"]
    assert host["processes_max"] >= 2
    assert own_rss + 100 * 2**20 <= host["rss_peak_bytes"] <= psutil.virtual_memory().total
    assert s["peak_host_rss_bytes"] == host["rss_peak_bytes"]
    assert 5 < host["cpu_percent_mean"] <= 100 * psutil.cpu_count() + 20
    assert host["cpu_percent_max"] >= host["cpu_percent_mean"]
    assert s["sampler_cpu_ms_mean"] >= 0 and 0 <= s["sampler_cpu_fraction"] < 1
    series = mon.series()
    assert len(series["t_s"]) == s["sample_count"] == len(series["host_rss_bytes"])
    assert series["t_s"] == sorted(series["t_s"])


def test_energy_on_this_host_is_measured_or_marked_not_available():
    """Never a zero: positive joules where RAPL is readable, else null with the reason."""
    mon = monitor.ResourceMonitor(20)
    with mon:
        busy(0.3)
    s = mon.summary(items=64)
    if monitor.Rapl():
        assert s["energy_j"] > 0 and s["samples_per_joule"] == pytest.approx(64 / s["energy_j"])
        assert "host:rapl" in s["energy_sources"]
    else:
        assert s["energy_j"] is None and s["samples_per_joule"] is None
        assert s["energy_note"] == ("not available on this host: no GPU sampled (CPU cell) "
                                    "and no readable RAPL counters")
        assert s["power_mean_w"] is None and s["power_max_w"] is None


GPU_ENERGY_MISSING = ("not available on this host: no NVML GPU (the host's RAPL energy "
                      "alone would leave the GPUs out)")


def test_a_gpu_cell_without_its_gpus_energy_has_none_even_with_rapl(tmp_path):
    """The host's RAPL joules alone are no GPU cell's energy: its samples per joule would
    be several times too high (a powercap tree in sysfs's layout; no NVML here)."""
    powercap_tree(tmp_path, {"intel-rapl:0": ("package-0", 1_000_000, 2**32)})
    mon = monitor.ResourceMonitor(20, gpus=[0], powercap_root=tmp_path)
    assert mon.rapl
    with mon:
        busy(0.1)
        set_energy(tmp_path, "intel-rapl:0", 31_000_000)  # 30 J of the host's
    s = mon.summary(items=64)
    assert (s["energy_j"], s["samples_per_joule"], s["power_mean_w"]) == (None, None, None)
    assert s["energy_note"] == GPU_ENERGY_MISSING
    assert any(n.startswith("GPUs: NVML unavailable") for n in s["notes"])


def test_cpu_cell_without_counters_says_why():
    if monitor.Rapl():
        pytest.skip("this host has readable RAPL counters")
    mon = monitor.ResourceMonitor(20)
    with mon:
        busy(0.1)
    assert mon.summary(items=1)["energy_note"] == (
        "not available on this host: no GPU sampled (CPU cell) and no readable RAPL counters")


def powercap_tree(root, zones):
    """A powercap folder in the sysfs layout: <zone>/{name,energy_uj,max_energy_range_uj}."""
    for zone, (name, energy, wrap) in zones.items():
        folder = root / zone
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "name").write_text(f"{name}\n")
        (folder / "max_energy_range_uj").write_text(f"{wrap}\n")
        if energy is not None:
            (folder / "energy_uj").write_text(f"{energy}\n")
    return root


def set_energy(root, zone, value):
    """Replace the counter whole, as sysfs does: a reader never sees a half-written file."""
    tmp = root / zone / "energy_uj.tmp"
    tmp.write_text(f"{value}\n")
    os.replace(tmp, root / zone / "energy_uj")


def test_rapl_sums_packages_and_dram_and_handles_wraparound(tmp_path):
    root = powercap_tree(tmp_path, {
        "intel-rapl:0": ("package-0", 262_000_000_000 - 2_000_000, 262_000_000_000),
        "intel-rapl:0:0": ("core", 5_000_000, 262_000_000_000),  # inside the package
        "intel-rapl:0:1": ("dram", 1_000_000, 65_000_000_000),
        "intel-rapl:1": ("psys", 7_000_000, 262_000_000_000),  # overlaps the packages
        "intel-rapl:2": ("package-1", None, 262_000_000_000),  # energy_uj unreadable
    })
    rapl = monitor.Rapl(root)
    assert [name for name, _, _ in rapl.zones] == ["intel-rapl:0/package-0",
                                                   "intel-rapl:0:1/dram"]
    rapl.reset()
    set_energy(root, "intel-rapl:0", 3_000_000)  # wrapped: 2 J to the top, then 3 J
    set_energy(root, "intel-rapl:0:1", 1_500_000)
    set_energy(root, "intel-rapl:0:0", 99_000_000)
    assert rapl.update() == pytest.approx(5.0 + 0.5)
    set_energy(root, "intel-rapl:0", 4_000_000)
    assert rapl.update() == pytest.approx(6.5)


def test_host_energy_power_and_samples_per_joule_from_rapl(tmp_path):
    root = powercap_tree(tmp_path, {"intel-rapl:0": ("package-0", 10_000_000, 2**40),
                                    "intel-rapl:0:0": ("dram", 5_000_000, 2**40)})
    mon = monitor.ResourceMonitor(10, powercap_root=root)
    mon.start()
    time.sleep(0.1)
    set_energy(root, "intel-rapl:0", 40_000_000)  # +30 J during the phase
    time.sleep(0.1)
    mon.stop()
    s = mon.summary(items=600)
    assert s["energy_j"] == pytest.approx(30.0)
    assert s["energy_sources"] == ["host:rapl"] and s["energy_note"] is None
    assert s["samples_per_joule"] == pytest.approx(20.0)
    assert s["power_mean_w"] == pytest.approx(30.0 / s["duration_s"])
    assert s["power_max_w"] >= s["power_mean_w"]
    assert s["host"]["energy_j"] == pytest.approx(30.0)
    assert mon.series()["host_energy_j"][-1] == pytest.approx(30.0)


def test_a_failed_reading_leaves_a_gap_and_sampling_goes_on(tmp_path):
    """A counter that cannot be read for a while (here: an empty file) gives None samples
    and one note; the thread keeps sampling, columns stay aligned and no energy is lost."""
    root = powercap_tree(tmp_path, {"intel-rapl:0": ("package-0", 10_000_000, 2**40)})
    mon = monitor.ResourceMonitor(10, powercap_root=root)
    mon.start()
    set_energy(root, "intel-rapl:0", "")
    deadline = time.monotonic() + 10
    while not mon.notes and time.monotonic() < deadline:
        time.sleep(0.01)
    set_energy(root, "intel-rapl:0", 40_000_000)
    time.sleep(0.05)
    mon.stop()
    series = mon.series()
    assert len({len(values) for values in series.values()}) == 1
    assert None in series["host_energy_j"] and series["host_energy_j"][-1] == pytest.approx(30)
    assert [n.split(" (")[0] for n in mon.notes] == ["host energy: a reading failed"]
    s = mon.summary(items=300)
    assert s["energy_j"] == pytest.approx(30.0) and s["samples_per_joule"] == pytest.approx(10)
    assert s["power_max_w"] > 0


def test_a_failed_last_rapl_reading_keeps_the_host_energy_up_to_the_last_good_one(tmp_path):
    """The phase's last readings of the host's counters fail (the stop()'s too): the host's
    energy up to the last good reading stands, and its power over that time; the cell has
    no energy figure (it would be part of the phase's) and the note says what is left
    out. Before, the host's energy was lost altogether."""
    root = powercap_tree(tmp_path, {"intel-rapl:0": ("package-0", 10_000_000, 2**40)})
    mon = monitor.ResourceMonitor(10, powercap_root=root)
    mon.start()
    set_energy(root, "intel-rapl:0", 40_000_000)  # +30 J

    def wait_for(last: object) -> None:
        deadline = time.monotonic() + 10
        while (mon.series().get("host_energy_j") or [0])[-1] != last:
            assert time.monotonic() < deadline, f"no sample read {last}"
            time.sleep(0.01)

    wait_for(pytest.approx(30.0))
    set_energy(root, "intel-rapl:0", "")  # unreadable from here to the phase's end
    wait_for(None)
    mon.stop()
    s = mon.summary(items=300)
    series = mon.series()
    assert series["host_energy_j"][-1] is None
    last = max(k for k, v in enumerate(series["host_energy_j"]) if v is not None)
    assert s["host"]["energy_j"] == pytest.approx(30.0)
    assert s["power_mean_w"] == pytest.approx(30.0 / series["t_s"][last])
    assert s["energy_j"] is None and s["samples_per_joule"] is None
    assert s["energy_sources"] == ["host:rapl-package"]  # a package zone alone
    assert s["energy_note"].startswith("partial: ") and "RAPL counters unread at the " \
        "phase's end" in s["energy_note"]


def test_a_host_without_a_dram_zone_counts_its_packages_and_says_so(tmp_path):
    """Many AMD hosts have package zones and no DRAM zone: the source says so
    (host:rapl-package, not host:rapl, which dlbench compare would take for the same
    sources as a host counting its memory too) and the note names what is left out."""
    root = powercap_tree(tmp_path, {"intel-rapl:0": ("package-0", 10_000_000, 2**40)})
    mon = monitor.ResourceMonitor(10, powercap_root=root)
    mon.start()
    time.sleep(0.05)
    set_energy(root, "intel-rapl:0", 40_000_000)  # +30 J
    time.sleep(0.05)
    mon.stop()
    s = mon.summary(items=600)
    assert s["energy_j"] == pytest.approx(30.0) and s["samples_per_joule"] == pytest.approx(20)
    assert s["energy_sources"] == ["host:rapl-package"]
    assert s["energy_note"] == ("partial: no DRAM RAPL zone (the memory's energy is not "
                                "counted)")


def test_rapl_read_at_the_phases_start_alone_counts_nothing(tmp_path):
    """The counters fail from the first sample after the start to the end: the one good
    reading covers no time, so the host is no source and there is no energy (never a
    zero)."""
    root = powercap_tree(tmp_path, {"intel-rapl:0": ("package-0", 10_000_000, 2**40)})
    mon = monitor.ResourceMonitor(10, powercap_root=root)
    mon.start()
    set_energy(root, "intel-rapl:0", "")
    deadline = time.monotonic() + 10
    while len(mon.series().get("t_s", [])) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    mon.stop()
    s = mon.summary(items=300)
    assert mon.series()["host_energy_j"][0] is not None
    assert s["energy_j"] is None and s["energy_sources"] == []
    assert s["power_mean_w"] is None


def test_rapl_unreadable_at_the_start_is_a_note_not_a_failed_cell(tmp_path):
    """Counters readable when the monitor was made but not when the phase starts: the host's
    energy is not counted and a note says why; the measurement goes on."""
    root = powercap_tree(tmp_path, {"intel-rapl:0": ("package-0", 10_000_000, 2**40)})
    mon = monitor.ResourceMonitor(10, powercap_root=root)
    set_energy(root, "intel-rapl:0", "")
    mon.start()
    mon.stop()
    s = mon.summary(items=300)
    assert s["energy_j"] is None and "no readable RAPL counters" in s["energy_note"]
    assert any(n.startswith("host energy: its counters could not be read at the start")
               for n in s["notes"])


# NVML's return codes (nvml.h's nvmlReturn_t), as pynvml names them
NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND, TIMEOUT, GPU_IS_LOST, UNKNOWN = 3, 4, 6, 10, 15, 999


class FakeNvmlError(Exception):
    """pynvml's NVMLError: ``value`` is NVML's return code, the text its description."""

    TEXT = {NOT_SUPPORTED: "Not Supported", NO_PERMISSION: "Insufficient Permissions",
            NOT_FOUND: "Not Found", TIMEOUT: "Timeout", GPU_IS_LOST: "GPU is lost",
            UNKNOWN: "Unknown Error"}

    def __init__(self, value):
        super().__init__(self.TEXT[value])
        self.value = value


class FakeNvml:
    """Test double of the pynvml module (no NVIDIA driver on this machine): two GPUs, one
    with NVML's energy counter, one without (its energy must come from power samples)."""

    NVMLError = FakeNvmlError
    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0
    NVML_ERROR_NOT_SUPPORTED = NOT_SUPPORTED
    NVML_ERROR_NO_PERMISSION = NO_PERMISSION
    NVML_ERROR_FUNCTION_NOT_FOUND = 13

    WATTS = 600.0  # what GPU 0's energy counter draws; its power reading lags at 200 W

    def __init__(self):
        self.calls = {}
        self.born = time.perf_counter()

    def _count(self, name):
        self.calls[name] = self.calls.get(name, 0) + 1

    def nvmlInit(self):
        self._count("init")

    def nvmlShutdown(self):
        self._count("shutdown")

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid != "GPU-1111":
            raise FakeNvmlError(NOT_FOUND)
        return 1

    def nvmlDeviceGetName(self, h):
        return b"Fake H200"

    def nvmlDeviceGetIndex(self, h):
        return h

    def nvmlDeviceGetPowerUsage(self, h):
        return 200_000 if h == 0 else 300_000  # mW

    def nvmlDeviceGetUtilizationRates(self, h):
        self._count(f"util{h}")
        if h == 1:
            raise FakeNvmlError(NOT_SUPPORTED)
        return type("Utilization", (), {"gpu": 87, "memory": 40})()

    def nvmlDeviceGetMemoryInfo(self, h):
        return type("Memory", (), {"used": (h + 1) * 2**30, "total": 141 * 2**30})()

    def nvmlDeviceGetClockInfo(self, h, clock):
        assert clock == self.NVML_CLOCK_SM
        return 1980

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 55

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if h == 1:
            raise FakeNvmlError(NOT_SUPPORTED)
        return int(1_000_000 + self.WATTS * (time.perf_counter() - self.born) * 1000)  # mJ


def sampled(nvml, seconds, items):
    """A monitor of the test double's two GPUs every 10 ms for ``seconds``, and its
    summary."""
    mon = monitor.ResourceMonitor(10, gpus=[0, "GPU-1111"], nvml=nvml,
                                  powercap_root=Path("/nonexistent"))
    with mon:
        time.sleep(seconds)
    return mon, mon.summary(items=items)


def test_gpu_energy_from_the_nvml_counter_else_integrated_power_with_an_nvml_test_double():
    """NVML is a test double here: checks how readings become the summary, not NVML."""
    nvml = FakeNvml()
    mon, s = sampled(nvml, 0.25, 1000)
    gpu0, gpu1 = s["gpus"]
    assert gpu0["energy_method"] == "nvml_total_energy"
    assert gpu0["energy_j"] == pytest.approx(600 * s["duration_s"], rel=0.05)
    assert gpu1["energy_method"] == "integrated_power"
    t = mon.series()["t_s"]  # integrated over the samples' span, which is the phase's
    assert gpu1["energy_j"] == pytest.approx(300 * (t[-1] - t[0]))
    assert gpu1["energy_j"] == pytest.approx(300 * s["duration_s"], rel=0.25)
    # GPU 0's mean and peak from its counter, not from its lagging 200 W reading (as
    # NVML's one-second average is on an H100: its peak came out below the mean there)
    assert gpu0["power_mean_w"] == pytest.approx(600, rel=0.05)
    assert gpu0["power_max_w"] == pytest.approx(600, rel=0.05)
    assert set(mon.series()["gpu0_power_w"]) == {200}  # the reading stays in the series
    assert gpu1["power_mean_w"] == pytest.approx(300) and gpu1["power_max_w"] == pytest.approx(300)
    assert gpu0["utilization_mean_percent"] == pytest.approx(87)
    assert gpu1["utilization_mean_percent"] is None
    assert nvml.calls["util1"] == 1  # an unsupported reading is not asked for again
    assert gpu0["memory_used_peak_bytes"] == 2**30 and s["peak_device_memory_bytes"] == 2**31
    assert gpu0["sm_clock_mean_mhz"] == 1980 and gpu1["temperature_max_c"] == 55
    assert s["energy_j"] == pytest.approx(gpu0["energy_j"] + gpu1["energy_j"])
    assert s["energy_sources"] == ["gpu:integrated_power", "gpu:nvml_total_energy"]
    assert s["energy_note"] == "partial: no readable RAPL counters"
    assert s["samples_per_joule"] == pytest.approx(1000 / s["energy_j"])
    assert s["power_max_w"] == pytest.approx(900, rel=0.05)
    mon.close()
    assert nvml.calls["shutdown"] == 1


class ThrottledNvml(FakeNvml):
    """GPU 0 at its power cap every other sample (and once too hot too), with its power
    limit and clocks; GPU 1 (a MIG-like handle) reports neither reasons nor settings."""

    def __init__(self):
        super().__init__()
        self.reads = 0

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        if h == 1:
            raise FakeNvmlError(NOT_SUPPORTED)
        self.reads += 1
        if self.reads == 3:
            return 0x4 | 0x40  # power cap and hardware thermal slowdown at once
        return 0x4 if self.reads % 2 else 0x1  # power cap, else idle

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        if h == 1:
            raise FakeNvmlError(NOT_SUPPORTED)
        return 500_000  # mW: a 700 W board capped at 500 W

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return 700_000

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        return 1980

    def nvmlDeviceGetEccMode(self, h):
        return (1, 1)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 5


def test_clocks_held_back_and_the_settings_a_gpu_ran_under_with_an_nvml_test_double():
    """NVML is a test double: how clock event reasons and settings become the summary."""
    mon, s = sampled(ThrottledNvml(), 0.2, 10)
    gpu0, gpu1 = s["gpus"]
    masks = [int(m) for m in mon.series()["gpu0_clock_reasons"]]
    capped = sum(bool(m & 0x4) for m in masks) / len(masks)
    assert gpu0["clocks"]["samples"] == len(masks) >= 3
    assert gpu0["clocks"]["held_back"] == pytest.approx(capped)
    assert gpu0["clocks"]["reasons"]["power_cap"] == pytest.approx(capped)
    assert gpu0["clocks"]["reasons"]["thermal"] == pytest.approx(1 / len(masks))
    assert gpu0["clocks"]["reasons"]["idle"] == pytest.approx(1 - capped)
    assert gpu0["clocks"]["text"] == (f"power cap {capped:.0%}, thermal {1 / len(masks):.0%}")
    assert gpu0["settings"]["power_limit_w"] == 500.0
    assert gpu0["settings"]["default_power_limit_w"] == 700.0
    assert gpu0["settings"]["sm_clock_max_mhz"] == 1980 and gpu0["settings"]["ecc"] is True
    assert gpu0["settings"]["pcie_generation"] == 5
    assert gpu0["settings"]["persistence_mode"] is None  # not given: unknown, not False
    assert gpu1["clocks"] == {"samples": 0, "held_back": None, "reasons": {}, "text": None}
    assert gpu1["settings"]["power_limit_w"] is None
    assert s["gpu_power_limit_w"] == 500.0
    assert s["gpu_clocks_held_back"] == pytest.approx(capped)
    assert s["gpu_clock_reasons"] == gpu0["clocks"]["text"]
    mon.close()


class FailingNvml(FakeNvml):
    """FakeNvml whose readings fail as ``failing`` says: {(reading, GPU): a function of the
    call's number (1 = the first) giving the exception to raise, or None}. ``calls_of``
    counts each reading's calls per GPU."""

    def __init__(self, failing):
        super().__init__()
        self.failing = failing
        self.calls_of = {}

    def _reading(self, name, h, read):
        n = self.calls_of[(name, h)] = self.calls_of.get((name, h), 0) + 1
        error = self.failing.get((name, h), lambda n: None)(n)
        if error is not None:
            raise error
        return read()

    def nvmlDeviceGetPowerUsage(self, h):
        return self._reading("power", h, lambda: super(FailingNvml, self).nvmlDeviceGetPowerUsage(h))

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return self._reading("energy", h, lambda: super(
            FailingNvml, self).nvmlDeviceGetTotalEnergyConsumption(h))

    def nvmlDeviceGetUtilizationRates(self, h):
        return self._reading("utilization", h, lambda: super(
            FailingNvml, self).nvmlDeviceGetUtilizationRates(h))

    def nvmlDeviceGetMemoryInfo(self, h):
        return self._reading("memory", h, lambda: super(FailingNvml, self).nvmlDeviceGetMemoryInfo(h))

    def nvmlDeviceGetClockInfo(self, h, clock):
        return self._reading("clock", h, lambda: super(
            FailingNvml, self).nvmlDeviceGetClockInfo(h, clock))

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._reading("temperature", h, lambda: super(
            FailingNvml, self).nvmlDeviceGetTemperature(h, sensor))


def once(call, code=UNKNOWN):
    """Fail the ``call``-th call only, with ``code``."""
    return lambda n: FakeNvmlError(code) if n == call else None


def sampled_until(nvml, gpus, reading, calls):
    """A monitor of ``gpus`` every 10 ms until the test double had ``calls`` calls of
    ``reading`` on GPU 0 (a count of samples, not a time), and its summary."""
    mon = monitor.ResourceMonitor(10, gpus=gpus, nvml=nvml, powercap_root=Path("/nonexistent"))
    with mon:
        deadline = time.monotonic() + 30
        while nvml.calls_of.get((reading, 0), 0) < calls and time.monotonic() < deadline:
            time.sleep(0.005)
    return mon, mon.summary(items=100)


def failed_readings(summary):
    """The notes but the one on a phase under a second (these phases are short)."""
    return [n for n in summary["notes"] if not n.startswith("GPU energy over a ")]


def test_one_failed_nvml_reading_is_missing_from_that_sample_only_with_an_nvml_test_double():
    """NVML answered Unknown once (as it can under heavy load): GPU 0's energy counter and
    GPU 1's power reading lack that sample and no other, and neither GPU loses its energy.
    Before, each was not asked again, so the GPU without a counter had no energy and the
    cell none. NVML is a test double: its errors carry pynvml's codes, not a driver's."""
    nvml = FailingNvml({("energy", 0): once(3), ("power", 1): once(3)})
    mon, s = sampled_until(nvml, [0, "GPU-1111"], "power", 8)
    series, t = mon.series(), mon.series()["t_s"]
    count = len(t)
    assert count >= 8
    assert [k for k, v in enumerate(series["gpu0_energy_mj"]) if v is None] == [2]
    assert [k for k, v in enumerate(series["gpu1_power_w"]) if v is None] == [2]
    gpu0, gpu1 = s["gpus"]
    counter = series["gpu0_energy_mj"]
    assert gpu0["energy_method"] == "nvml_total_energy"
    assert gpu0["energy_j"] == pytest.approx((counter[-1] - counter[0]) / 1000)
    assert gpu1["energy_method"] == "integrated_power"
    assert gpu1["energy_j"] == pytest.approx(300 * (t[-1] - t[0]))
    assert s["energy_j"] == pytest.approx(gpu0["energy_j"] + gpu1["energy_j"])
    assert s["energy_note"] == "partial: no readable RAPL counters"
    assert failed_readings(s) == [  # not GPU 1's counter and utilisation: never supported there
        f"GPU 0 energy_mj: 1 of {count} samples missing (FakeNvmlError: Unknown Error)",
        f"GPU GPU-1111 power_w: 1 of {count} samples missing (FakeNvmlError: Unknown Error)"]
    mon.close()


def test_a_failed_first_counter_reading_neither_loses_nor_invents_energy():
    """The counter unread at the phase's start: the energy is the counter's difference
    between its first and last good readings, and the note says what it leaves out. Before,
    the GPU's lagging 200 W power reading was integrated instead (a third of the 600 W it
    drew). NVML is a test double: what it draws is a formula of time."""
    nvml = FailingNvml({("energy", 0): once(1, TIMEOUT)})
    mon, s = sampled_until(nvml, [0], "energy", 6)
    (gpu0,) = s["gpus"]
    assert gpu0["energy_method"] == "nvml_total_energy"
    series = mon.series()
    t, counter = series["t_s"], series["gpu0_energy_mj"]
    assert counter[0] is None and None not in counter[1:]
    assert gpu0["energy_j"] == pytest.approx((counter[-1] - counter[1]) / 1000)
    assert gpu0["power_mean_w"] == pytest.approx(gpu0["energy_j"] / (t[-1] - t[1]))
    phase, short = t[-1] - t[0], t[1] - t[0]
    assert s["energy_note"] == (f"partial: {short:.2f} s of GPU 0's {phase:.2f} s (its energy "
                                "counter unread at the phase's start) and no readable RAPL "
                                "counters and no energy figure (the counters cover part of the "
                                "phase)")
    # energy of part of the phase is not the cell's (its items over it would overstate the
    # samples per joule); the power drawn is the GPU's energy over the time it covers
    assert s["energy_j"] is None and s["samples_per_joule"] is None
    assert s["power_mean_w"] == pytest.approx(gpu0["power_mean_w"])
    mon.close()


def test_a_counter_given_up_mid_phase_is_asked_again_at_its_end():
    """Three failures in a row give the energy counter up; the phase's last sample asks it
    once more, so the energy covers the whole phase again. NVML is a test double."""
    nvml = FailingNvml({("energy", 0): lambda n: FakeNvmlError(UNKNOWN) if 2 <= n < 5 else None})
    mon, s = sampled_until(nvml, [0], "power", 10)
    counter = mon.series()["gpu0_energy_mj"]
    assert counter[-1] is not None and None in counter
    (gpu0,) = s["gpus"]
    assert gpu0["energy_j"] == pytest.approx((counter[-1] - counter[0]) / 1000)
    assert s["samples_per_joule"] is not None
    mon.close()


def test_a_reading_is_given_up_after_three_failures_in_a_row_or_a_permanent_error():
    """Failures in a row (a GPU lost for good) stop the asking after FAILURES_IN_A_ROW;
    failures with good readings between never do; an error NVML gives for good (no
    permission) stops it at once, and the note counts the samples it took. NVML is a test
    double raising pynvml's codes."""
    nvml = FailingNvml({
        ("temperature", 0): lambda n: FakeNvmlError(GPU_IS_LOST),
        ("clock", 0): lambda n: FakeNvmlError(TIMEOUT) if n % 2 else None,
        ("memory", 0): lambda n: FakeNvmlError(NO_PERMISSION) if n >= 3 else None,
    })
    mon, s = sampled_until(nvml, [0], "power", 8)
    count = len(mon.series()["t_s"])
    assert nvml.calls_of[("temperature", 0)] == 3
    assert nvml.calls_of[("clock", 0)] == count
    assert nvml.calls_of[("memory", 0)] == 3
    assert mon.series()["gpu0_memory_used_bytes"][:2] == [2**30, 2**30]
    assert failed_readings(s) == [
        f"GPU 0 memory_used_bytes: {count - 2} of {count} samples missing (FakeNvmlError: "
        "Insufficient Permissions; not asked again)",
        f"GPU 0 sm_clock_mhz: {(count + 1) // 2} of {count} samples missing (FakeNvmlError: "
        "Timeout)",
        f"GPU 0 temperature_c: {count} of {count} samples missing (FakeNvmlError: GPU is "
        "lost, 3 samples in a row; not asked again)"]
    assert s["gpus"][0]["sm_clock_mean_mhz"] == 1980  # of the samples that have it
    assert monitor.FAILURES_IN_A_ROW == 3
    mon.close()


def test_pynvmls_own_errors_are_told_apart_by_their_codes():
    """The errors of the installed pynvml (they need no driver): NotSupported, NoPermission
    and FunctionNotFound are not asked again, Unknown, Timeout and GpuIsLost only after
    three in a row. No NVML call reaches a driver: the readings are a test double's."""
    pynvml = pytest.importorskip("pynvml")

    class Binding(FailingNvml):
        NVMLError = pynvml.NVMLError

    for name in dir(pynvml):
        if name.startswith("NVML_ERROR_"):
            setattr(Binding, name, getattr(pynvml, name))
    raising = {"power": pynvml.NVMLError_Unknown, "clock": pynvml.NVMLError_Timeout,
               "temperature": pynvml.NVMLError_GpuIsLost,
               "utilization": pynvml.NVMLError_NotSupported,
               "memory": pynvml.NVMLError_NoPermission,
               "energy": pynvml.NVMLError_FunctionNotFound}
    nvml = Binding({(reading, 0): lambda n, error=error: error()
                    for reading, error in raising.items()})
    gpus = monitor.NvmlGpus([0], nvml)
    for _ in range(5):
        assert set(gpus.sample()[0].values()) == {None}
    assert {reading: nvml.calls_of[(reading, 0)] for reading in raising} == {
        "power": 3, "clock": 3, "temperature": 3, "utilization": 1, "memory": 1, "energy": 1}
    assert sorted(field for _, field in gpus.failures) == [
        "power_w", "sm_clock_mhz", "temperature_c"]


def test_a_gpus_energy_between_its_first_and_last_good_readings():
    """A counter's missing reading in between changes nothing; one at the start or end
    shortens the time covered and says which; a counter that went back (a driver reload)
    or fewer than two readings give the power readings' integral, over their good ones."""
    t = [0.0, 0.5, 1.0, 1.5, 2.0]
    counter = [1_000.0, 1_300.0, 1_600.0, 1_900.0, 2_200.0]  # mJ: 600 mW
    power = [0.6, 0.6, None, 0.6, 0.6]

    def energy(mj, watts=power):
        e = monitor.gpu_energy(t, mj, watts)
        return (round(e.joules, 9) if e.joules is not None else None, e.method, e.seconds,
                e.unread)

    assert energy(counter) == (1.2, "nvml_total_energy", 2.0, None)
    assert energy([1_000.0, 1_300.0, None, 1_900.0, 2_200.0]) == (
        1.2, "nvml_total_energy", 2.0, None)
    assert energy([None, 1_300.0, 1_600.0, 1_900.0, 2_200.0]) == (
        0.9, "nvml_total_energy", 1.5, "start")
    assert energy([None, 1_300.0, 1_600.0, 1_900.0, None]) == (
        0.6, "nvml_total_energy", 1.0, "start and end")
    assert energy([5_000.0, 1_300.0, 1_600.0, 1_900.0, 2_200.0]) == (
        1.2, "integrated_power", 2.0, None)
    assert energy([None, None, None, None, 2_200.0]) == (1.2, "integrated_power", 2.0, None)
    assert energy([], [0.6, None, None, None, None]) == (None, None, 0.0, None)


def test_the_cells_peak_power_keeps_a_gpu_whose_counter_missed_a_sample():
    """GPU 1's counter unread at the sample where GPU 0 drew most: the interval that spans
    the gap gives GPU 1's power there (300 W), not nothing (the peak read 1000 W instead
    of 1300 W). NVML is a test double; the samples are set by hand."""
    mon = monitor.ResourceMonitor(10, gpus=[0, 1], nvml=FakeNvml(),
                                  powercap_root=Path("/nonexistent"))
    mon._columns = {"t_s": [0.0, 0.5, 1.0, 1.5, 2.0],
                    "gpu0_energy_mj": [0, 150_000, 650_000, 800_000, 950_000],
                    "gpu1_energy_mj": [0, 150_000, None, 450_000, 600_000]}
    assert mon._peak_power(True) == pytest.approx(1300.0)
    mon.close()


def test_reasons_that_do_not_hold_a_gpu_back_are_counted_apart():
    """Idle and clocks set by the user are not the GPU holding back under load."""
    from dlbench import gpu_clocks

    out = gpu_clocks.summarize([0x1, 0x2, 0x0, None, 0x20])
    assert out["samples"] == 4 and out["held_back"] == 0.25
    assert out["reasons"] == {"thermal": 0.25, "idle": 0.25, "clocks_set": 0.25}
    assert out["text"] == "thermal 25%"
    assert gpu_clocks.summarize([0x1, 0x10])["text"] is None
    assert gpu_clocks.summarize([None])["held_back"] is None


def test_power_from_an_energy_counter_over_intervals_of_a_tenth_of_a_second_at_least():
    """Readings every 0.05 s pair up; the end's 0.02 s remainder joins the last interval; a
    counter that went back and a missing reading give no figure; one reading gives none."""
    t = [0.0, 0.05, 0.10, 0.15, 0.20, 0.22]
    mj = [0, 10_000, 20_000, 30_000, 40_000, 44_000]  # 200 W throughout
    assert monitor._interval_power(t, mj) == [None, None, 200.0, None, None, 200.0]
    assert monitor._interval_power([0.0, 0.03], [0, 6_000]) == [None, 200.0]  # short phase
    assert monitor._interval_power([0.0, 0.2, 0.4], [50_000, 10_000, 50_000]) == [
        None, None, 200.0]
    assert monitor._interval_power([0.0, 0.2, 0.4], [0, None, 80_000]) == [None, None, 200.0]
    assert monitor._interval_power([0.0], [0]) == [None]


def test_unknown_gpu_id_is_noted_and_nvml_released_with_an_nvml_test_double():
    nvml = FakeNvml()
    mon = monitor.ResourceMonitor(10, gpus=["GPU-9999"], nvml=nvml)
    assert mon.gpus is None and nvml.calls["shutdown"] == 1
    assert mon.notes == ["GPUs: NVML unavailable (Not Found)"]
    with mon:
        pass
    assert mon.summary(items=1)["energy_note"] == GPU_ENERGY_MISSING


def test_disabled_monitor_records_that_it_was_off(tmp_path):
    mon = monitor.ResourceMonitor(0)
    with mon:
        pass
    res = {"measurements": [], "extra": {}}
    summary = monitor.attach(res, tmp_path / "cell.json", mon)
    assert summary["enabled"] is False and summary["energy_j"] is None
    assert "disabled" in summary["energy_note"]
    assert res["extra"]["monitor"] is summary and summary["series_file"] is None
    assert list(tmp_path.iterdir()) == []


def test_attach_writes_the_series_beside_the_result(tmp_path):
    mon = monitor.ResourceMonitor(10)
    with mon:
        busy(0.1)
    res = {"measurements": [{"items_per_iteration": 8, "iterations": 5}], "extra": {}}
    summary = monitor.attach(res, tmp_path / "cells" / "c1.json", mon)
    assert summary["items"] == 40 and summary["series_file"] == "c1.monitor.parquet"
    assert summary["window"] == monitor.MEASURED_WINDOW
    assert not (summary["energy_note"] or "").startswith("over ")
    table = pq.read_table(tmp_path / "cells" / "c1.monitor.parquet")
    assert table.num_rows == summary["sample_count"] >= 2
    assert {"t_s", "host_rss_bytes", "host_cpu_percent"} <= set(table.column_names)


def test_csv_series_where_pyarrow_is_missing(tmp_path):
    path = monitor.write_series({"t_s": [0.0, 0.1], "host_rss_bytes": [10, 20]},
                                tmp_path / "c.monitor.csv")
    with open(path) as handle:
        assert list(csv.DictReader(handle)) == [{"t_s": "0.0", "host_rss_bytes": "10"},
                                                {"t_s": "0.1", "host_rss_bytes": "20"}]


def test_interval_flag_rejects_negative_values():
    import argparse

    parser = argparse.ArgumentParser()
    monitor.add_arguments(parser)
    assert parser.parse_args([]).monitor_interval_ms == monitor.DEFAULT_INTERVAL_MS == 500.0
    assert parser.parse_args(["--monitor_interval_ms=0"]).monitor_interval_ms == 0.0
    with pytest.raises(SystemExit):
        parser.parse_args(["--monitor_interval_ms=-5"])


def test_runner_cell_records_the_monitor_and_aggregate_has_its_columns(tmp_path):
    out = tmp_path / "cell.json"
    proc = subprocess.run([sys.executable, "-m", "dlbench.pytorch", "--model=deep_mnist",
                           "--device=cpu", "--batch_size=4", "--num_batches=8",
                           "--num_warmup_batches=1", "--count_flops=false",
                           "--monitor_interval_ms=20", f"--output={out}"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = R.read(out)
    mon = res["extra"]["monitor"]
    assert mon["items"] == 32 and mon["sample_count"] >= 2
    assert mon["series_file"] == "cell.monitor.parquet"
    assert (tmp_path / "cell.monitor.parquet").is_file()
    aggregate.write([out], tmp_path / "agg.parquet")
    (row,) = pq.read_table(tmp_path / "agg.parquet").to_pylist()
    assert row["peak_host_rss_bytes"] == mon["peak_host_rss_bytes"] > 0
    assert row["max_memory_allocated_bytes"] is None  # CPU cell: no CUDA allocator
    if mon["energy_j"] is None:
        assert row["energy_j"] is None and row["energy_note"].startswith("not available")
    else:
        assert row["samples_per_joule"] == pytest.approx(32 / mon["energy_j"])
    assert json.loads(row["extra"])["monitor"]["sample_count"] == mon["sample_count"]


def test_nvml_ids_follow_cuda_visible_devices(monkeypatch):
    from dlbench import monitor

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,GPU-abc")
    assert monitor.nvml_ids([0, 1]) == [3, "GPU-abc"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert monitor.nvml_ids([0, 1]) == [0, 1]


def test_a_tree_never_reads_more_cpu_than_the_machine_has():
    """Per-process shares are CPU-time ticks over each one's own short interval: on a
    loaded host their sum can read above every core busy (302 % on 2 cores was seen)."""
    import contextlib
    import types

    tree = monitor.ProcessTree()
    fake = types.SimpleNamespace(oneshot=contextlib.nullcontext,
                                 memory_info=lambda: types.SimpleNamespace(rss=1),
                                 cpu_percent=lambda _: 0.8 * tree.capacity)
    tree._procs = {1: fake, 2: fake}
    tree._refreshed_at = float("inf")  # no refresh of the children in this sample
    assert tree.sample(0.0, pss=False)[:3] == (2, tree.capacity, 2)
    assert tree.capacity == 100.0 * psutil.cpu_count()


def test_the_hosts_peak_power_is_over_a_tenth_of_a_second_at_least():
    """RAPL's counter moves in steps: a stop() reading 2 ms after the last sample made a
    step a spike (450 W of a steady 300 W host); its power is over intervals of 0.1 s at
    least, as a GPU's counter's, each sample taking its interval's."""
    mon = monitor.ResourceMonitor(0)
    mon._columns = {"t_s": [0.0, 0.5, 1.0, 1.002],
                    "host_energy_j": [0.0, 150.0, 299.7, 300.6]}
    assert mon._peak_power(False) == pytest.approx((300.6 - 150.0) / 0.502)  # 300 W
    mon._columns = {"t_s": [0.0, 0.5, 1.0, 1.5], "host_energy_j": [0.0, 100.0, None, 400.0]}
    assert mon._peak_power(False) == pytest.approx(300.0)  # a gap bridged


class SteppingNvml(FakeNvml):
    """GPU 0's energy counter moves in steps of 10 s (a real one's are far finer, but move
    in steps too): over a phase of a few ms it does not move while the GPU draws power."""

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if h == 1:
            raise FakeNvmlError(NOT_SUPPORTED)
        steps = int((time.perf_counter() - self.born) // 10.0)
        return int(1_000_000 + self.WATTS * steps * 10.0 * 1000)  # mJ


def test_a_counter_that_did_not_move_while_its_gpu_drew_power_gives_no_energy():
    """0 J from a counter that measured no step of a 0.05 s phase is no figure: the cell
    has no energy and no samples per joule (never a zero, nor the other GPU's or the
    host's energy alone), and says why; the GPU's power comes from its readings."""
    mon, s = sampled(SteppingNvml(), 0.05, 1000)
    gpu0 = s["gpus"][0]
    assert gpu0["energy_j"] is None and gpu0["energy_method"] is None
    assert gpu0["power_mean_w"] == pytest.approx(200)  # its (lagging) readings
    assert s["energy_j"] is None and s["samples_per_joule"] is None
    assert s["energy_note"] == (
        f"not measured: the energy counter of GPU 0 did not move over the "
        f"{s['duration_s']:.2f} s phase (NVML's counter moves in steps; more measured "
        "iterations give a figure)")
    mon.close()


def test_energy_over_a_phase_under_a_second_is_said_to_be_uncertain():
    """A counter's figure over 0.25 s stands, with a line in the notes: one step of the
    counter can be a large share of it."""
    mon, s = sampled(FakeNvml(), 0.25, 1000)
    assert s["energy_j"] > 0
    assert any(n.startswith(f"GPU energy over a {s['duration_s']:.2f} s phase: NVML's energy "
                            "counter moves in steps") for n in s["notes"])
    mon.close()
