"""Cells no node set of a Slurm cluster can hold, refused before submission (sinfo).

The real sinfo of a running Slurm is used by tests/test_slurm.py; these test the parsing
of its output and the check."""

import subprocess

import pytest

from dlbench import slurm_nodes, study
from dlbench import workflow_support as support
from dlbench.slurm_nodes import Node, Request


@pytest.mark.parametrize(("gres", "gpus"), [
    ("gpu:4", 4),
    ("gpu:a100:4(S:0-1)", 4),
    ("gpu:a100:4(S:0,1)", 4),  # a socket list holds a comma
    ("gpu:a100:2,gpu:v100:2", 4),
    ("gpu:h100:8(S:0-1),shard:h100:64", 8),
    ("gpu", 1),
    ("gpu:a100", 1),
    ("(null)", 0),
    ("", 0),
    ("mps:400", 0),
])
def test_gpu_count_of_sinfo_gres(gres, gpus):
    assert slurm_nodes.gpu_count(gres) == gpus


def test_nodes_in_several_partitions_count_once():
    out = "n1|gpu:4|64\nn1|gpu:4|64\nn2|(null)|32\n\nbroken line\n"
    assert slurm_nodes.parse(out) == [Node("n1", 4, 64), Node("n2", 0, 32)]


def test_no_answer_from_sinfo_checks_nothing():
    def failing(argv):
        raise subprocess.CalledProcessError(1, argv, "", "sinfo: fatal: no config")

    assert slurm_nodes.read_nodes(failing) is None
    assert slurm_nodes.read_nodes(lambda argv: "") is None
    asked = []
    assert slurm_nodes.read_nodes(lambda argv: asked.append(argv) or "a|gpu:2|8\n") == [
        Node("a", 2, 8)]
    assert asked == [slurm_nodes.SINFO]


NODES = [Node("g1", 4, 64), Node("g2", 4, 64), Node("c1", 0, 128)]


def test_refusal_names_the_study_and_the_field():
    assert slurm_nodes.refusal([Request("s", 2, 4), Request("t", 3, 0)], NODES) is None
    assert slurm_nodes.refusal([Request("big", 1, 8)], NODES) == (
        "study 'big': num_gpus: 8 GPUs on a node, but no node of this Slurm cluster has "
        "more than 4 (sinfo); Slurm would refuse the job")
    assert slurm_nodes.refusal([Request("wide", 3, 2)], NODES) == (
        "study 'wide': num_nodes: 3 nodes with 2 GPUs each, but this Slurm cluster has 2 "
        "such nodes (sinfo); Slurm would refuse the job")


def test_distinct_requests_keep_the_first_study_and_put_the_largest_first():
    requests = [Request("a", 1, 1), Request("b", 1, 8), Request("c", 1, 1), Request("d", 2, 8)]
    assert slurm_nodes.distinct(requests) == [Request("d", 2, 8), Request("b", 1, 8),
                                              Request("a", 1, 1)]


def test_cells_of_a_study_are_checked_per_node():
    """num_gpus is per node (a two-node cell of 4 GPUs needs two 4-GPU nodes); CPU cells
    ask for no GPU."""
    cells = study.expand_config({"studies": {
        "scale": {"grid": {"model": "resnet50", "device": "gpu", "num_gpus": [1, 4],
                           "num_nodes": [1, 2]}},
        "cpu": {"grid": {"model": "resnet50", "device": "cpu"}}}})
    support.check_cluster_nodes(cells, NODES)
    with pytest.raises(support.WorkflowConfigError, match="num_nodes: 2 nodes with 4 GPUs"):
        support.check_cluster_nodes(cells, NODES[:1] + NODES[2:])
    with pytest.raises(support.WorkflowConfigError, match="study 'scale': num_gpus: 4 GPUs"):
        support.check_cluster_nodes(cells, [Node("small", 2, 16)])
