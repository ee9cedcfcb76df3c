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


def test_a_job_asking_more_cpus_on_a_node_than_any_node_has_is_refused():
    """A CPU cell's job asks its threads (--cpus-per-task), a GPU cell's cpus_per_gpu x its
    GPUs where the profile gives cpus_per_gpu: a node set short of those CPUs would leave
    the job queued for ever. Nodes whose CPUs sinfo did not give are taken to fit."""
    asked = Request("cpu", 1, 0, 256, "benchmark_pytorch threads: 256")
    assert slurm_nodes.refusal([asked], NODES) == (
        "study 'cpu': benchmark_pytorch threads: 256 asks 256 CPUs on a node, but no node of "
        "this Slurm cluster has more than 128 (sinfo); the job would wait in the queue for "
        "ever (lower it, e.g. --set-threads or --set-resources on the command line)")
    per_gpu = Request("gpu", 1, 4, 96, "benchmark_pytorch cpus_per_gpu: 24 x 4 GPU(s)")
    assert "no node with 4 GPUs of this Slurm cluster has more than 64" in (
        slurm_nodes.refusal([per_gpu], NODES))
    assert slurm_nodes.refusal([Request("cpu", 1, 0, 128, "x")], NODES) is None
    assert slurm_nodes.refusal([asked], [Node("unknown", 0, 0)]) is None
    # Two nodes with 4 GPUs and 64 CPUs: a two-node cell asking 96 CPUs on each has none.
    assert "cpus_per_gpu: 24 x 4" in slurm_nodes.refusal(
        [Request("two", 2, 4, 96, "benchmark_pytorch cpus_per_gpu: 24 x 4 GPU(s)")], NODES)


def test_job_cpus_follow_the_profile_settings_of_the_rule():
    """set-threads and set-resources as Snakemake holds them (Resource objects) become
    plain values; a GPU cell asks cpus_per_gpu per GPU where given, else its threads."""
    from snakemake.resources import Resource

    settings = support.rule_settings(
        {"benchmark_pytorch": Resource("_cores", 16)},
        {"benchmark_pytorch": {"runtime": Resource("runtime", 120),
                               "cpus_per_gpu": Resource("cpus_per_gpu", 8),
                               "mem_mb": Resource("mem_mb", lambda wildcards: 1)}},
        "benchmark_pytorch")
    assert settings == support.RuleSettings(16, {"runtime": 120, "cpus_per_gpu": 8})
    assert support.rule_settings({}, {}, "benchmark_mxnet") == support.RuleSettings()
    gpu, cpu = study.expand_config({"studies": {
        "s": {"grid": {"model": "resnet50", "device": ["gpu", "cpu"], "num_gpus": 2}}}})
    assert support.job_cpus(gpu, "benchmark_pytorch", 16, settings) == (
        16, "benchmark_pytorch cpus_per_gpu: 8 x 2 GPU(s)")
    assert support.job_cpus(cpu, "benchmark_pytorch", 16, settings) == (
        16, "benchmark_pytorch threads: 16")
    assert support.job_cpus(gpu, "benchmark_pytorch", 12, support.RuleSettings()) == (
        12, "benchmark_pytorch threads: 12")
    with pytest.raises(support.WorkflowConfigError, match="cpus_per_gpu: 8 x 2 GPU"):
        support.check_cluster_nodes(
            [gpu, cpu], [Node("n", 4, 12)],
            lambda cell: support.job_cpus(cell, "benchmark_pytorch", 12, settings))
