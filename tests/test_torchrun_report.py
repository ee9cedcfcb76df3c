"""torchrun's failure report (dlbench.torchrun_report), read by the runner for a failed
row's words and by the launcher for whether SIGKILL ended the rank that failed first:
both read the same block, the root cause, and the launcher's side imports no framework.
The report's shape is torch 2.x's, copied from runs (tests/test_launch_faults.py makes
torchrun print it for real); tests/test_multinode.py and tests/test_oom_kills.py check
the words each side makes of it."""

from __future__ import annotations

import subprocess
import sys

from dlbench import oom_kills, torchrun_report


def node_report(host: str, root_rank: int, root_exit: int, other_exit: int) -> list[str]:
    """One node's torchrun report: rank ``root_rank`` failed first, the other one was
    stopped by torchrun."""
    def block(index: int, rank: int, code: int, pid: int) -> list[str]:
        name = {-9: "SIGKILL", -15: "SIGTERM"}.get(code)
        return [f"[{index}]:", "  time      : 2026-11-27_22:31:29", f"  host      : {host}",
                f"  rank      : {rank} (local_rank: {rank % 2})",
                f"  exitcode  : {code} (pid: {pid})" + (f"  ({name})" if name else ""),
                "  error_file: <N/A>",
                f"  traceback : Signal {-code} ({name}) received by PID {pid}" if name
                else "  traceback : To enable traceback see: https://pytorch.org/docs/"]
    other_rank = root_rank ^ 1
    return ["=" * 55, "rank.py FAILED", "-" * 55, "Failures:",
            *block(1, other_rank, other_exit, 100 + other_rank), "-" * 55,
            torchrun_report.ROOT_CAUSE, *block(0, root_rank, root_exit, 100 + root_rank),
            "=" * 55]


def test_runner_and_launcher_read_the_same_root_cause_of_two_nodes_reports():
    """Two nodes' reports: the first node's root cause (rank 1, SIGKILL) is what the row
    says and what shows the SIGKILL; the ranks under "Failures:" (SIGTERM here, and the
    other node's SIGKILL sent by torchrun) are not."""
    lines = [*node_report("node1", 1, -9, -15), *node_report("node2", 2, 1, -9)]
    assert torchrun_report.first_failure(lines) == \
        "rank 1 on node1: exit code -9 (pid: 101) (SIGKILL)"
    assert torchrun_report.first_failure_sigkill(lines) == \
        "torchrun's first failure: Signal 9 (SIGKILL) received by PID 101"
    assert oom_kills.sigkill_shown(lines) == torchrun_report.first_failure_sigkill(lines)


def test_a_root_cause_that_is_no_sigkill_shows_none_though_torchrun_killed_a_rank():
    lines = node_report("node1", 0, 1, -9)  # torchrun's own SIGKILL after its grace period
    assert torchrun_report.first_failure(lines) == "rank 0 on node1: exit code 1 (pid: 100)"
    assert torchrun_report.first_failure_sigkill(lines) is None


def test_a_report_cut_off_at_its_root_cause_names_no_rank_torchrun_stopped():
    lines = node_report("node1", 1, -9, -15)
    cut = lines[:lines.index(torchrun_report.ROOT_CAUSE) + 1]
    assert torchrun_report.first_failure(cut) is None
    assert torchrun_report.first_failure_sigkill(cut) is None


def test_a_rendezvous_timeout_is_named_before_any_block():
    lines = ["torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError",
             *node_report("node1", 1, -9, -15)]
    assert torchrun_report.first_failure(lines, 300) == \
        "the nodes' rendezvous timed out after 300 s: a node did not join"


def test_the_report_is_read_without_importing_a_framework():
    """The launcher reads it (through oom_kills) and imports no framework."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys; import dlbench.oom_kills, dlbench.torchrun_report; "
         "print(sorted({'torch', 'mxnet'} & set(sys.modules)))"],
        capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
