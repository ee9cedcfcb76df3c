"""Cells no node set of a Slurm cluster can hold, refused before submission (sinfo).

The real sinfo of a running Slurm is used by tests/test_slurm.py; these test the parsing
of its output and the check."""

import subprocess

import pytest

from dlbench import slurm_nodes, study
from dlbench import workflow_support as support
from dlbench.slurm_nodes import Limits, Node, Request


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


def test_nodes_in_several_partitions_count_once_with_all_their_partitions():
    out = ("n1|gpu:4|64|512000|gpu|2-00:00:00\nn1|gpu:4|64|512000|all*|infinite\n"
           "n2|(null)|32|N/A|cpu|30:00\n\nbroken line\n")
    assert slurm_nodes.parse(out) == [
        Node("n1", 4, 64, 512000, {"gpu": 2880, "all": None}),
        Node("n2", 0, 32, 0, {"cpu": 30})]


@pytest.mark.parametrize(("text", "minutes"), [
    ("infinite", None), ("UNLIMITED", None), ("n/a", None), ("", None), ("30:00", 30),
    ("4:00:00", 240), ("2-00:00:00", 2880), ("1-12:30:00", 2190), ("90", 90),
    ("2-4", 3120), ("2-4:30", 3150), ("1:2:3:4", None), ("x-1:00", None)])
def test_time_limits_as_sinfo_prints_them(text, minutes):
    assert slurm_nodes.time_limit_minutes(text) == minutes


def test_no_answer_from_sinfo_checks_nothing():
    def failing(argv):
        raise subprocess.CalledProcessError(1, argv, "", "sinfo: fatal: no config")

    assert slurm_nodes.read_nodes(failing) is None
    assert slurm_nodes.read_nodes(lambda argv: "") is None
    asked = []
    assert slurm_nodes.read_nodes(
        lambda argv: asked.append(argv) or "a|gpu:2|8|16000|debug*|infinite\n") == [
            Node("a", 2, 8, 16000, {"debug": None})]
    assert asked == [slurm_nodes.SINFO]


NODES = [Node("g1", 4, 64), Node("g2", 4, 64), Node("c1", 0, 128)]

# Where a refusal says to change a setting: the profile, not the command line, whose
# --set-resources (or --set-threads, --default-resources) replaces the profile's whole
# entry and silently drops every other setting in it (cpus_per_gpu, runtime, partition).
LOWER_CPUS = (
    "(lower it in the profile's set-threads or set-resources, in a copy of the profile: on "
    "the command line, --set-threads or --set-resources would replace the profile's whole "
    "entry, every rule's other settings in it)")
LOWER_MEMORY = (
    "(lower it in the profile's set-resources or default-resources, in a copy of the "
    "profile: on the command line, --set-resources or --default-resources would replace "
    "the profile's whole entry, every rule's other settings in it)")


def test_refusal_names_the_study_and_the_field():
    assert slurm_nodes.refusal([Request("s", 2, 4), Request("t", 3, 0)], NODES) is None
    assert slurm_nodes.refusal([Request("big", 1, 8)], NODES) == (
        "study 'big': num_gpus: 8 GPUs on a node, but no node of this Slurm cluster has "
        "more than 4 (sinfo); Slurm would refuse the job")
    assert slurm_nodes.refusal([Request("wide", 3, 2)], NODES) == (
        "study 'wide': num_nodes: 3 nodes with 2 GPUs each, but this Slurm cluster has 2 "
        "such nodes (sinfo); Slurm would refuse the job")


def test_every_refused_job_is_counted_with_its_study_beside_the_first():
    """A run that would be refused for several job shapes says so at once: the worst is
    named, the others counted with their studies, so that one edit fixes them all."""
    requests = slurm_nodes.distinct([Request("big", 1, 8), Request("ok", 1, 2),
                                     Request("wide", 3, 2), Request("big", 1, 16)])
    assert slurm_nodes.refusal(requests, NODES) == (
        "study 'big': num_gpus: 16 GPUs on a node, but no node of this Slurm cluster has "
        "more than 4 (sinfo); Slurm would refuse the job (and 2 other job shapes would be "
        "refused too, of studies 'big', 'wide')")
    assert slurm_nodes.refusal(requests[:2], NODES).endswith(
        "(and 1 other job shape would be refused too, of study 'big')")


def test_a_cpu_cell_on_too_few_nodes_is_refused_without_a_gpu_phrase_in_the_singular():
    """A CPU cell asks for no GPU: its refusal counts nodes alone, and one node is a node."""
    assert slurm_nodes.refusal([Request("cpu", 2, 0)], [Node("n1", 0, 8)]) == (
        "study 'cpu': num_nodes: 2 nodes, but this Slurm cluster has 1 such node (sinfo); "
        "Slurm would refuse the job")
    assert slurm_nodes.refusal([Request("gpu", 2, 1)], [Node("n1", 1, 8)]) == (
        "study 'gpu': num_nodes: 2 nodes with 1 GPU each, but this Slurm cluster has 1 such "
        "node (sinfo); Slurm would refuse the job")


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
        f"ever {LOWER_CPUS}")
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
            lambda cell: support.job_request(cell, "benchmark_pytorch", 12, settings))


PARTITIONED = [Node("g1", 4, 64, 512000, {"gpu": 2880}),
               Node("g2", 4, 64, 256000, {"gpu": 2880}),
               Node("c1", 0, 128, 1024000, {"cpu": 60, "all": None}),
               Node("c2", 0, 128, 0, {"cpu": 60})]


def test_a_job_asking_more_memory_on_a_node_than_any_node_has_is_refused():
    """sbatch refuses --mem above every node's memory ("Memory specification can not be
    satisfied"); the line names the setting. Nodes whose memory sinfo did not give fit."""
    fits = Request("s", 2, 4, 16, "t", 256000, "benchmark_pytorch mem_mb: 256000")
    assert slurm_nodes.refusal([fits], PARTITIONED) is None
    # Only one node with 4 GPUs has 300 GB: a two-node cell has not two of them.
    wide = Request("wide", 2, 4, 16, "t", 300000, "default-resources mem_mb: 300000")
    assert slurm_nodes.refusal([wide], PARTITIONED) == (
        "study 'wide': num_nodes: 2 nodes with 4 GPUs each, but this Slurm cluster has 1 "
        "such node (sinfo); Slurm would refuse the job")
    fat = Request("fat", 1, 4, 16, "t", 600000, "benchmark_pytorch mem_mb: 600000")
    assert slurm_nodes.refusal([fat], PARTITIONED) == (
        "study 'fat': benchmark_pytorch mem_mb: 600000 asks 600000 MB of memory on a node, "
        "but no node with 4 GPUs of this Slurm cluster has more than 512000 MB (sinfo); "
        f"Slurm would refuse the job {LOWER_MEMORY}")
    # c2's memory is unknown: a CPU job of any size may go there.
    assert slurm_nodes.refusal([Request("cpu", 1, 0, 8, "t", 10**7, "m")], PARTITIONED) is None


def test_a_partition_the_cluster_lacks_is_refused_and_a_named_one_limits_the_nodes():
    """sbatch refuses an unknown partition ("invalid partition specified"); a job in a named
    partition can only have that partition's nodes. A cluster whose sinfo names no
    partition checks none."""
    assert slurm_nodes.refusal(
        [Request("s", 1, 1, partitions=("gpu", "big"), partition_from="benchmark_pytorch "
                 "slurm_partition")], PARTITIONED) == (
        "study 's': benchmark_pytorch slurm_partition asks for partition 'big', but this "
        "Slurm cluster has no such partition (sinfo lists all, cpu, gpu); Slurm would refuse "
        "the job")
    assert slurm_nodes.refusal([Request("s", 1, 2, partitions=("cpu",))], PARTITIONED) == (
        "study 's': num_gpus: 2 GPUs on a node, but no node of partition 'cpu' has more "
        "than 0 (sinfo); Slurm would refuse the job")
    assert slurm_nodes.refusal(
        [Request("s", 2, 0, 8, "t", 600000, "m", ("all",))], PARTITIONED) == (
        "study 's': num_nodes: 2 nodes, but partition 'all' has 1 such node (sinfo); Slurm "
        "would refuse the job")
    assert slurm_nodes.refusal([Request("s", 2, 0, partitions=("cpu", "gpu"))],
                               PARTITIONED) is None
    assert slurm_nodes.refusal([Request("s", 1, 0, partitions=("x",))], NODES) is None


def test_a_job_asking_more_time_than_its_partitions_allow_is_refused():
    """A job whose --time is above every partition's limit it may run in is queued for
    ever (reason PartitionTimeLimit): refused, naming the setting. A partition without a
    limit takes any job; a cluster whose sinfo names no partition checks none."""
    def asking(minutes, *partitions, gpus=0):
        return Request("s", 1, gpus, partitions=partitions, partition_from="p",
                       minutes=minutes, minutes_from="benchmark_pytorch runtime")

    assert slurm_nodes.refusal([asking(10**6)], PARTITIONED) is None  # 'all' has no limit
    assert slurm_nodes.refusal([asking(120, "cpu")], PARTITIONED) == (
        "study 's': benchmark_pytorch runtime asks 120 minutes, but partition 'cpu' allows "
        f"at most 60 (sinfo); the job would wait in the queue for ever {LOWER_MEMORY}")
    # A GPU job can only go to 'gpu' nodes, whose partition allows two days.
    assert slurm_nodes.refusal([asking(2880, gpus=1)], PARTITIONED) is None
    assert slurm_nodes.refusal([asking(2881, gpus=1)], PARTITIONED) == (
        "study 's': benchmark_pytorch runtime asks 2881 minutes, but no partition with nodes "
        "of 1 GPU of this Slurm cluster allows more than 2880 (sinfo); the job would wait "
        f"in the queue for ever {LOWER_MEMORY}")
    limited = [Node("a", 0, 8, 0, {"short": 30}), Node("b", 0, 8, 0, {"long": 240})]
    assert "no partition of this Slurm cluster allows more than 240 (sinfo)" in (
        slurm_nodes.refusal([asking(241)], limited))
    assert slurm_nodes.refusal([asking(241)], NODES) is None


def test_the_memory_and_partition_of_a_job_come_from_the_rule_else_the_defaults():
    """As Snakemake gives them to a job: set-resources of the rule win over
    default-resources; the Slurm executor asks --mem-per-cpu before --mem. A partition is
    read as written (Snakemake holds text as an expression), never evaluated."""
    from snakemake.resources import Resource

    def text(name, raw):
        return Resource.from_cli_expression(name, raw)

    defaults = {"mem_mb": Resource("mem_mb", 16000), "runtime": Resource("runtime", 60),
                "tmpdir": text("tmpdir", "system_tmpdir"),
                "slurm_partition": text("slurm_partition", "batch")}
    (cpu,) = study.expand_config({"studies": {"s": {"grid": {"model": "resnet50",
                                                             "device": "cpu"}}}})
    plain = support.rule_settings({}, {}, "benchmark_pytorch", defaults)
    assert plain.defaults == {"mem_mb": 16000, "runtime": 60}
    assert support.job_request(cpu, "benchmark_pytorch", 16, plain) == Request(
        "s", 1, 0, 16, "benchmark_pytorch threads: 16", 16000,
        "default-resources mem_mb: 16000", ("batch",), "default-resources slurm_partition",
        60, "default-resources runtime")

    own = support.rule_settings({}, {"benchmark_pytorch": {
        "mem_mb": Resource("mem_mb", 64000),
        "slurm_partition": text("slurm_partition", "'gpu,gpu-long'")}},
        "benchmark_pytorch", defaults)
    request = support.job_request(cpu, "benchmark_pytorch", 16, own)
    assert (request.mem_mb, request.mem_from) == (64000, "benchmark_pytorch mem_mb: 64000")
    assert request.partitions == ("gpu", "gpu-long")
    assert request.partition_from == "benchmark_pytorch slurm_partition"
    assert (request.minutes, request.minutes_from) == (60, "default-resources runtime")

    per_cpu = support.rule_settings({}, {"benchmark_pytorch": {
        "mem_mb_per_cpu": Resource("mem_mb_per_cpu", 4000)}}, "benchmark_pytorch", defaults)
    assert support.job_memory("benchmark_pytorch", 16, per_cpu) == (
        64000, "benchmark_pytorch mem_mb_per_cpu: 4000 x 16 CPUs")
    assert support.job_memory("benchmark_pytorch", 16, support.RuleSettings()) == (0, "")
    (gpu,) = study.expand_config({"studies": {"g": {"grid": {"model": "resnet50",
                                                             "num_gpus": 2}}}})
    site = support.rule_settings({}, {}, "benchmark_pytorch",
                                 {"cpus_per_gpu": Resource("cpus_per_gpu", 12)})
    assert support.job_cpus(gpu, "benchmark_pytorch", 16, site) == (
        24, "default-resources cpus_per_gpu: 12 x 2 GPU(s)")
    # An expression is not evaluated here: nothing is checked.
    assert support.partition_setting(text("slurm_partition", "'gpu' if attempt else 'x'")) == ()
    assert support.partition_setting(None) == () and support.partition_setting("a") == ("a",)


SCONTROL = (
    "PartitionName=gpu AllowGroups=ALL Default=NO MaxNodes=2 MaxTime=2-00:00:00 MinNodes=0 "
    "MaxCPUsPerNode=UNLIMITED Nodes=g[1-2] State=UP TotalCPUs=128 DefMemPerNode=UNLIMITED "
    "MaxMemPerNode=256000 TRES=cpu=128,mem=750G,node=2\n"
    "PartitionName=cpu Default=YES MaxNodes=UNLIMITED MinNodes=1 MaxCPUsPerNode=32 "
    "Nodes=c[1-2] MaxMemPerCPU=4000 TRES=cpu=256\n"
    "PartitionName=all MaxNodes=UNLIMITED MinNodes=2 MaxCPUsPerNode=UNLIMITED "
    "MaxMemPerNode=1T\n\nno partition here\n")
LIMITS = {"gpu": Limits(max_nodes=2, max_mem_per_node_mb=256000),
          "cpu": Limits(min_nodes=1, max_cpus_per_node=32),
          "all": Limits(min_nodes=2, max_mem_per_node_mb=1024 ** 2)}


def test_partition_limits_as_scontrol_prints_them():
    """One line a partition; UNLIMITED is no limit; MaxMemPerCPU is not read (Slurm raises
    such a job's CPUs instead of holding it)."""
    assert slurm_nodes.parse_partitions(SCONTROL) == LIMITS
    asked = []
    assert slurm_nodes.read_partition_limits(
        lambda argv: asked.append(argv) or SCONTROL) == LIMITS
    assert asked == [slurm_nodes.SCONTROL_PARTITIONS]

    def failing(argv):
        raise subprocess.CalledProcessError(1, argv, "", "scontrol: error: no controller")

    assert slurm_nodes.read_partition_limits(failing) == {}


def test_a_job_beyond_every_partition_limit_is_refused_naming_the_setting_and_the_limit():
    """Measured on a real Slurm: a job above a partition's MaxNodes, MaxCPUsPerNode or
    MaxMemPerNode, or below its MinNodes, is accepted and pends for ever
    (PartitionNodeLimit, PartitionConfig, MaxMemPerLimit). Refused where no partition
    that could run it takes it; one that does, or one scontrol did not describe, is
    enough."""
    def check(request, limits=LIMITS):
        return slurm_nodes.refusal([request], PARTITIONED, limits)

    wait = "; the job would wait in the queue for ever"
    assert check(Request("s", 2, 4, partitions=("gpu",))) is None
    assert check(Request("s", 1, 4, 16, "t", 300000, "benchmark_pytorch mem_mb: 300000",
                         ("gpu",))) == (
        "study 's': benchmark_pytorch mem_mb: 300000 asks 300000 MB of memory on a node, but "
        "partition 'gpu' allows at most 256000 (MaxMemPerNode, scontrol show partition)"
        f"{wait} {LOWER_MEMORY}")
    # 100 CPUs, on c1 or c2 only: 'cpu' allows 32 on a node, 'all' takes only jobs of two
    # nodes or more.
    fat = Request("s", 1, 0, 100, "benchmark_pytorch threads: 100")
    assert check(fat) == (
        "study 's': num_nodes: 1, but partition 'all' takes at least 2 nodes "
        "(MinNodes, scontrol show partition), nor does any other partition take it ('cpu' "
        f"MaxCPUsPerNode 32){wait}")
    assert check(Request("s", 1, 0, 100, "benchmark_pytorch threads: 100",
                         partitions=("cpu",), partition_from="p")) == (
        "study 's': benchmark_pytorch threads: 100 asks 100 CPUs on a node, but partition "
        "'cpu' allows at most 32 (MaxCPUsPerNode, scontrol show partition)"
        f"{wait} {LOWER_CPUS}")
    assert check(Request("s", 2, 0, 100, "t")) is None  # 'all' takes two nodes
    # Two hours: not in 'cpu' (an hour at most), and 'all' wants two nodes.
    assert check(Request("s", 1, 0, 100, "t", minutes=120, minutes_from="r")) == (
        "study 's': num_nodes: 1, but partition 'all' takes at least 2 nodes "
        f"(MinNodes, scontrol show partition){wait}")
    assert check(fat, {**LIMITS, "all": Limits()}) is None
    assert check(fat, {"cpu": LIMITS["cpu"]}) is None  # 'all' not described: not checked
    assert check(fat, {}) is None
    assert check(Request("s", 3, 4, partitions=("gpu",))) is not None  # the nodes first
    with pytest.raises(support.WorkflowConfigError,
                       match="num_nodes: 3, but partition 'gpu' allows at most 2 nodes .MaxNodes"):
        support.check_cluster_nodes(
            study.expand_config({"studies": {"s": {"grid": {
                "model": "resnet50", "num_gpus": 4, "num_nodes": 3}}}}),
            PARTITIONED * 2, limits={"gpu": LIMITS["gpu"]})
