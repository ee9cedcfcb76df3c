"""What shows that SIGKILL ended a process of a cell (dlbench.oom_kills.sigkill_shown), in
the lines torch 2.x prints: its DataLoader's and torch.distributed.elastic's (torchrun's).
test_launch_faults makes torch print them for real; here are their shapes, copied from
such runs, and the lines that must not count."""

from dlbench import oom_kills

DATALOADER_TRACEBACK = [
    "RuntimeError: DataLoader worker (pid 13298) is killed by signal: Killed. ",
    "",
    "The above exception was the direct cause of the following exception:",
    "",
    "Traceback (most recent call last):",
    '  File "/opt/dlbench/harness.py", line 80, in timed_loop',
    "RuntimeError: DataLoader worker (pid(s) 13298) exited unexpectedly",
]


def torchrun_report(root_exitcode: int, root_signal: str, root_traceback: str,
                    other_exitcode: int, other_signal: str) -> list[str]:
    """torchrun's failure report: rank 0 stopped by torchrun itself (under "Failures:"),
    rank 1 the first to fail (its "Root Cause")."""
    return [
        "E1127 22:31:42.667000 13590 torch/distributed/elastic/multiprocessing/api.py:1002] "
        f"failed (exitcode: {root_exitcode}) local_rank: 1 (pid: 13484) of binary: "
        "/env/bin/python",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "=======================================================",
        "rank.py FAILED",
        "-------------------------------------------------------",
        "Failures:",
        "[1]:",
        "  time      : 2026-11-27_22:31:29",
        "  host      : localhost",
        "  rank      : 0 (local_rank: 0)",
        f"  exitcode  : {other_exitcode} (pid: 13483)  ({other_signal})",
        "  error_file: <N/A>",
        f"  traceback : Signal {-other_exitcode} ({other_signal}) received by PID 13483",
        "-------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2026-11-27_22:31:29",
        "  host      : localhost",
        "  rank      : 1 (local_rank: 1)",
        f"  exitcode  : {root_exitcode} (pid: 13484)  {root_signal}",
        "  error_file: <N/A>",
        f"  traceback : {root_traceback}",
        "=======================================================",
    ]


def test_a_dataloader_worker_killed_by_sigkill_is_shown_from_the_traceback():
    assert (oom_kills.sigkill_shown(DATALOADER_TRACEBACK)
            == "DataLoader worker (pid 13298) is killed by signal: Killed.")


def test_a_dataloader_worker_ended_otherwise_is_not():
    bus = ["RuntimeError: DataLoader worker (pid 7) is killed by signal: Bus error. It is "
           "possible that dataloader's workers are out of shared memory. Please try to "
           "raise your shared memory limit."]
    exited = ["RuntimeError: DataLoader worker (pid 7) exited unexpectedly with exit code 1. "
              "Details are lost due to multiprocessing. Rerunning with num_workers=0 may "
              "give better error trace."]
    bare = ["RuntimeError: DataLoader worker (pid(s) 7) exited unexpectedly"]
    assert oom_kills.sigkill_shown(bus) is None
    assert oom_kills.sigkill_shown(exited) is None
    assert oom_kills.sigkill_shown(bare) is None


def test_a_torchrun_rank_killed_by_sigkill_is_shown_from_the_root_cause():
    lines = torchrun_report(-9, "(SIGKILL)", "Signal 9 (SIGKILL) received by PID 13484",
                            -15, "SIGTERM")
    assert (oom_kills.sigkill_shown(lines)
            == "torchrun's first failure: Signal 9 (SIGKILL) received by PID 13484")
    # The agent's log line alone (the report cut off) still shows it.
    assert oom_kills.sigkill_shown(lines[:1]) == (
        "torchrun: failed (exitcode: -9) local_rank: 1 (pid: 13484)")


def test_a_rank_that_torchrun_itself_killed_does_not_count():
    """The first failure an exception (exit code 1); torchrun then stops the others, with
    SIGKILL once its grace period is over: that SIGKILL is torchrun's, not the kernel's."""
    lines = torchrun_report(1, "", "To enable traceback see: "
                            "https://pytorch.org/docs/stable/elastic/errors.html", -9, "SIGKILL")
    assert oom_kills.sigkill_shown(lines) is None


def test_the_oom_message_keeps_the_failures_line_and_says_the_count_rose():
    message = oom_kills.oom_message("RuntimeError: DataLoader worker (pid(s) 7) exited "
                                    "unexpectedly",
                                    "DataLoader worker (pid 7) is killed by signal: Killed.")
    assert message.startswith("RuntimeError: DataLoader worker (pid(s) 7) exited unexpectedly "
                              "(DataLoader worker (pid 7) is killed by signal: Killed.)")
    assert message.endswith("the memory cgroup's oom_kill count rose during the cell")
    said = oom_kills.oom_message("python -m dlbench.pytorch: killed by SIGKILL (Killed)",
                                 "killed by SIGKILL (Killed)")
    assert said.count("killed by SIGKILL (Killed)") == 1
