"""The links a collective's processes talk over, and the most bus bandwidth they allow.

nccl-tests' bus bandwidth (``dlbench.comms.sizes.bus_factor``) is made to be compared with
the hardware's link: the rate at which the slowest link a ring crosses carries data in
one direction. Each process of a collective cell reads its own links before any timing
(``local``), and the first process turns the readings of all into the cell's ceiling
(``ceiling``):

- its GPU's NVLinks: the active links times NVML's common per-link speed (one direction,
  ``NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON``), and the GPUs of its node it reaches over
  NVLink (NVML's P2P status, by PCI bus id);
- its GPU's PCIe link at the most both the device and the slot allow (NVML's maximum
  generation and width; the current ones drop while the GPU idles), per lane after the
  line encoding;
- its node's network: the InfiniBand or RoCE ports that are active, all of them for NCCL
  (which spreads its rings over every NIC), else the fastest physical interface that is up
  (sysfs).

Within a node the ceiling is NVLink where every two GPUs of a communicator there reach each
other over it, else PCIe; across nodes, the slowest node's network, shared by every
communicator crossing that node at once (PARAM's ``--multi-comms`` groups, a pairwise
point-to-point test's pairs: each gets the node's rate over their count, as its bus
bandwidth is its own share); the collective's is the slowest of those it crosses, over
every communicator. None where a reading it needs is missing (no ceiling is guessed), for
one process (nothing crosses a link) and for processes sharing one node without GPUs
(shared memory, not a link).

A ring's ceiling: NVLink SHARP (NCCL's NVLS) and in-network reductions (SHARP) reduce in
the switch, so that an all_reduce's bus bandwidth can pass it; a share above 100% says so.
A bidirectional point-to-point test moves data both ways at once: its ceiling is twice
the link's.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

SYS = Path("/sys")
# GB/s per lane and direction after line encoding (8b/10b to gen 2, 128b/130b to gen 5,
# FLIT mode's 242/256 at gen 6), by PCIe generation.
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
# nvml.h's field ids (the same numbers in every NVML that has them).
NVLINK_SPEED_FIELD = 90  # NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON: MB/s per active link
NVLINK_MAX_LINKS = 36  # NVML_NVLINK_MAX_LINKS; links are asked for until one is refused
P2P_NVLINK = 2  # NVML_P2P_CAPS_INDEX_NVLINK
P2P_OK = 0  # NVML_P2P_STATUS_OK
_RATE = re.compile(r"([\d.]+)\s*Gb/sec")


# One process's readings


def local(host: str, backend: str, gpu_id: str | None, nvml: Any = None,
          root: Path = SYS) -> dict[str, Any]:
    """This process's links: its node's network and, for a GPU process (``gpu_id``: its
    NVML id, as ``pytorch.runner.monitored_gpus`` gives), its GPU's NVLinks and PCIe."""
    facts: dict[str, Any] = {"host": host, "network": network(backend, root)}
    if gpu_id is not None:
        facts["gpu"] = gpu_links(gpu_id, nvml)
    return facts


def gpu_links(gpu_id: str, nvml: Any = None) -> dict[str, Any] | None:
    """The GPU's PCI bus id, NVLinks and PCIe link (None without NVML)."""
    from dlbench.monitor import NvmlGpus

    try:
        gpus = NvmlGpus([gpu_id], nvml)
    except Exception:  # noqa: BLE001 -- no driver, no pynvml, an unknown id: no reading
        return None
    try:
        return gpu_facts(gpus.nvml, gpus.handles[0])
    finally:
        gpus.close()


def gpu_facts(nvml: Any, handle: Any) -> dict[str, Any]:
    """What ``gpu_links`` reads, from an open NVML and the GPU's handle."""

    def ask(fn: str, *args: Any) -> Any:
        try:
            return getattr(nvml, fn)(*args)
        except (nvml.NVMLError, AttributeError):
            return None

    bus = ask("nvmlDeviceGetPciInfo", handle)
    links = 0
    for link in range(NVLINK_MAX_LINKS):
        state = ask("nvmlDeviceGetNvLinkState", handle, link)
        if state is None:  # no such link (or no NVLink at all)
            break
        links += bool(state)
    speed = None
    if links:
        values = ask("nvmlDeviceGetFieldValues", handle, [NVLINK_SPEED_FIELD])
        if values and values[0].nvmlReturn == 0 and values[0].value.uiVal > 0:
            speed = values[0].value.uiVal / 1000.0  # MB/s -> GB/s
    peers = []
    for index in range(ask("nvmlDeviceGetCount") or 0) if links else ():
        other = ask("nvmlDeviceGetHandleByIndex", index)
        other_bus = ask("nvmlDeviceGetPciInfo", other) if other is not None else None
        if other_bus is None or bus is None or _bus_id(other_bus) == _bus_id(bus):
            continue
        if ask("nvmlDeviceGetP2PStatus", handle, other, P2P_NVLINK) == P2P_OK:
            peers.append(_bus_id(other_bus))
    generation = ask("nvmlDeviceGetMaxPcieLinkGeneration", handle)
    width = ask("nvmlDeviceGetMaxPcieLinkWidth", handle)
    lane = PCIE_LANE_GBPS.get(generation) if generation else None
    return {
        "bus_id": _bus_id(bus) if bus is not None else None,
        "nvlink_links": links, "nvlink_link_gbps": speed,
        "nvlink_gbps": links * speed if links and speed else None,
        "nvlink_peers": peers,
        "pcie_generation": generation, "pcie_width": width,
        "pcie_gbps": round(lane * width, 3) if lane and width else None,
    }


def _bus_id(pci: Any) -> str:
    """A PCI bus id in one spelling (NVML's busId, bytes or str, any case)."""
    value = getattr(pci, "busId", pci)
    text = value.decode() if isinstance(value, bytes) else str(value)
    return text.strip().lower()


def network(backend: str, root: Path = SYS) -> dict[str, Any]:
    """The node's network as the backend uses it: NCCL every active InfiniBand/RoCE port,
    else (and gloo always) the fastest physical interface that is up; ``gbps`` None where
    none gives its rate."""
    ports = infiniband_ports(root)
    interfaces = net_interfaces(root)
    if backend == "nccl" and ports:
        return {"used": "infiniband", "gbps": sum(p["gbps"] for p in ports), "ports": ports}
    rated = [i for i in interfaces if i["gbps"]]
    fastest = max(rated, key=lambda i: i["gbps"]) if rated else None
    return {"used": fastest["name"] if fastest else None,
            "gbps": fastest["gbps"] if fastest else None,
            "interfaces": interfaces, **({"ports": ports} if ports else {})}


def infiniband_ports(root: Path = SYS) -> list[dict[str, Any]]:
    """Active InfiniBand (and RoCE) ports with their rate ("400 Gb/sec (4X NDR)")."""
    out = []
    for port in sorted((root / "class/infiniband").glob("*/ports/*")):
        state, rate = _read(port / "state"), _read(port / "rate")
        match = _RATE.search(rate or "")
        if state and "ACTIVE" in state and match:
            out.append({"name": f"{port.parents[1].name}/{port.name}",
                        "link_layer": _read(port / "link_layer"),
                        "gbps": float(match.group(1)) / 8})
    return out


def net_interfaces(root: Path = SYS) -> list[dict[str, Any]]:
    """Physical network interfaces that are up, with their speed (None where the driver
    gives none, as a virtual machine's often do)."""
    out = []
    for interface in sorted((root / "class/net").glob("*")):
        if not (interface / "device").exists() or _read(interface / "operstate") != "up":
            continue  # loopback, bridges, tunnels; interfaces that are down
        try:
            mbits = int(_read(interface / "speed") or "")
        except ValueError:
            mbits = -1
        out.append({"name": interface.name, "gbps": mbits / 8000 if mbits > 0 else None})
    return out


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:  # absent, or a driver that refuses the read (an interface's speed)
        return None


# The cell's ceiling


def ceiling(facts: Sequence[Mapping[str, Any]],
            communicators: Iterable[Sequence[int]]) -> dict[str, Any] | None:
    """The most bus bandwidth the collective's links allow, from every rank's ``local``
    readings (in rank order) and the ranks of each communicator: ``gbps``, the ``path``
    that limits it (``nvlink``, ``pcie`` or ``network``) and ``text`` in words; None where
    it cannot be told."""
    talking = [list(ranks) for ranks in communicators]
    # The communicators run at once: those crossing nodes share each node's network, so
    # each gets its node's rate over how many cross that node (a GPU's NVLinks and PCIe
    # link are its rank's, in one communicator).
    crossing: Counter[str] = Counter()
    for ranks in talking:
        hosts = {facts[r]["host"] for r in ranks}
        crossing.update(hosts if len(hosts) > 1 else ())
    found = [_communicator_ceiling(facts, ranks, crossing) for ranks in talking]
    if not found or any(f is None for f in found):
        return None
    return min(found, key=lambda f: f["gbps"])


def _communicator_ceiling(facts: Sequence[Mapping[str, Any]], ranks: list[int],
                          crossing: Mapping[str, int]) -> dict[str, Any] | None:
    if len(ranks) < 2:
        return None
    by_host: dict[str, list[int]] = {}
    for r in ranks:
        by_host.setdefault(facts[r]["host"], []).append(r)
    parts = []
    for members in by_host.values():
        if len(members) > 1:
            part = _within_node([facts[r].get("gpu") for r in members])
            if part is None:
                return None
            parts.append(part)
    if len(by_host) > 1:
        rates = {host: facts[members[0]].get("network", {}).get("gbps")
                 for host, members in by_host.items()}
        if any(not rate for rate in rates.values()):
            return None
        host = min(rates, key=lambda h: rates[h] / crossing[h])
        rate, sharing = rates[host], crossing[host]
        text = f"network {rate:,.1f} GB/s per node"
        if sharing > 1:
            text += (f" / {sharing} communicators crossing it at once = "
                     f"{rate / sharing:,.1f} GB/s each")
        parts.append({"path": "network", "gbps": rate / sharing, "text": text})
    return min(parts, key=lambda p: p["gbps"])


def _within_node(gpus: list[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """The ceiling among GPUs of one node: NVLink where each reaches every other over it."""
    if any(not g or not g.get("bus_id") for g in gpus):
        return None  # CPU processes (shared memory), or a GPU NVML could not read
    ids = [g["bus_id"] for g in gpus]
    nvlinked = all(other in g["nvlink_peers"] for g in gpus for other in ids
                   if other != g["bus_id"])
    if nvlinked and all(g.get("nvlink_gbps") for g in gpus):
        slowest = min(gpus, key=lambda g: g["nvlink_gbps"])
        return {"path": "nvlink", "gbps": slowest["nvlink_gbps"],
                "text": f"NVLink {slowest['nvlink_links']} x "
                        f"{slowest['nvlink_link_gbps']:g} GB/s"}
    if not all(g.get("pcie_gbps") for g in gpus):
        return None
    slowest = min(gpus, key=lambda g: g["pcie_gbps"])
    return {"path": "pcie", "gbps": slowest["pcie_gbps"],
            "text": f"PCIe gen{slowest['pcie_generation']} x{slowest['pcie_width']}"}


def communicators(world: int, groups: Sequence[Sequence[int]] | None,
                  pairs: Sequence[Sequence[int]] | None) -> list[list[int]]:
    """The ranks that talk to each other: a point-to-point test's pairs (an incast's or
    multicast's root and peers, as one), else the ``--multi-comms`` groups, else the whole
    world."""
    if pairs:
        return [list(p) for p in pairs]
    if groups:
        return [list(g) for g in groups]
    return [list(range(world))]


def share(bus_gbps: float | None, link: Mapping[str, Any] | None,
          bidirectional: bool = False) -> float | None:
    """A size's bus bandwidth as a percentage of the link's ceiling (twice the link for a
    bidirectional test)."""
    if not bus_gbps or not link or not link.get("gbps"):
        return None
    return 100.0 * bus_gbps / (link["gbps"] * (2 if bidirectional else 1))


def by_host(facts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ranks' readings once per node, as a result records them: its network and the
    cell's GPUs on it."""
    out: dict[str, Any] = {}
    for reading in facts:
        node = out.setdefault(reading["host"], {"network": reading.get("network"), "gpus": []})
        if reading.get("gpu") and reading["gpu"] not in node["gpus"]:
            node["gpus"].append(reading["gpu"])
    return out
