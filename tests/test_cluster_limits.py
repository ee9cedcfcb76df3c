"""What a cell's cluster limits say: where a timed-out cell's limit came from, and why
dlbench's hints point to the profile rather than to --set-resources on the command line."""

from pathlib import Path

from dlbench import launch, slurm_nodes, subproc

ROOT = Path(__file__).resolve().parents[1]


def test_a_timed_out_cell_names_both_sources_of_its_limit():
    """The launcher is given one limit: the study's timeout_s, or on a cluster its job's
    runtime less a margin where shorter. It cannot tell which, so it names both, not
    timeout_s alone (a row 'timed out after 1 s (timeout_s)' blamed a setting of an hour)."""
    line = launch.runner_failure(subproc.Ran(-9, timed_out=True), 60.0, "python -m r")
    assert line == ("timed out after 60 s (timeout_s, or its cluster job's runtime less a "
                    "margin where shorter); the runner's process group was killed")


def test_set_resources_on_the_command_line_replaces_the_profiles_whole_entry(monkeypatch):
    """Why change_hint says to edit the profile: with Snakemake's own parser, one
    --set-resources on the command line leaves none of the profile's set-resources (not
    cpus_per_gpu nor runtime of the same rule, nor any other rule's)."""
    from snakemake.cli import parse_args

    monkeypatch.chdir(ROOT)
    profile = ["--profile", "profiles/slurm", "--workflow-profile", "none"]
    _, args = parse_args(profile)
    assert set(args.set_resources["benchmark_pytorch"]) == {"runtime", "cpus_per_gpu"}
    _, args = parse_args([*profile, "--set-resources", "benchmark_pytorch:runtime=30"])
    assert list(args.set_resources) == ["benchmark_pytorch"]
    assert set(args.set_resources["benchmark_pytorch"]) == {"runtime"}
    assert "--set-resources would replace the profile's whole entry" in (
        slurm_nodes.change_hint("raise it", "set-resources"))
