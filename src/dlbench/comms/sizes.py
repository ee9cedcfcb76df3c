"""Message sizes and bandwidths of collectives, as nccl-tests and PARAM's comms.py define
them. Framework-free: the driver and the report use it too.

A measurement's size is the largest buffer a rank touches: the tensor of all_reduce,
broadcast and reduce, the gathered output of all_gather and gather (on the root), the input
that reduce_scatter and scatter (from the root) split, the buffer all_to_all exchanges
(all_to_allv: each rank's input, or with only an output split given, its output).
Algorithm bandwidth is that size over the time; bus bandwidth scales it by the share of
the data each rank must move over its link, so that it compares with the link's peak
whatever the rank count (nccl-tests' PERFORMANCE.md): 2(n-1)/n for all_reduce, (n-1)/n for
all_gather, reduce_scatter, all_to_all(v), gather and scatter, 1 for broadcast and reduce.

all_to_allv exchanges blocks of uneven sizes. Without splits its blocks are even (as
PARAM's), over the same sweep as all_to_all; PARAM's ``--i`` (in_split) or ``--o``
(out_split) gives one exchange instead, the same list on every rank, as PARAM's command
line does: with an input split, rank r sends in_split[j] elements to rank j, so rank j
receives in_split[j] from each rank; with an output split, rank r receives out_split[s]
from rank s, so rank s sends out_split[s] to each (``exchange``).
PARAM's incast and multicast move one message of the size between the root and each of
its peers, all at once: their measured bytes are those crossing the root's link (the
message times the peers), factor 1.
Point-to-point tests (``pt2pt``, PARAM's ``--pt2pt``) move one message of the size
between two ranks: factor 1. Which ranks: the pattern's pairs, or those PARAM's
``--src-ranks`` and ``--dst-ranks`` name (``pt2pt_pairs``).
"""

from __future__ import annotations

import re

from dlbench.cli import listed_numbers_problem

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_to_allv",
               "broadcast", "reduce", "gather", "scatter", "incast", "multicast", "pt2pt")
# PARAM's many-to-one and one-to-many patterns of point-to-point messages: every sender
# sends the root one message at once (incast: src_ranks, else every rank), or the root
# sends one to every receiver (multicast: dst_ranks, else every rank).
FAN = frozenset({"incast", "multicast"})
# PARAM's --pt2pt patterns: one2one, rank 0 with rank 1; pairwise, every rank of the first
# half with its counterpart in the second (rank i with i + n/2: on two nodes of as many
# GPUs, each GPU with the same GPU of the other node), all pairs at once. PARAM's pairwise
# without --src-ranks/--dst-ranks is rank 0 with rank 1 (the runner says so in a line).
PT2PT_PATTERNS = ("one2one", "pairwise")
# Collectives with a root (PARAM's --root): the rank that broadcasts or scatters, or
# receives the sum or the gathered pieces.
ROOTED = frozenset({"broadcast", "reduce", "gather", "scatter", *FAN})
DATA_TYPES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int32": 4, "int8": 1}
# Collectives whose buffer is split into one piece per rank: its elements are a multiple
# of the rank count.
SPLIT = frozenset({"all_gather", "reduce_scatter", "all_to_all", "all_to_allv", "gather",
                   "scatter"})
# The collective whose blocks may differ in size (PARAM's --i and --o).
UNEVEN = "all_to_allv"
# Of those, the ones whose input is one rank's piece of the measured buffer (gathered into
# it), and the ones whose output is (scattered from it).
PIECE_IN = frozenset({"all_gather", "gather"})
PIECE_OUT = frozenset({"reduce_scatter", "scatter"})


def bus_factor(collective: str, ranks: int) -> float:
    """Bus bandwidth over algorithm bandwidth for ``ranks`` processes."""
    if collective in ("broadcast", "reduce", "pt2pt", *FAN):
        return 1.0
    share = (ranks - 1) / ranks
    return 2 * share if collective == "all_reduce" else share


# A sweep of more sizes is a mistake (step_bytes 8 up to 256 MiB: 33 million sizes).
MAX_SIZES = 1024


# nccl-tests' and PARAM's size units (-b 8 -e 256M): binary, as theirs are.
SIZE_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
_SIZE = re.compile(r"(\d+)\s*([KMG]?)(?:I?B)?")  # matched upper-cased


def parse_size(text: str) -> int:
    """A message size as nccl-tests and PARAM's ``--b``/``--e`` write it: bytes, or a
    whole number with K, M or G (KiB, MiB, GiB; a trailing B or iB allowed)."""
    match = _SIZE.fullmatch(text.strip().upper())
    if match is None:
        raise ValueError(f"{text!r} is no size: bytes, or a whole number with K, M or G "
                         "(KiB, MiB, GiB), e.g. 256M")
    return int(match.group(1)) * SIZE_UNITS[match.group(2)]


def sweep_problem(begin: int, end: int, step_bytes: int, data_type: str) -> str | None:
    """Why a sweep with an additive step cannot run (PARAM's --sb checks); None when it
    can."""
    if step_bytes <= 0:
        return None
    element = DATA_TYPES[data_type]
    if step_bytes % element:
        return f"{step_bytes} is no multiple of {data_type}'s {element} bytes"
    count = (end - begin) // step_bytes + 1
    if count > MAX_SIZES:
        return (f"{step_bytes} gives {count:,} message sizes from {begin} to {end} bytes "
                f"(at most {MAX_SIZES:,})")
    return None


def explicit_sizes(text: str) -> list[int]:
    """PARAM's --ss: message sizes in bytes, comma-separated, each once in the order given."""
    sizes: list[int] = []
    for item in text.split(","):
        size = int(item.strip())
        if size not in sizes:
            sizes.append(size)
    return sizes


def sizes_problem(text: str) -> str | None:
    """Why a list of message sizes (PARAM's --ss) cannot run; None when it can (or is
    empty: the sweep instead)."""
    return listed_numbers_problem(text, "message size", "bytes", "1024,26214400", MAX_SIZES)


def split_problem(text: str) -> str | None:
    """Why an all_to_allv split (PARAM's --i or --o: elements per rank, comma-separated)
    cannot run; None when it can (or is empty: even blocks)."""
    if not text:
        return None
    items = [item.strip() for item in text.split(",")]
    bad = next((item for item in items if not item.isdigit()), None)
    if bad is not None:
        return (f"{bad!r} is no count of elements (whole numbers, one per rank, separated "
                "by commas: '1024,4096')")
    if not any(int(item) for item in items):
        return "every block is empty: nothing to exchange"
    return None


def split_of(text: str) -> list[int]:
    return [int(item) for item in text.split(",")] if text else []


def exchange(in_split: list[int], out_split: list[int], ranks: int
             ) -> tuple[list[list[int]], list[list[int]]]:
    """Every rank's input and output split (elements to and from each rank) of an
    all_to_allv given one list for all ranks (see the module's text); a ``ValueError``
    of one line where the lists cannot make one exchange among ``ranks``."""
    for name, split in (("in_split", in_split), ("out_split", out_split)):
        if split and len(split) != ranks:
            raise ValueError(f"{name} has {len(split)} block(s) for {ranks} process(es) "
                             "(num_gpus x num_nodes): one per rank")
    if in_split and out_split and len(set(in_split) | set(out_split)) > 1:
        raise ValueError("in_split and out_split disagree: with the same lists on every "
                         "rank, rank j receives in_split[j] from each rank, so both must be "
                         "one value repeated; give one of them")
    if in_split:
        return [list(in_split) for _ in range(ranks)], [[n] * ranks for n in in_split]
    return [[n] * ranks for n in out_split], [list(out_split) for _ in range(ranks)]


def zero_block_problem(ranks: int) -> str | None:
    """Why an all_to_allv among ``ranks`` processes cannot send a 0-byte block to the next
    rank (PARAM's --include-0B). With 2, the next rank is the only other: each would send
    everything to itself, nothing between ranks, and a bus bandwidth of nothing moved."""
    if ranks < 3:
        return ("needs 3 or more processes: each rank sends 0 bytes to the next and its "
                "blocks to the others")
    return None


def zero_block_exchange(count: int, ranks: int) -> tuple[list[list[int]], list[list[int]]]:
    """PARAM's --include-0B: a buffer of ``count`` elements where every rank i sends nothing
    to rank (i+1) mod n, count // (n-1) elements to each other rank and the rest to itself
    (so each rank receives nothing from the one before it); ValueError below 3 ranks."""
    problem = zero_block_problem(ranks)
    if problem:
        raise ValueError(problem)
    ins = []
    for i in range(ranks):
        row = [0 if j == (i + 1) % ranks else count // (ranks - 1) for j in range(ranks)]
        row[i] += count % (ranks - 1)
        ins.append(row)
    return ins, [[ins[i][j] for i in range(ranks)] for j in range(ranks)]


def even_exchange(count: int, ranks: int) -> tuple[list[list[int]], list[list[int]]]:
    """all_to_allv without splits: a buffer of ``count`` elements in even blocks."""
    blocks = [[count // ranks] * ranks for _ in range(ranks)]
    return blocks, [list(b) for b in blocks]


def measurement_name(collective: str, size: int) -> str:
    """A collective measurement's name: "<collective>|<message bytes>" (the bytes it moves
    per time may differ: a bidirectional point-to-point test's count both ways)."""
    return f"{collective}|{size}"


def message_bytes(name: str) -> int | None:
    """The message size a measurement's name holds; None for another name."""
    size = str(name).rpartition("|")[2]
    return int(size) if size.isdigit() else None


def measured_label(collective: str, pass_: str) -> str:
    """What a measurement of a collective cell measured: the collective, or a point-to-point
    cell's test ("pt2pt latency"): the report's panels and the comparison's groups."""
    return f"{collective} {pass_}" if collective == "pt2pt" else collective


def group_members(groups: int, ranks: int) -> list[list[int]]:
    """The ranks of each communicator when ``ranks`` processes are split into ``groups``
    (PARAM's --multi-comms): rank r in group r mod groups."""
    return [list(range(g, ranks, groups)) for g in range(groups)]


def groups_problem(groups: int, ranks: int) -> str | None:
    """Why ``ranks`` processes cannot be split into ``groups`` equal communicators."""
    if groups > 1 and ranks % groups:
        # Each caller says which of its flags or axes make the two counts.
        return f"{ranks} process(es) do not split into {groups} groups of one size"
    return None


def root_problem(root: int, ranks: int) -> str | None:
    """Why ``root`` cannot be the root of a collective among ``ranks`` processes."""
    if root < ranks:
        return None
    return f"{root} is no rank of {ranks} process(es): the root is one of 0 to {ranks - 1}"


# PARAM's rank list (--src-ranks, --dst-ranks): one rank, ranks separated by commas, or an
# inclusive range start:end.
_RANK_LIST = re.compile(r"^\s*(\d+\s*(,\s*\d+\s*)*|\d+\s*:\s*\d+\s*)$")


def rank_list_problem(text: str) -> str | None:
    """Why ``text`` is no rank list; None when it is (or is empty: the pattern's own)."""
    if not text:
        return None
    if not _RANK_LIST.match(text):
        return (f"{text!r} is no list of ranks (a rank, ranks separated by commas: '0,2', "
                "or a range: '0:3')")
    if not rank_list(text):
        return f"{text!r} names no rank: a range goes from its first rank up to its last"
    return None


def rank_list(text: str) -> list[int]:
    """The ranks a rank list names, in its order, each once (PARAM's parseRankList); a
    range start:end includes both ends."""
    if not text:
        return []
    if ":" in text:
        first, last = (int(v) for v in text.split(":"))
        return list(range(first, last + 1))
    return list(dict.fromkeys(int(v) for v in text.split(",")))


class PairsError(ValueError):
    """A point-to-point pattern that cannot run, and the axis that says so (``field``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def pt2pt_pairs(pattern: str, ranks: int, src: str = "", dst: str = ""
                ) -> list[tuple[int, int]]:
    """The (sender, receiver) pairs of a point-to-point pattern among ``ranks`` processes.
    Without ``src``/``dst`` (PARAM's --src-ranks, --dst-ranks): one2one, rank 0 with 1;
    pairwise, rank i with i + n/2. With either, PARAM's rules: src[i] with dst[i], rank 0
    and rank 1 where one of them is not given; one2one takes one rank each, pairwise as
    many of each, no rank in both. Raises PairsError saying what cannot run."""
    if ranks < 2:
        raise PairsError("num_gpus", f"pt2pt needs two processes or more, not {ranks}")
    for name, text in (("src_ranks", src), ("dst_ranks", dst)):
        problem = rank_list_problem(text)
        if problem:
            raise PairsError(name, problem)
    if not src and not dst:
        if pattern == "one2one":
            return [(0, 1)]
        if ranks % 2:
            raise PairsError("num_gpus", f"pt2pt pairwise pairs the processes: {ranks} is an "
                                         "odd count")
        half = ranks // 2
        return [(r, r + half) for r in range(half)]
    lists = {"src_ranks": rank_list(src) or [0], "dst_ranks": rank_list(dst) or [1]}
    for name, listed in lists.items():
        outside = [r for r in listed if r >= ranks]
        if outside:
            raise PairsError(name, f"rank {outside[0]} is no rank of {ranks} process(es) "
                                   f"(0 to {ranks - 1})")
    senders, receivers = lists.values()
    if pattern == "one2one" and (len(senders) > 1 or len(receivers) > 1):
        raise PairsError("src_ranks" if len(senders) > 1 else "dst_ranks",
                         f"pt2pt one2one pairs one rank with one: {senders} with "
                         f"{receivers} (pairwise pairs several)")
    if len(senders) != len(receivers):
        raise PairsError("dst_ranks", f"pt2pt pairwise pairs src_ranks[i] with "
                                      f"dst_ranks[i]: {len(senders)} and {len(receivers)} "
                                      "rank(s)")
    both = sorted(set(senders) & set(receivers))
    if both:
        raise PairsError("dst_ranks", f"rank {both[0]} is in both src_ranks and dst_ranks: "
                                      "a rank sends or receives, with one peer")
    return list(zip(senders, receivers, strict=True))


def fan_peers(collective: str, ranks: int, root: int, src: str = "", dst: str = ""
              ) -> list[int]:
    """The ranks an incast's root receives from (``src``, PARAM's --src-ranks, else every
    rank) or a multicast's root sends to (``dst``, --dst-ranks, else every rank), the root
    left out as PARAM does. Raises PairsError saying what cannot run."""
    if ranks < 2:
        raise PairsError("num_gpus", f"{collective} needs two processes or more, not {ranks}")
    field, text = ("src_ranks", src) if collective == "incast" else ("dst_ranks", dst)
    problem = rank_list_problem(text)
    if problem:
        raise PairsError(field, problem)
    listed = rank_list(text) or list(range(ranks))
    outside = [r for r in listed if r >= ranks]
    if outside:
        raise PairsError(field, f"rank {outside[0]} is no rank of {ranks} process(es) (0 to "
                                f"{ranks - 1})")
    peers = [r for r in listed if r != root]
    if not peers:
        raise PairsError(field, f"{text!r} names the root ({root}) alone: no rank for "
                                f"{collective}")
    return peers


def message_pairs(collective: str, pattern: str, ranks: int, root: int, src: str = "",
                  dst: str = "") -> list[tuple[int, int]]:
    """The (sender, receiver) pairs of a collective that names its own ranks among
    ``ranks`` processes: a point-to-point pattern's (``pt2pt_pairs``), an incast's or a
    multicast's each peer with the root (``fan_peers``); none for another collective. The
    study and the runner's command line check a cell with it, and the runner runs its
    pairs. Raises PairsError saying what cannot run."""
    if collective == "pt2pt":
        return pt2pt_pairs(pattern, ranks, src, dst)
    if collective in FAN:
        peers = fan_peers(collective, ranks, root, src, dst)
        return [(p, root) if collective == "incast" else (root, p) for p in peers]
    return []


def pt2pt_peer(pairs: list[tuple[int, int]], rank: int) -> tuple[int | None, bool]:
    """The rank ``rank`` exchanges messages with among ``pairs`` (None: it takes no part)
    and whether it is the sending side of its pair."""
    for sender, receiver in pairs:
        if rank == sender:
            return receiver, True
        if rank == receiver:
            return sender, False
    return None, False


def sweep(begin: int, end: int, factor: int, step_bytes: int = 0) -> list[int]:
    """Sizes in bytes from ``begin`` to ``end`` (included when reached), each ``factor``
    times the last, or ``step_bytes`` more than the last where that is given (PARAM's
    --b, --e, --f, --sb)."""
    sizes, size = [], begin
    while size <= end:
        sizes.append(size)
        size = size + step_bytes if step_bytes > 0 else size * factor
    return sizes


def elements(size: int, collective: str, data_type: str, ranks: int) -> int:
    """Elements of the measured buffer for a size in bytes: at least one per rank, a
    multiple of the rank count where the collective splits the buffer."""
    count = max(1, size // DATA_TYPES[data_type])
    if collective in SPLIT:
        count = max(ranks, count // ranks * ranks)
    return count


def buffers(sizes: list[int], collective: str, data_type: str, ranks: int) -> list[int]:
    """The distinct element counts of a sweep, in order (small sizes may round alike)."""
    counts: list[int] = []
    for size in sizes:
        count = elements(size, collective, data_type, ranks)
        if count not in counts:
            counts.append(count)
    return counts


def size_text(size: int) -> str:
    """A size in bytes as people write it: 8 B, 32 KiB, 256 MiB, 1 GiB (1.5 MiB where
    the size is no whole number of the unit)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} B"
