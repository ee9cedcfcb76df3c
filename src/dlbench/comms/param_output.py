"""PARAM comms.py's result table, its ``COMMS-RES`` lines, as a direct run of the
collectives prints it, so that the scripts and dashboards reading PARAM's output read
dlbench's: a header, then one line per message size with its total size, elements per
rank, time percentiles, algorithm and bus bandwidth (``--tag`` in the line's name, as
PARAM's). The figures are dlbench's: each iteration's time is the slowest rank's, and
the percentiles are over the measured iterations (PARAM's are over the ranks' mean
times). Point-to-point tests keep their own measurements (latency and both bandwidths),
which PARAM's ping, ping-pong table does not hold. An incast's or multicast's total size is
every message it moves (the peers' messages to the root, or the root's to its peers), the
bytes its bandwidth is of: PARAM's for incast; PARAM counts a multicast's one message."""

from __future__ import annotations

from collections.abc import Sequence

from dlbench.stats import percentile

_HEADER = "{:>40}{:>18}{:>18}{:>12}{:>12}{:>12}{:>12}{:>15}{:>12}{:>18}"
_LINE = "\tCOMMS-RES-{}-{}{}{:>18}{:>18}{:>18}{:>12}{:>12}{:>12}{:>12}{:>15}{:>12}{:>20}"
# PARAM counts the elements of one rank's piece for these (the others: the whole buffer).
_PER_RANK = frozenset({"all_to_all", "all_to_allv", "reduce_scatter", "all_gather"})


def header() -> str:
    return "\n\tCOMMS-RES" + _HEADER.format(
        "total-size (B)", "nElementsPerRank", "Time(us):p50", "p75", "p95", "Min", "Max",
        "AlgBW(GB/s)", "BusBW(GB/s)", "TotalTime(us):p50")


def elements_per_rank(collective: str, elements: int, ranks: int) -> int:
    return elements // ranks if collective in _PER_RANK else elements


def line(collective: str, data_type: str, tag: str, size: int, elements: int, ranks: int,
         times_s: Sequence[float], algbw_gbps: float, busbw_gbps: float,
         total_s: float = 0.0) -> str:
    """One size's line; ``total_s``: an overlapped iteration's median time, collectives
    and computation (PARAM's TotalTime, 0 without a compute kernel)."""
    us = sorted(t * 1e6 for t in times_s)
    return _LINE.format(
        collective, data_type, f"-{tag}" if tag else "", size,
        f"{elements_per_rank(collective, elements, ranks):d}",
        *(f"{v:.1f}" for v in (percentile(us, 50), percentile(us, 75), percentile(us, 95),
                               us[0], us[-1])),
        f"{algbw_gbps:.3f}", f"{busbw_gbps:.3f}", f"{total_s * 1e6:.1f}")
