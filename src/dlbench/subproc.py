"""Run a child process, pass its output through, and keep its last stderr lines."""

from __future__ import annotations

import collections
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence


def run_tee(cmd: Sequence[str], env: Mapping[str, str] | None = None,
            keep: int = 40) -> tuple[int, list[str]]:
    """Run ``cmd`` (an argument list, never a shell string); copy its stdout and stderr to
    ours as they come and return the exit code and the last ``keep`` stderr lines."""
    try:
        proc = subprocess.Popen(list(cmd), env=dict(env) if env is not None else None,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                errors="replace")
    except OSError as exc:
        return 127, [f"cannot start {cmd[0]}: {exc.strerror}"]
    tail: collections.deque[str] = collections.deque(maxlen=keep)

    def pump(stream, sink, remember: bool) -> None:
        for line in stream:
            sink.write(line)
            sink.flush()
            if remember:
                tail.append(line.rstrip("\n"))

    threads = [threading.Thread(target=pump, args=(proc.stdout, sys.stdout, False)),
               threading.Thread(target=pump, args=(proc.stderr, sys.stderr, True))]
    for t in threads:
        t.start()
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        raise
    finally:
        for t in threads:
            t.join()
    return rc, list(tail)


def last_error_line(lines: Sequence[str]) -> str:
    """The most telling line of a failed child's stderr: the last non-empty one."""
    for line in reversed(lines):
        if line.strip():
            return line.strip()
    return ""
