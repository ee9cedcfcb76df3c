"""The links a collective crosses and its ceiling (dlbench.links).

No NVIDIA driver, InfiniBand port or second node here: NVML is a test double and sysfs a
folder written by the tests, so these check how readings become a ceiling, not NVML's or
the kernel's answers; the real readings of a CPU collective cell are checked at the end.
"""

import json
from pathlib import Path

import pytest

from dlbench import aggregate, links


class NvmlError(Exception):
    pass


class NvlinkNode:
    """Test double of pynvml on a node of four GPUs: 0 and 1 reach each other and GPU 2
    over NVLink (18 active links at 26,562 MB/s each way, one link down), GPU 3 is a PCIe
    card with no NVLink; every GPU on PCIe gen 5 x16."""

    NVMLError = NvmlError
    NVML_CLOCK_SM = 1
    BUS = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0"]
    NVLINKED = {0: {1, 2}, 1: {0, 2}, 2: {0, 1}, 3: set()}

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 4

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return int(uuid.removeprefix("GPU-"))

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetIndex(self, h):
        return h

    def nvmlDeviceGetPciInfo(self, h):
        return type("Pci", (), {"busId": self.BUS[h].encode()})()

    def nvmlDeviceGetNvLinkState(self, h, link):
        if h == 3:
            raise NvmlError("Not Supported")
        if link >= 19:
            raise NvmlError("Invalid Argument")
        return 0 if link == 18 else 1

    def nvmlDeviceGetFieldValues(self, h, fields):
        assert fields == [links.NVLINK_SPEED_FIELD]
        value = type("Value", (), {"uiVal": 26562})()
        return [type("Field", (), {"nvmlReturn": 0, "value": value})()]

    def nvmlDeviceGetP2PStatus(self, a, b, index):
        assert index == links.P2P_NVLINK
        return 0 if b in self.NVLINKED[a] else 5  # OK, else NOT_SUPPORTED

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16

    def __getattr__(self, name):  # what the monitor's settings ask: not supported here
        def unsupported(*args):
            raise NvmlError("Not Supported")
        return unsupported


def test_an_nvlinked_gpu_reads_its_links_speed_peers_and_pcie_with_an_nvml_double():
    """NVML is a test double: checks what is asked and how the answers add up."""
    gpu = links.gpu_links("GPU-0", NvlinkNode())
    assert gpu["bus_id"] == "00000000:18:00.0"
    assert gpu["nvlink_links"] == 18  # the 19th link is down
    assert gpu["nvlink_gbps"] == pytest.approx(18 * 26.562)
    assert gpu["nvlink_peers"] == ["00000000:2a:00.0", "00000000:3a:00.0"]
    assert gpu["pcie_gbps"] == pytest.approx(16 * 3.938)


def test_a_pcie_gpu_has_no_nvlink_and_is_nobodys_peer():
    gpu = links.gpu_links("GPU-3", NvlinkNode())
    assert (gpu["nvlink_links"], gpu["nvlink_gbps"], gpu["nvlink_peers"]) == (0, None, [])
    assert gpu["pcie_generation"] == 5 and gpu["pcie_width"] == 16


def test_no_nvml_reads_no_gpu():
    assert links.gpu_links("GPU-0", nvml=_NoDriver()) is None


class _NoDriver:
    NVMLError = NvmlError

    def nvmlInit(self):
        raise NvmlError("Driver Not Loaded")


def _sysfs(root: Path, ports=(), interfaces=()) -> Path:
    """A sysfs of InfiniBand ports (name, state, rate) and network interfaces (name,
    operstate, speed in Mb/s or None, physical)."""
    for name, state, rate in ports:
        device, port = name.split("/")
        folder = root / "class/infiniband" / device / "ports" / port
        folder.mkdir(parents=True)
        (folder / "state").write_text(state + "\n")
        (folder / "rate").write_text(rate + "\n")
        (folder / "link_layer").write_text("InfiniBand\n")
    for name, operstate, speed, physical in interfaces:
        folder = root / "class/net" / name
        folder.mkdir(parents=True)
        (folder / "operstate").write_text(operstate + "\n")
        if speed is not None:
            (folder / "speed").write_text(f"{speed}\n")
        if physical:
            (folder / "device").mkdir()
    return root


def test_nccl_uses_every_active_infiniband_port_and_gloo_the_fastest_interface(tmp_path):
    root = _sysfs(tmp_path, ports=[("mlx5_0/1", "4: ACTIVE", "400 Gb/sec (4X NDR)"),
                                   ("mlx5_1/1", "4: ACTIVE", "400 Gb/sec (4X NDR)"),
                                   ("mlx5_2/1", "1: DOWN", "10 Gb/sec (4X SDR)")],
                  interfaces=[("eth0", "up", 25000, True), ("eth1", "up", 100000, True),
                              ("eth2", "down", 200000, True), ("lo", "unknown", None, False),
                              ("docker0", "up", 10000, False)])
    nccl = links.network("nccl", root)
    assert nccl["used"] == "infiniband" and nccl["gbps"] == 100.0
    assert [p["name"] for p in nccl["ports"]] == ["mlx5_0/1", "mlx5_1/1"]
    gloo = links.network("gloo", root)
    assert (gloo["used"], gloo["gbps"]) == ("eth1", 12.5)
    assert [i["name"] for i in gloo["interfaces"]] == ["eth0", "eth1"]


def test_a_virtual_machines_interface_without_a_speed_gives_no_rate(tmp_path):
    root = _sysfs(tmp_path, interfaces=[("eth0", "up", -1, True)])
    assert links.network("nccl", root) == {
        "used": None, "gbps": None, "interfaces": [{"name": "eth0", "gbps": None}]}


def _rank(host, gpu=None, network_gbps=50.0):
    return {"host": host, "network": {"gbps": network_gbps}, **({"gpu": gpu} if gpu else {})}


def _node_gpus(node=None):
    nvml = node or NvlinkNode()
    return [links.gpu_facts(nvml, i) for i in range(4)]


def test_gpus_that_reach_each_other_over_nvlink_are_limited_by_nvlink():
    gpus = _node_gpus()
    facts = [_rank("a", gpus[0]), _rank("a", gpus[1]), _rank("a", gpus[2])]
    link = links.ceiling(facts, [[0, 1, 2]])
    assert link["path"] == "nvlink" and link["gbps"] == pytest.approx(478.116)
    assert link["text"] == "NVLink 18 x 26.562 GB/s"


def test_one_gpu_without_nvlink_to_the_others_makes_the_ring_pcie():
    gpus = _node_gpus()
    link = links.ceiling([_rank("a", gpus[0]), _rank("a", gpus[3])], [[0, 1]])
    assert (link["path"], link["text"]) == ("pcie", "PCIe gen5 x16")
    assert link["gbps"] == pytest.approx(63.008)


def test_across_nodes_the_slowest_nodes_network_limits_when_it_is_slower():
    gpus = _node_gpus()
    facts = [_rank("a", gpus[0], 100.0), _rank("a", gpus[1], 100.0),
             _rank("b", gpus[0], 50.0), _rank("b", gpus[1], 50.0)]
    link = links.ceiling(facts, [[0, 1, 2, 3]])
    assert (link["path"], link["gbps"]) == ("network", 50.0)
    # One GPU per node: only the network is crossed.
    assert links.ceiling([facts[0], facts[2]], [[0, 1]])["path"] == "network"
    # A network faster than the nodes' PCIe: PCIe limits.
    fast = [_rank("a", gpus[0], 800.0), _rank("a", gpus[3], 800.0),
            _rank("b", gpus[0], 800.0), _rank("b", gpus[3], 800.0)]
    assert links.ceiling(fast, [[0, 1, 2, 3]])["path"] == "pcie"


def test_no_ceiling_is_guessed():
    gpus = _node_gpus()
    # one process; CPU processes on one node; a node without a network rate; a GPU NVML
    # could not read
    assert links.ceiling([_rank("a", gpus[0])], [[0]]) is None
    assert links.ceiling([_rank("a"), _rank("a")], [[0, 1]]) is None
    assert links.ceiling([_rank("a", gpus[0]), _rank("b", gpus[0], None)], [[0, 1]]) is None
    assert links.ceiling([_rank("a", None), _rank("a", gpus[0])], [[0, 1]]) is None
    # CPU processes on two nodes cross the network
    assert links.ceiling([_rank("a"), _rank("b", network_gbps=3.125)], [[0, 1]])["gbps"] == 3.125


def test_the_slowest_communicator_and_the_pairs_set_the_ceiling():
    gpus = _node_gpus()
    facts = [_rank("a", gpus[i]) for i in range(4)]
    assert links.communicators(4, None, None) == [[0, 1, 2, 3]]
    assert links.communicators(4, [[0, 2], [1, 3]], None) == [[0, 2], [1, 3]]
    assert links.communicators(4, [[0, 2], [1, 3]], [(0, 1)]) == [[0, 1]]
    assert links.ceiling(facts, [[0, 1], [2, 0]])["path"] == "nvlink"
    assert links.ceiling(facts, [[0, 1], [2, 3]])["path"] == "pcie"


def test_communicators_crossing_nodes_at_once_share_each_nodes_network():
    """Two nodes of four GPUs, 400 GB/s of network each: PARAM's --multi-comms 4 (groups
    [0, 4], [1, 5], ...) and pairwise pairs all cross both nodes at once, so each gets a
    quarter of a node's network, and the ceiling's words say so; one communicator, or one
    crossing among others that stay on their node, gets the whole network."""
    from dlbench.comms import sizes as S

    gpus = _node_gpus()
    facts = [_rank(host, gpus[i], 400.0) for host in "ab" for i in range(4)]
    quarter = {"path": "network", "gbps": 100.0,
               "text": "network 400.0 GB/s per node / 4 communicators crossing it at once "
                       "= 100.0 GB/s each"}
    assert links.ceiling(facts, links.communicators(8, S.group_members(4, 8), None)) \
        == quarter
    assert links.ceiling(facts, links.communicators(
        8, None, S.pt2pt_pairs("pairwise", 8))) == quarter
    for talking in ([[0, 4]], [[0, 4], [1, 2], [5, 6]], [[0, 1, 2, 4, 5, 6]]):
        link = links.ceiling(facts, talking)
        assert (link["gbps"], link["text"]) == (400.0, "network 400.0 GB/s per node")


def test_a_share_of_the_link_and_twice_the_link_for_a_bidirectional_test():
    link = {"path": "nvlink", "gbps": 400.0, "text": "NVLink"}
    assert links.share(300.0, link) == pytest.approx(75.0)
    assert links.share(600.0, link, bidirectional=True) == pytest.approx(75.0)
    assert links.share(300.0, None) is None and links.share(None, link) is None


def test_the_table_takes_a_sizes_link_and_share():
    res = {"status": "ok", "kind": "comms", "cell": {"collective": "all_reduce"},
           "environment": {}, "extra": {"link": {"path": "nvlink", "gbps": 478.1}},
           "measurements": [{"name": "all_reduce_1048576B", "pass": "collective",
                             "iterations": 2, "items_per_iteration": 1.0,
                             "time_s": {k: 1e-4 for k in aggregate.SUMMARY_KEYS},
                             "times_s": [1e-4, 1e-4], "throughput": 1e4,
                             "throughput_unit": "iterations/s",
                             "extra": {"bus_gbps": 20.0, "pct_of_link": 4.18}}]}
    row = aggregate.rows_of(res, "x.json")[0]
    assert (row["link"], row["link_gbps"], row["pct_of_link"]) == ("nvlink", 478.1, 4.18)


def test_a_cpu_collective_cell_records_its_nodes_readings_and_no_ceiling(tmp_path):
    """A real two-process gloo cell on this machine: the readings of its node (network
    interfaces as sysfs gives them) are recorded; two CPU processes of one node share
    memory, not a link, so no ceiling and no share."""
    from dlbench.comms import runner

    out = tmp_path / "r.json"
    assert runner.main(["--device=cpu", "--num_gpus=2", "--collective=all_reduce", "--b=64",
                        "--e=128", "--n=2", "--w=1", f"--output={out}"]) == 0
    res = json.loads(out.read_text())
    assert res["extra"]["link"] is None
    (node,) = res["extra"]["link_readings"].values()
    assert node["gpus"] == [] and "gbps" in node["network"]
    assert all(m["extra"]["pct_of_link"] is None for m in res["measurements"])


def test_the_report_gives_each_sizes_share_of_the_link_where_links_were_read():
    import pandas as pd

    from dlbench.report import comms_charts
    from dlbench.report.data import prepare

    def row(cell, size, seconds, link=None, share=None):
        return {"cell_id": cell, "source": f"{cell}.json", "study": "net", "kind": "comms",
                "status": "ok", "throughput": 1 / seconds, "name": f"all_reduce|{size}",
                "pass": "collective", "op_name": "all_reduce", "collective": "all_reduce",
                "num_gpus": 8, "num_nodes": 1, "system": "a", "device": "gpu",
                "data_type": "float32", "framework": "pytorch", "bytes_per_iteration": size,
                "time_median_s": seconds, "time_p95_s": seconds, "gbps": size / seconds / 1e9,
                "bus_gbps": 1.75 * size / seconds / 1e9, "link": link, "pct_of_link": share}

    read = prepare(pd.DataFrame([row("nv", 2**28, 1e-3, "nvlink", 98.2),
                                 row("old", 2**28, 2e-3)]))
    data = comms_charts.comms_frame(read).set_index("cell")
    assert data.loc["a/nv", "pct_of_link"] == 98.2 and data.loc["a/nv", "link"] == "nvlink"
    assert pd.isna(data.loc["a/old", "pct_of_link"])
    figure = comms_charts.bandwidth_figure(read)
    assert [c.field for c in figure.table.columns][-2:] == ["pct_of_link", "link"]
    assert "% of link" in json.dumps(figure.chart.to_dict())
    # No cell read its links (CPU collectives on one node): no empty columns.
    unread = prepare(pd.DataFrame([row("old", 2**28, 2e-3)]))
    assert "pct_of_link" not in [c.field for c in comms_charts.bandwidth_figure(unread)
                                 .table.columns]
