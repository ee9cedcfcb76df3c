"""The nccl_env axis (dlbench.nccl_env): NCCL settings a study sweeps, checked in one line
at config time, passed to the runners as a flag and set in each process before its process
group starts. Whether NCCL itself then picks the algorithm is not exercised here (no GPU:
gloo ignores them); tests/test_comms.py runs two processes with a setting recorded."""

import os
from pathlib import Path

import pytest

from dlbench import cellrun, kinds, nccl_env, study
from dlbench.pytorch import distributed
from dlbench.pytorch.runner import parser as pytorch_parser


def test_settings_are_nccl_names_with_plain_values():
    assert nccl_env.parse("NCCL_ALGO=Tree  NCCL_PROTO=Simple") == {
        "NCCL_ALGO": "Tree", "NCCL_PROTO": "Simple"}
    assert nccl_env.parse("NCCL_SOCKET_IFNAME=^lo,docker NCCL_BUFFSIZE=4M") == {
        "NCCL_SOCKET_IFNAME": "^lo,docker", "NCCL_BUFFSIZE": "4M"}
    assert nccl_env.parse("") == {}
    assert nccl_env.problem("LD_PRELOAD=/tmp/x.so") == \
        "'LD_PRELOAD=/tmp/x.so' is no NCCL_<NAME>=<value> setting"
    assert nccl_env.problem("NCCL_ALGO") == "'NCCL_ALGO' is no NCCL_<NAME>=<value> setting"
    assert nccl_env.problem("NCCL_ALGO=$(reboot)") == (
        "NCCL_ALGO's value '$(reboot)' holds a character NCCL's settings do not use")
    assert nccl_env.problem("NCCL_ALGO=Ring NCCL_ALGO=Tree") == "NCCL_ALGO is set twice"
    assert nccl_env.problem("NCCL_ALGO=Ring") is None


@pytest.mark.parametrize("setting", [
    "NCCL_NET_PLUGIN=/tmp/x/libnccl-net.so", "NCCL_TUNER_PLUGIN=/tmp/t.so",
    "NCCL_PROFILER_PLUGIN=p", "NCCL_ENV_PLUGIN=e", "NCCL_DEBUG_FILE=/home/u/.bashrc",
    "NCCL_TOPO_DUMP_FILE=/tmp/t.xml", "NCCL_GRAPH_DUMP_FILE=/tmp/g.xml", "NCCL_CONF_FILE=/tmp/c",
    "NCCL_IBVERBS_LIB=libibverbs.so.1"])
def test_settings_that_load_a_library_or_name_a_file_nccl_writes_are_refused(setting):
    name = setting.partition("=")[0]
    assert nccl_env.problem(f"NCCL_ALGO=Ring {setting}") == (
        f"{name} is not taken: it loads a library or names a file NCCL writes or reads its "
        "settings from")


def test_a_path_is_refused_where_nccl_reads_no_data_file():
    """NCCL_IBVERBS_LIB=/x/evil.so is dlopen'd in place of libibverbs; a variable of a later
    NCCL that names a library is refused by its path whatever its name."""
    assert nccl_env.problem("NCCL_IBVERBS_LIB=/tmp/evil.so") == (
        "NCCL_IBVERBS_LIB is not taken: it loads a library or names a file NCCL writes or "
        "reads its settings from")
    assert nccl_env.problem("NCCL_NEW_SHIM=/tmp/evil.so") == (
        "NCCL_NEW_SHIM's value '/tmp/evil.so' is a path, which only NCCL_GRAPH_FILE and "
        "NCCL_TOPO_FILE may be (a path elsewhere may name a library NCCL loads)")


def test_address_ranges_and_exact_interface_names_are_no_paths():
    assert nccl_env.parse("NCCL_IB_ADDR_RANGE=10.1.0.0/16,fd00::/8 NCCL_SOCKET_IFNAME==eth0"
                          ) == {"NCCL_IB_ADDR_RANGE": "10.1.0.0/16,fd00::/8",
                                "NCCL_SOCKET_IFNAME": "=eth0"}


def test_a_topology_file_nccl_reads_as_data_is_taken():
    assert nccl_env.parse("NCCL_TOPO_FILE=/etc/nccl/topo.xml NCCL_GRAPH_FILE=/etc/g.xml") == {
        "NCCL_TOPO_FILE": "/etc/nccl/topo.xml", "NCCL_GRAPH_FILE": "/etc/g.xml"}


def test_a_study_sweeps_settings_as_cells_and_refuses_a_bad_one_in_one_line():
    ring, tree = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "num_gpus": 8, "nccl_env": ["NCCL_ALGO=Ring", "NCCL_ALGO=Tree"]}}}})
    assert ring.id != tree.id and tree.params["nccl_env"] == "NCCL_ALGO=Tree"
    command = kinds.get("comms").command(tree.params, Path("x.json"), "python", None)
    assert "--nccl_env=NCCL_ALGO=Tree" in command  # one argument, no shell
    (default,) = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "num_gpus": 8}}}})
    assert default.id == "pytorch_all-reduce_float32_8x_gpu_4770ff82"  # as before the axis
    (ddp,) = study.expand_config({"studies": {"m": {"grid": {
        "model": "resnet50", "num_gpus": 8, "nccl_env": "NCCL_PROTO=LL128"}}}})
    argv = kinds.get("model").command(ddp.params, Path("x.json"), "python", None)
    flag = next(a for a in argv if a.startswith("--nccl_env"))
    assert flag == "--nccl_env=NCCL_PROTO=LL128"
    assert pytorch_parser().parse_args(["--model=resnet50", flag]).nccl_env == "NCCL_PROTO=LL128"
    with pytest.raises(study.ConfigError, match="study 'c': nccl_env: 'LD_PRELOAD=/tmp/x.so' "
                                                "is no NCCL_<NAME>=<value> setting"):
        study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
            "nccl_env": "LD_PRELOAD=/tmp/x.so"}}}})
    with pytest.raises(study.ConfigError, match="study 'm': nccl_env: mxnet has no nccl_env"):
        study.expand_config({"studies": {"m": {"grid": {
            "model": "resnet50", "framework": "mxnet", "nccl_env": "NCCL_ALGO=Tree"}}}})


def test_a_process_sets_the_settings_before_its_process_group(monkeypatch):
    """distributed.init (both runners' start) puts them into this process's environment;
    a bad list (a runner started by hand) is a failed cell in one line."""
    monkeypatch.delenv("NCCL_ALGO", raising=False)
    monkeypatch.setattr(os, "environ", dict(os.environ))  # nothing leaks to other tests
    distributed.init(distributed.Topology(), "cpu", "NCCL_ALGO=Tree")
    assert os.environ["NCCL_ALGO"] == "Tree"
    with pytest.raises(cellrun.CellError, match="nccl_env: 'PATH=/x' is no NCCL_"):
        distributed.init(distributed.Topology(), "cpu", "PATH=/x")
