"""The one table of cell axes.

Every parameter a cell can vary is one ``Axis`` row in ``TABLE``: its type, default,
bounds or valid values, the cell kinds and frameworks that have it, and its flag in each
runner's command line (DLBS's and PARAM's spellings stay the flags). Everything else is
derived from this table:

- a study's validation of types and bounds (``check``; cross-axis rules live with the
  cell kind, ``dlbench.kinds``),
- the cell id (``id_params``: which values the id's hash covers),
- the launcher's argv for a runner (``argv``) and each runner's parse-back of its flags to
  the cell (``add_flags`` and ``cell_from_args``),
- the Parquet columns (``columns``) and the grid part of the config schema
  (``schema_fragment``, held equal to workflow/schemas/config.schema.yaml by a test).

To add an axis: add one row. An axis added after the first release has ``since`` set to
the release that adds it: at its default value it is left out of the cell id's hash
(``since`` > 1) and of the job's parameters (``since`` > ``PARAMS_RELEASE``), so results made
before it existed keep their ids and are not run again.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlbench import nccl_env
from dlbench.cli import listed_numbers_problem
from dlbench.comms import backends
from dlbench.comms.overlap import (
    COMPUTE_DATA_TYPES,
    EMBEDDING,
    KERNELS,
    NO_KERNEL,
    Tables,
    shape_form_problem,
)
from dlbench.comms.sizes import (
    COLLECTIVES,
    FAN,
    PT2PT_PATTERNS,
    ROOTED,
    UNEVEN,
    parse_size,
    rank_list_problem,
    sizes_problem,
    split_problem,
)
from dlbench.comms.sizes import DATA_TYPES as COMMS_DATA_TYPES
from dlbench.mxnet import reader_choice

REQUIRED = object()  # default of an axis every study must set (model, op_config)


@dataclass(frozen=True)
class Flag:
    """How one runner spells an axis on its command line.

    ``style``: ``value`` (``--opt=v``), ``bool`` (DLBS's ``--opt=true|false``), ``json``
    (``--opt=<json>``, left out when empty), ``pair`` (PARAM's ``-w 5``) or ``switch``
    (PARAM's ``-b``, present when true). ``values`` maps an axis value to the flag's value
    (phase ``inference`` -> ``--forward_only=true``); ``dest`` is argparse's name for the
    option when it is not the option without dashes."""

    option: str
    style: str = "value"
    values: Mapping[Any, Any] | None = None
    dest: str | None = None
    help: str = ""
    # Other spellings the runner takes (PARAM's long names: --begin-size for --b).
    also: tuple[str, ...] = ()
    # How the runner reads the flag's text where not as the axis's type (PARAM's sizes
    # with units, --e 256M); a ValueError is argparse's one-line error naming the flag.
    parse: Callable[[str], Any] | None = None

    @property
    def attr(self) -> str:
        return self.dest or self.option.lstrip("-").replace("-", "_")

    def encode(self, value: Any) -> list[str]:
        if self.values is not None:
            value = self.values.get(value, value)
        if value is None:
            return []  # the axis does not apply to this cell (e.g. data_backend, synthetic)
        if self.style == "bool":
            return [f"{self.option}={'true' if value else 'false'}"]
        if self.style == "json":
            return [f"{self.option}={json.dumps(value, sort_keys=True)}"] if value else []
        if self.style == "pair":
            return [self.option, str(value)]
        if self.style == "switch":
            return [self.option] if value else []
        return [f"{self.option}={value}"]

    def decode(self, parsed: Any) -> Any:
        if self.values is None:
            return parsed
        inverse = {v: k for k, v in self.values.items()}
        return inverse.get(parsed, parsed)


@dataclass(frozen=True)
class Axis:
    name: str
    type: type  # int, bool, str or dict
    default: Any
    kinds: tuple[str, ...] = ("model",)
    # Valid values: a tuple, or a function of the cell's parameters giving them (the
    # framework's precisions); None when another check owns them (models, datasets).
    choices: tuple[Any, ...] | Callable[[Mapping[str, Any]], Iterable[Any]] | None = None
    minimum: int | None = None
    # Frameworks whose runners take the axis; None: every framework of its kinds.
    frameworks: tuple[str, ...] | None = None
    # Cells of other frameworks hold None for it, and so does a cell for which ``applies``
    # says no. ``False`` keeps the value in such cells, as the first release did for a few
    # PyTorch-only axes: their ids must not change.
    blank_unused: bool = True
    # A value other than the default for a framework without the axis is a config error
    # naming the pair (MXNet has no compile modes), instead of being ignored.
    refuse_unused: bool = False
    applies: Callable[[Mapping[str, Any]], bool] | None = None
    # Cells whose runner ignores the value although their id keeps it (ids made before this
    # was known must not change): a study sweeping it measures such a cell more than once,
    # which it is warned of (``measured_params``).
    ignored_by: Callable[[Mapping[str, Any]], bool] | None = None
    # Runner (framework name, or "ops") -> its flag; "*": every model runner without its own
    # entry (DLBS's spelling, which a new framework's runner takes as it is).
    flags: Mapping[str, Flag] = field(default_factory=dict)
    column: bool = True  # a column of the aggregate table
    since: int = 1
    # Other spellings a config or a runner flag may use (precision f16 -> float16).
    aliases: Mapping[str, str] = field(default_factory=dict)
    # A check of a value's form beyond its type: why it is wrong, or None (nccl_env).
    form: Callable[[Any], str | None] | None = None
    # Several values written as one comma-separated string (PARAM's --ss sizes, rank lists):
    # a number given is most likely one of a grid's list meant as the axis's one value.
    comma_list: bool = False
    help: str = ""

    def normalise(self, value: Any) -> Any:
        return self.aliases.get(value, value) if isinstance(value, str) else value

    def flag_for(self, runner: str) -> Flag | None:
        return self.flags.get(runner) or (self.flags.get("*") if runner != "ops" else None)

    def used_by(self, params: Mapping[str, Any]) -> bool:
        if self.frameworks is not None and params.get("framework") not in self.frameworks:
            return False
        return self.applies is None or self.applies(params)

    def valid_values(self, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
        if self.choices is None:
            return None
        if callable(self.choices):
            return tuple(self.choices(params))
        return self.choices


def _precisions(params: Mapping[str, Any]) -> Iterable[str]:
    from dlbench import frameworks

    return frameworks.get(params["framework"]).precisions


def _frameworks(params: Mapping[str, Any]) -> Iterable[str]:
    from dlbench import frameworks

    return frameworks.names()


def _pt2pt(params: Mapping[str, Any]) -> bool:
    return params.get("collective") == "pt2pt"


def _collective(params: Mapping[str, Any]) -> bool:
    return not _pt2pt(params)


def _sources(params: Mapping[str, Any]) -> bool:
    """Cells whose senders may be named: point-to-point pairs' and an incast's."""
    return params.get("collective") in ("pt2pt", "incast")


def _destinations(params: Mapping[str, Any]) -> bool:
    return params.get("collective") in ("pt2pt", "multicast")


def _overlappable(params: Mapping[str, Any]) -> bool:
    """Collectives a compute kernel may run beside (incast and multicast are batches of
    point-to-point messages, as pt2pt's)."""
    return _collective(params) and params.get("collective") not in FAN


def _windowed(params: Mapping[str, Any]) -> bool:
    """Cells that issue a window of operations per iteration: non-blocking collectives and
    point-to-point bandwidth tests."""
    return params.get("blocking") is False or _pt2pt(params)


def _uneven(params: Mapping[str, Any]) -> bool:
    return params.get("collective") == UNEVEN


def _uneven_swept(params: Mapping[str, Any]) -> bool:
    """all_to_allv cells whose blocks come from the sweep's sizes (no in_split, out_split)."""
    return _uneven(params) and not params.get("in_split") and not params.get("out_split")


def _swept(params: Mapping[str, Any]) -> bool:
    """Collective cells whose message sizes are a sweep, not a list (message_sizes) or an
    all_to_allv's given exchange (in_split, out_split)."""
    split = _uneven(params) and (params.get("in_split") or params.get("out_split"))
    return not params.get("message_sizes") and not split


def _rooted(params: Mapping[str, Any]) -> bool:
    return params.get("collective") in ROOTED


def _computing(params: Mapping[str, Any]) -> bool:
    """Collective cells that overlap their collectives with compute kernels."""
    return _overlappable(params) and params.get("compute_kernel") not in (None, NO_KERNEL)


def _dense(params: Mapping[str, Any]) -> bool:
    """Overlapped cells whose kernel works on mm_dim or mm_shape operands (all but the
    embedding lookup, whose tables shape it)."""
    return _computing(params) and params.get("compute_kernel") != EMBEDDING


def _square(params: Mapping[str, Any]) -> bool:
    """Overlapped cells whose kernel's operands are mm_dim x mm_dim (no mm_shape)."""
    return _dense(params) and not params.get("mm_shape")


def _embedding(params: Mapping[str, Any]) -> bool:
    """Overlapped cells whose kernel is the embedding lookup."""
    return _computing(params) and params.get("compute_kernel") == EMBEDDING


_TABLES = Tables()  # PARAM's defaults of the embedding lookup (dlbench.comms.overlap)


_DEVICES = ("cpu", "gpu")
_LLM = "llm_inference"  # the cell kind of language-model inference (dlbench.kinds)
_LLM_RUNNER = "llm"  # its runner's name in the flag maps
_COMMS = "comms"  # the cell kind of collective communication, and its runner's name
_KV_STORES = ("local", "device", "nccl", "dist_sync", "dist_device_sync", "dist_async")
_DATA_BACKENDS = ("caffe_lmdb", "image_folder")
_EXEC_MODES = ("discrete", "continuous", "continuous_events")
_EVERY = ("*",)
_CALIBRATE = "calibrate"  # the calibration cells' kind, and their runner's name
MAX_GEMM_SIZES = 16


def gemm_sizes_problem(text: str) -> str | None:
    """Why a calibration's list of GEMM sizes cannot run; None when it can (or is empty:
    the device's sizes)."""
    return listed_numbers_problem(text, "GEMM size", "n", "2048,4096", MAX_GEMM_SIZES)


COMPILE_MODES = ("eager", "inductor", "inductor-reduce-overhead", "inductor-max-autotune",
                 "cudagraphs")
# Operator cells have one more: PARAM's --pt2-model and --cuda-graph together.
OPS_COMPILE_MODES = (*COMPILE_MODES, "inductor-cudagraphs")
MEMORY_FORMATS = ("contiguous", "channels_last")


def compile_modes(kind: str) -> tuple[str, ...]:
    return OPS_COMPILE_MODES if kind == "ops" else COMPILE_MODES


def _compile_choices(params: Mapping[str, Any]) -> tuple[str, ...]:
    return compile_modes("ops" if "op_config" in params else "model")  # op_config: ops only


def _dlbs(option: str, style: str = "value", runners: Iterable[str] = _EVERY,
          **kw: Any) -> dict[str, Flag]:
    return {runner: Flag(option, style, **kw) for runner in runners}


def _real_data(params: Mapping[str, Any]) -> bool:
    return params.get("data") != "synthetic"


def _synthetic(params: Mapping[str, Any]) -> bool:
    return not _real_data(params)


def _on_cpu(params: Mapping[str, Any]) -> bool:
    return params.get("device") == "cpu"  # a GPU's settings: cuDNN's, PARAM's queued modes


def _loader_only(params: Mapping[str, Any]) -> bool:
    return params.get("data_loader_only") is True  # the input pipeline alone: no pass


def _no_kvstore(params: Mapping[str, Any]) -> bool:
    """MXNet cells whose runner makes no kvstore (dlbench.mxnet.runner.kvstore): one
    device updates in place, inference and loader cells aggregate no gradients. A dist_*
    kvstore is made whatever the cell (its parameter servers)."""
    if str(params.get("kv_store")).startswith("dist"):
        return False
    training = params.get("phase") == "training" and not params.get("data_loader_only")
    return not training or (params.get("num_gpus") or 1) == 1


TABLE: tuple[Axis, ...] = (
    # Both kinds. The model kind's order below is also the Parquet's column order.
    Axis("framework", str, "pytorch", kinds=("model", "ops", "calibrate", _LLM, _COMMS),
         choices=_frameworks,
         help="the framework that runs the cell"),
    Axis("model", str, REQUIRED, kinds=("model", _LLM), choices=None, flags=_dlbs("--model"),
         help="a model of the registry (dlbench.models)"),
    Axis("phase", str, "training", choices=("training", "inference"), ignored_by=_loader_only,
         flags=_dlbs("--forward_only", "bool",
                     values={"training": False, "inference": True})),
    Axis("precision", str, "float32", kinds=("model", _LLM), choices=_precisions,
         flags=_dlbs("--dtype"),
         aliases={"float": "float32", "f32": "float32", "f16": "float16",
                  "bf16": "bfloat16", "f64": "float64"}),
    Axis("batch_size", int, 32, kinds=("model", _LLM), minimum=1, flags=_dlbs("--batch_size"),
         help="per-device batch size"),
    Axis("num_gpus", int, 1, kinds=("model", _COMMS), minimum=1, flags=_dlbs("--num_gpus"),
         help="devices per node (collectives: processes, one per device)"),
    # Added in release 3: at its default it is in neither the cell id's hash nor the job's
    # parameters (job_params), so that results made before it existed stay done.
    Axis("num_nodes", int, 1, kinds=("model", _COMMS), minimum=1,
         frameworks=("pytorch", "mxnet"), refuse_unused=True, since=3,
         flags=_dlbs("--num_nodes", runners=("pytorch", "mxnet", _COMMS)),
         help="nodes of a data-parallel or collective cell (a cluster job), num_gpus on each"),
    Axis("device", str, "gpu", kinds=("model", "ops", "calibrate", _LLM, _COMMS),
         choices=_DEVICES,
         flags={**_dlbs("--device"),
                "ops": Flag("-d", "pair", values={"gpu": "cuda", "cpu": "cpu"})}),
    # The runner reads a prepared copy of the dataset (--data_dir) that the workflow
    # chooses by the framework's storage format; the name travels as --data_name.
    Axis("data", str, "synthetic", choices=None,
         flags=_dlbs("--data_name", values={"synthetic": None})),
    Axis("data_backend", str, "caffe_lmdb", choices=_DATA_BACKENDS, frameworks=("pytorch",),
         applies=_real_data, flags=_dlbs("--data_backend", runners=("pytorch",)),
         help="how the PyTorch runner reads a dataset (DLBS's default: caffe_lmdb)"),
    Axis("num_batches", int, 100, kinds=("model", _LLM), minimum=1,
         flags=_dlbs("--num_batches"),
         help="measured iterations (LLM inference: measured generations)"),
    Axis("num_warmup_batches", int, 10, kinds=("model", _LLM), minimum=0,
         flags=_dlbs("--num_warmup_batches")),
    # MXNet's cuDNN autotune too (MXNET_CUDNN_AUTOTUNE_DEFAULT, DLBS's mxnet.cudnn_autotune).
    # MXNet cells kept the value in their ids (blank_unused=False), so they keep their ids.
    Axis("cudnn_benchmark", bool, True, frameworks=("pytorch", "mxnet"), blank_unused=False,
         ignored_by=_on_cpu,
         flags=_dlbs("--cudnn_benchmark", "bool", runners=("pytorch", "mxnet"))),
    Axis("cudnn_fastest", bool, False, frameworks=("pytorch",), blank_unused=False,
         ignored_by=_on_cpu, flags=_dlbs("--cudnn_fastest", "bool", runners=("pytorch",))),
    Axis("data_shuffle", bool, False, frameworks=("pytorch",), blank_unused=False,
         ignored_by=_synthetic, flags=_dlbs("--data_shuffle", "bool", runners=("pytorch",))),
    Axis("num_loader_threads", int, 4, minimum=0, ignored_by=_synthetic,
         flags={"*": Flag("--num_loader_threads"),
                "mxnet": Flag("--preprocess_threads")}),
    Axis("data_loader_only", bool, False, flags=_dlbs("--data_loader_only", "bool"),
         help="time the input pipeline alone (DLBS's --data_loader_only)"),
    Axis("kv_store", str, "device", choices=_KV_STORES, frameworks=("mxnet",),
         ignored_by=_no_kvstore,
         flags=_dlbs("--kv_store", runners=("mxnet",))),
    # The MXNet runner's RecordIO reader (dlbench.mxnet.reader_choice), as data_backend is
    # the PyTorch runner's; added in release 3: at auto it stays out of ids and jobs.
    Axis("data_reader", str, reader_choice.AUTO, choices=reader_choice.CHOICES,
         frameworks=("mxnet",), applies=_real_data, since=3,
         flags=_dlbs("--data_reader", runners=("mxnet",),
                     help="RecordIO reader: native (mx.io.ImageRecordIter), gluon "
                          "(gluon.data.DataLoader worker processes, OpenCV), or auto: native "
                          "when its decoding-thread cap (cpus/2 - 1, at least 1) covers "
                          "--preprocess_threads, else gluon"),
         help="how the MXNet runner reads a RecordIO dataset: native (its C++ parser), gluon "
              "(num_loader_threads worker processes), or auto: native when its "
              "decoding-thread cap (cpus/2 - 1, at least 1) covers num_loader_threads, "
              "else gluon"),
    # Execution modes (PyTorch): added after the first release, so at their defaults they
    # leave ids unchanged. A framework without them refuses any other value (refuse_unused).
    Axis("compile", str, "eager", kinds=("model", "ops", _LLM), choices=_compile_choices,
         frameworks=("pytorch",), refuse_unused=True, since=2,
         flags={**_dlbs("--compile", runners=("pytorch", _LLM_RUNNER)),
                "ops": Flag("--compile", "pair", values={"eager": None})},
         help="eager, or torch.compile with inductor (default, reduce-overhead or "
              "max-autotune mode), or CUDA graphs without inductor (cudagraphs, GPU only); "
              "operator cells also take inductor-cudagraphs (PARAM's --pt2-model "
              "--cuda-graph)"),
    Axis("memory_format", str, "contiguous", choices=MEMORY_FORMATS, frameworks=("pytorch",),
         refuse_unused=True, since=2, flags=_dlbs("--memory_format", runners=("pytorch",)),
         help="the layout of the model's weights and 4-D inputs"),
    Axis("model_opts", dict, {}, kinds=("model", _LLM), flags=_dlbs("--model_opts", "json"),
         column=False,
         help="model options (the model's registry entry lists them)"),
    # Operator cells (PARAM's flags, seed 003).
    Axis("op_config", str, REQUIRED, kinds=("ops",),
         flags={"ops": Flag("--config", "value")},  # =: a path may start with -
         help="a PARAM-style JSON op config file"),
    Axis("backward", bool, False, kinds=("ops",), flags={"ops": Flag("-b", "switch")}),
    # Off a GPU every call is timed on its own whatever the mode (dlbench.ops.timing).
    Axis("exec_mode", str, "discrete", kinds=("ops",), choices=_EXEC_MODES, ignored_by=_on_cpu,
         flags={"ops": Flag("--exec-mode", "pair")}),
    Axis("warmup", int, 5, kinds=("ops", _COMMS), minimum=0, column=False,
         flags={"ops": Flag("-w", "pair", dest="warmup"), _COMMS: Flag("--w")},
         help="iterations before the measured ones"),
    Axis("iterations", int, 20, kinds=("ops", _COMMS), minimum=1, column=False,
         flags={"ops": Flag("-i", "pair", dest="iteration"),
                _COMMS: Flag("--n", also=("--num_iters",))},
         help="measured iterations"),
    Axis("cuda_l2_cache", str, "on", kinds=("ops",), choices=("on", "off"),
         flags={"ops": Flag("--cuda-l2-cache", "pair")}),
    # Calibration cells (dlbench.calibrate): the sweep's sizes, by device where not given.
    # A large CPU node reaches its best GEMM only beyond the CPU's default n = 1024, and
    # a GPU's plateau may lie past 16384. Added in release 3: by default in no id or job.
    Axis("gemm_sizes", str, "", kinds=(_CALIBRATE,), since=3, form=gemm_sizes_problem,
         comma_list=True,
         flags={_CALIBRATE: Flag("--gemm_sizes", values={"": None})},
         help="n of the n x n GEMMs, comma-separated (default: by device, GPU 2048 to 16384, "
              "CPU 256 to 1024)"),
    Axis("stream_elements", int, 0, kinds=(_CALIBRATE,), minimum=0, since=3,
         flags={_CALIBRATE: Flag("--stream_elements", values={0: None})},
         help="float32 elements per STREAM array (0, the default: by device, 2^28 on a GPU, "
              "2^26 on a CPU; an array must be far larger than the last-level cache)"),
    # Collective communication (dlbench.comms; PARAM's comms.py flags): one collective over
    # message sizes begin_size, x step_factor, ... up to end_size bytes.
    Axis("collective", str, "all_reduce", kinds=(_COMMS,), choices=COLLECTIVES,
         flags={_COMMS: Flag("--collective", also=("--collectives",))},
         # PARAM's names of the single-tensor all_gather and reduce_scatter, the ones
         # dlbench times (its plain names gather into and scatter from lists of tensors).
         aliases={"all_gather_base": "all_gather", "reduce_scatter_base": "reduce_scatter"}),
    Axis("data_type", str, "float32", kinds=(_COMMS,), choices=tuple(COMMS_DATA_TYPES),
         flags={_COMMS: Flag("--data-type", also=("--data-types",))},
         help="the element type of the buffers"),
    Axis("begin_size", int, 8, kinds=(_COMMS,), minimum=1, applies=_swept,
         flags={_COMMS: Flag("--b", also=("--begin-size",), parse=parse_size,
                             help="the first message size: bytes, or K, M, G (64K)")},
         help="the first message size, bytes"),
    Axis("end_size", int, 256 * 2**20, kinds=(_COMMS,), minimum=1, applies=_swept,
         flags={_COMMS: Flag("--e", also=("--end-size",), parse=parse_size,
                             help="the last message size: bytes, or K, M, G (256M)")},
         help="the last message size, bytes"),
    Axis("step_factor", int, 2, kinds=(_COMMS,), minimum=2, applies=_swept,
         flags={_COMMS: Flag("--f")}, help="each message size is this many times the last"),
    Axis("step_bytes", int, 0, kinds=(_COMMS,), minimum=0, since=3, applies=_swept,
         flags={_COMMS: Flag("--sb")},
         help="each message size is this many bytes more than the last (0: step_factor "
              "times the last instead)"),
    # PARAM's --ss: the sizes a model's buckets have, instead of a sweep (whose axes a cell
    # with a list leaves empty).
    Axis("message_sizes", str, "", kinds=(_COMMS,), since=3, form=sizes_problem,
         comma_list=True,
         flags={_COMMS: Flag("--ss", also=("--sizes",))},
         help="message sizes in bytes, comma-separated, instead of the sweep from "
              "begin_size to end_size (PARAM's --ss)"),
    # PARAM's --i and --o: one all_to_allv exchange of uneven blocks instead of the sweep,
    # the same list on every rank (dlbench.comms.sizes.exchange).
    Axis("in_split", str, "", kinds=(_COMMS,), since=3, applies=_uneven, form=split_problem,
         comma_list=True,
         flags={_COMMS: Flag("--i", also=("--in-split",))},
         help="all_to_allv: the elements each rank sends to rank 0, 1, ..., comma-separated "
              "(rank j then receives in_split[j] from each), instead of the sweep"),
    Axis("out_split", str, "", kinds=(_COMMS,), since=3, applies=_uneven,
         form=split_problem, comma_list=True, flags={_COMMS: Flag("--o", also=("--out-split",))},
         help="all_to_allv: the elements each rank receives from rank 0, 1, ..., "
              "comma-separated (rank s then sends out_split[s] to each), instead of the sweep"),
    # PARAM's --include-0B: the sweep's all_to_allv with a 0-byte block from every rank to
    # the next (dlbench.comms.sizes.zero_block_exchange).
    Axis("include_0b", bool, False, kinds=(_COMMS,), since=3, applies=_uneven_swept,
         flags={_COMMS: Flag("--include-0B", "switch", dest="include_0b")},
         help="all_to_allv sweep: every rank sends 0 bytes to the next rank (r+1 mod n) and "
              "its share to each other (PARAM's --include-0B)"),
    Axis("validate", bool, False, kinds=(_COMMS,), since=3,
         flags={_COMMS: Flag("--c", values={True: 1, False: 0})},
         help="check every size's received data against what the collective must give "
              "(1; outside the timed iterations)"),
    # PARAM's --z: 1 waits for each collective before the next (every iteration timed on
    # its own); 0 issues `window` collectives back to back and waits once, as nccl-tests
    # times them: the host's launch and wait overlap the transfers, which small messages show.
    Axis("blocking", bool, True, kinds=(_COMMS,), since=3, applies=_collective,
         flags={_COMMS: Flag("--z", values={True: 1, False: 0}, also=("--blocking",))},
         help="1: each collective waited for on its own; 0: `--window` collectives issued "
              "back to back, then waited for"),
    # PARAM's --use-device-time: a collective's time from CUDA events on the device, without
    # the host's launch and wait (an overlapped cell's collectives are timed so already).
    Axis("device_time", bool, False, kinds=(_COMMS,), since=3, applies=_collective,
         flags={_COMMS: Flag("--use-device-time", "switch")},
         help="time each iteration's collectives with CUDA events on the device instead of "
              "the host's clock (device gpu)"),
    Axis("root", int, 0, kinds=(_COMMS,), minimum=0, since=3, applies=_rooted,
         flags={_COMMS: Flag("--root")},
         help="the rank that broadcasts or scatters, or receives the reduction or the "
              "gathered pieces (broadcast, reduce, gather, scatter), an incast's messages "
              "or sends a multicast's (of each group's ranks, with comm_groups)"),
    # PARAM's --pt2pt (with collective pt2pt): which ranks exchange messages.
    Axis("pt2pt", str, "one2one", kinds=(_COMMS,), choices=PT2PT_PATTERNS, since=3,
         applies=_pt2pt, flags={_COMMS: Flag("--pt2pt")},
         help="point-to-point pattern: one2one (rank 0 and 1) or pairwise (rank i and "
              "i + n/2, all pairs at once)"),
    # PARAM's --src-ranks and --dst-ranks: the pairs of a point-to-point pattern named
    # (src_ranks[i] sends to dst_ranks[i]), instead of the pattern's own.
    Axis("src_ranks", str, "", kinds=(_COMMS,), since=3, applies=_sources,
         form=rank_list_problem, comma_list=True, flags={_COMMS: Flag("--src-ranks")},
         help="point-to-point: the sending rank of each pair (a rank, '0,2' or a range "
              "'0:3'; with dst_ranks, instead of the pattern's pairs); incast: the ranks "
              "sending to the root (every rank when empty)"),
    Axis("dst_ranks", str, "", kinds=(_COMMS,), since=3, applies=_destinations,
         form=rank_list_problem, comma_list=True, flags={_COMMS: Flag("--dst-ranks")},
         help="point-to-point: the receiving rank of each pair, in src_ranks' order; "
              "multicast: the ranks the root sends to (every rank when empty)"),
    Axis("window", int, 20, kinds=(_COMMS,), minimum=1, since=3, applies=_windowed,
         flags={_COMMS: Flag("--window")},
         help="operations issued back to back in each measured iteration of a "
              "non-blocking collective or a point-to-point bandwidth test (its time "
              "divided by them is one operation's)"),
    # PARAM's --graph-launches (nccl-tests' -G): `iterations` collectives captured once in
    # a CUDA graph, timed as replays of it, without the host's launch of each collective.
    Axis("graph_launches", int, 0, kinds=(_COMMS,), minimum=0, since=3, applies=_overlappable,
         flags={_COMMS: Flag("--graph-launches")},
         help="replay a CUDA graph of `iterations` collectives this many times, each replay "
              "timed (0: no graph; device gpu, blocking collectives)"),
    # PARAM's --multi-comms: the ranks split into this many communicators (rank % groups),
    # each running the collective among its members at once.
    Axis("comm_groups", int, 1, kinds=(_COMMS,), minimum=1, since=3, applies=_overlappable,
         flags={_COMMS: Flag("--multi-comms")},
         help="communicators the ranks are split into (rank r in group r mod comm_groups), "
              "each running the collective among its members at the same time"),
    # PARAM's --mode comms-compute (dlbench.comms.overlap): each iteration's collectives
    # overlapped with num_compute kernels on mm_dim x mm_dim operands (or mm_shape's), each
    # part timed.
    Axis("compute_kernel", str, NO_KERNEL, kinds=(_COMMS,), choices=(NO_KERNEL, *KERNELS),
         since=3, applies=_overlappable, flags={_COMMS: Flag("--kernel")},
         help="none: the collectives alone; gemm, add, sub, add_num, sub_num, copy, d2h, "
              "h2d or emb_lookup: that kernel computing (or copying) beside them in every "
              "iteration (PARAM's --mode comms-compute)"),
    Axis("num_compute", int, 100, kinds=(_COMMS,), minimum=1, since=3, applies=_computing,
         flags={_COMMS: Flag("--num-compute", also=("--num-compute-per-iteration",))},
         help="compute kernels in each iteration beside its collectives"),
    Axis("mm_dim", int, 100, kinds=(_COMMS,), minimum=1, since=3, applies=_square,
         flags={_COMMS: Flag("--mm-dim")},
         help="the compute kernel's operands are mm_dim x mm_dim (a GEMM's: both)"),
    # PARAM's --mm-dim with two or three values (dlbench.comms.overlap.operands): a GEMM of
    # a layer's own shape beside the collectives, instead of a square one.
    Axis("mm_shape", str, "", kinds=(_COMMS,), since=3, applies=_dense,
         form=shape_form_problem, comma_list=True, flags={_COMMS: Flag("--mm-shape")},
         help="the compute kernel's operands instead of mm_dim x mm_dim, comma-separated: "
              "m,n,p for gemm (A[m,n] times B[n,p]), m,n for the others (PARAM's --mm-dim "
              "m n p)"),
    Axis("compute_data_type", str, "float32", kinds=(_COMMS,), choices=COMPUTE_DATA_TYPES,
         since=3, applies=_dense, flags={_COMMS: Flag("--comp-data-type")},
         help="the element type of the compute kernel's operands"),
    # PARAM's embedding lookup (--kernel emb_lookup): float32 tables, as PARAM's.
    Axis("emb_dim", int, _TABLES.dim, kinds=(_COMMS,), minimum=1, since=3,
         applies=_embedding, flags={_COMMS: Flag("--emb-dim")},
         help="emb_lookup: the width of each table's rows"),
    Axis("num_embs", int, _TABLES.rows, kinds=(_COMMS,), minimum=1, since=3,
         applies=_embedding, flags={_COMMS: Flag("--num-embs")},
         help="emb_lookup: the rows of each table (its hash size)"),
    Axis("num_emb_tables", int, _TABLES.tables, kinds=(_COMMS,), minimum=1, since=3,
         applies=_embedding,
         flags={_COMMS: Flag("--num-emb-tables-per-device", dest="num_emb_tables",
                             also=("--ntables", "--num-emb-tables"))},
         help="emb_lookup: the tables on each process, looked up together"),
    Axis("emb_batch_size", int, _TABLES.batch, kinds=(_COMMS,), minimum=1, since=3,
         applies=_embedding, flags={_COMMS: Flag("--batch-size", dest="emb_batch_size")},
         help="emb_lookup: the bags (samples) each lookup pools, per table"),
    Axis("bag_size", int, _TABLES.bag, kinds=(_COMMS,), minimum=1, since=3,
         applies=_embedding, flags={_COMMS: Flag("--bag-size")},
         help="emb_lookup: the rows each bag sums"),
    # The process group's backend (dlbench.comms.backends; PARAM's --backend).
    Axis("backend", str, backends.AUTO, kinds=(_COMMS,), choices=backends.BACKENDS, since=3,
         flags={_COMMS: Flag("--backend")},
         help="the process group's backend (PARAM's --backend): nccl (GPUs), gloo, ucc; "
              "auto: nccl on GPUs, gloo on CPUs"),
    # Language-model inference (dlbench.llm): a batch of prompts, then its output tokens.
    Axis("prompt_length", int, 128, kinds=(_LLM,), minimum=1,
         flags={_LLM_RUNNER: Flag("--prompt_length")}, help="tokens of each prompt"),
    Axis("output_length", int, 128, kinds=(_LLM,), minimum=1,
         flags={_LLM_RUNNER: Flag("--output_length")},
         help="tokens generated after each prompt (the first is the prefill's)"),
    # NCCL's settings for the cell's processes (dlbench.nccl_env): data-parallel model
    # cells and collectives, so that a study sweeps NCCL_ALGO or NCCL_PROTO as an axis.
    Axis("nccl_env", str, "", kinds=("model", _COMMS), frameworks=("pytorch",),
         refuse_unused=True, since=3, form=nccl_env.problem,
         flags={"pytorch": Flag("--nccl_env"), _COMMS: Flag("--nccl_env")},
         help="NCCL settings, NAME=VALUE separated by spaces (NCCL_ALGO=Tree "
              "NCCL_PROTO=Simple), set in every process of the cell"),
    # Warm-up past num_warmup_batches until the iteration times settle (harness.
    # warm_up_until_steady): a GPU's clocks, caches and allocator may take longer than a
    # fixed count, and a median of a moving target is no figure.
    Axis("warmup_until_steady", bool, False, kinds=("model", _LLM), since=3,
         flags=_dlbs("--warmup_until_steady", "bool"),
         help="after the warm-up iterations, warm up until the last 20 iterations' times "
              "move less than 5% (language models: the last 3 generations' step times lie "
              "within 5%), at most 300 s; recorded in the result"),
)

# Cell kinds with axes; a kind's axes in table order.
_BY_NAME = {axis.name: axis for axis in TABLE}


def table() -> tuple[Axis, ...]:
    return TABLE


def get(name: str) -> Axis:
    return _BY_NAME[name]


# Asked once per cell and axis (10,000-cell studies): kept per kind, and made again when
# TABLE is another tuple (a plug-in or a test extending the table).
_KIND_AXES: dict[str, tuple[tuple[Axis, ...], tuple[Axis, ...]]] = {}


def of_kind(kind: str) -> tuple[Axis, ...]:
    hit = _KIND_AXES.get(kind)
    if hit is None or hit[0] is not TABLE:
        hit = _KIND_AXES[kind] = (TABLE, tuple(axis for axis in TABLE if kind in axis.kinds))
    return hit[1]


def defaults(kind: str) -> dict[str, Any]:
    """Axis name -> default (``REQUIRED`` for the axes a study must set)."""
    return {axis.name: axis.default for axis in of_kind(kind)}


class AxisError(ValueError):
    """One axis value is wrong: ``field`` names it, the message says why."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name


# The largest integer an axis may hold: its Parquet column is a 64-bit integer.
INT_MAX = 2**63 - 1


# YAML 1.1 reads unquoted on/off and yes/no as booleans: cuda_l2_cache: [on, off] is two.
YAML_BOOLEAN_HINT = " (YAML reads unquoted on/off, yes/no as true/false: quote it, 'on')"


# Said where a comma-list axis (``Axis.comma_list``) is given a number.
LIST_HINT = (" (several values are one string here, comma-separated: '1024,2048'; a list "
             "in a grid makes one cell per value)")


def _as_read(axis: Axis, value: Any) -> str:
    """A hint for a text an int axis's command-line flag reads (PARAM's sizes, 256M): the
    number to write in a study instead."""
    for flag in (axis.flags or {}).values():
        if flag.parse is not None and isinstance(value, str):
            try:
                return f" (write {flag.parse(value)}: {value} is the command line's " \
                       f"{flag.option} form)"
            except ValueError:
                return ""
    return ""


def check_value(axis: Axis, value: Any) -> None:
    """A value's type and bounds, and whether it is one of the axis's fixed choices (those
    that do not depend on the rest of the cell): what any value of the axis must be,
    wherever it is given (raises AxisError)."""
    if axis.type is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise AxisError(axis.name, f"must be an integer, got {value!r}{_as_read(axis, value)}")
    if axis.type is bool and not isinstance(value, bool):
        raise AxisError(axis.name, f"must be true or false, got {value!r}")
    if axis.type is str and not isinstance(value, str):
        hint = YAML_BOOLEAN_HINT if isinstance(value, bool) else \
            LIST_HINT if axis.comma_list and isinstance(value, int | float) else ""
        raise AxisError(axis.name, f"must be a string, got {value!r}{hint}")
    if axis.type is dict and not isinstance(value, dict):
        raise AxisError(axis.name, f"must be a mapping, got {value!r}")
    if axis.minimum is not None and value < axis.minimum:
        raise AxisError(axis.name, f"must be >= {axis.minimum}, got {value}")
    if axis.type is int and value > INT_MAX:
        raise AxisError(axis.name, f"must be <= {INT_MAX} (a 64-bit integer column), "
                                   f"got {value}")
    if isinstance(axis.choices, tuple) and value not in axis.choices \
            and value != axis.default:
        raise AxisError(axis.name, f"unknown value {value!r} "
                                   f"(valid: {', '.join(map(str, axis.choices))})")


def _as_written(value: Any, *, quoted: bool = False) -> str:
    """A value as a study's YAML spells it, so that a message quotes what its reader wrote:
    true/false, not Python's True/False; a string in quotes where ``quoted``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if quoted else str(value)


def check(kind: str, params: Mapping[str, Any]) -> None:
    """Types, bounds and valid values of every axis of a cell (raises AxisError); a value
    on an axis the cell does not use (a synthetic cell's data_backend) is checked as any
    value of its axis (``check_value``), so that a typo there is not passed over."""
    for axis in of_kind(kind):
        value = params.get(axis.name)
        used = axis.used_by(params)
        if value is None and not used:
            continue
        check_value(axis, value)
        if axis.refuse_unused and not used and value != axis.default:
            framework = params.get("framework")
            raise AxisError(axis.name, f"{framework} has no {axis.name} "
                                       f"{_as_written(value, quoted=True)} (pair "
                                       f"{framework}/{_as_written(value)}; only "
                                       f"{', '.join(axis.frameworks or ())} cells take it)")
        problem = axis.form(value) if used and axis.form is not None else None
        if problem:
            raise AxisError(axis.name, problem)
        valid = axis.valid_values(params) if used else None
        if valid is not None and value not in valid:
            raise AxisError(axis.name, f"unknown value {value!r} "
                                       f"(valid: {', '.join(map(str, valid))})")


def blank_unused(kind: str, params: dict[str, Any]) -> dict[str, Any]:
    """Set the axes a cell does not use to None, so that their values do not change its id
    (a synthetic-data cell has no data_backend; a PyTorch cell no kv_store)."""
    for axis in of_kind(kind):
        if axis.blank_unused and not axis.used_by(params):
            params[axis.name] = None
    return params


def measured_params(kind: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """What a cell's runner measures by: its parameters less the axes it does not use or
    ignores (``ignored_by``), its model_opts with the model's defaults filled in (``{}``
    and ParaDnn's defaults spelled out build one model). Two cells alike here measure the
    same thing under two ids."""
    out = dict(params)
    for axis in of_kind(kind):
        if axis.name in out and (not axis.used_by(params) or
                                 (axis.ignored_by is not None and axis.ignored_by(params))):
            out[axis.name] = None
    if isinstance(out.get("model_opts"), dict) and isinstance(out.get("model"), str):
        from dlbench import models

        # Not a registry model's options: compared as written.
        with contextlib.suppress(KeyError, ValueError):
            out["model_opts"] = models.get(out["model"]).opts(out["model_opts"])
        if "parallel" in out["model_opts"] and \
                (out.get("num_gpus") or 1) * (out.get("num_nodes") or 1) == 1:
            # One process shards nothing: ddp and fsdp run the same single model.
            out["model_opts"] = {**out["model_opts"], "parallel": None}
    return out


def id_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The values a cell id's hash covers: every parameter, except an axis added after the
    first release while it holds its default (ids made before it existed stay valid)."""
    out = {}
    for name, value in params.items():
        axis = _BY_NAME.get(name)
        if axis is not None and axis.since > 1 and value in (axis.default, None):
            continue
        out[name] = value
    return out


# Release 2 gave a job's parameters (the cell as JSON, which Snakemake records per result
# and compares: rerun-triggers params) every axis it had. Axes added since are left out at
# their default, so that an upgrade does not run every finished cell again.
PARAMS_RELEASE = 2


def job_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters of a cell's job: all, except axes newer than PARAMS_RELEASE at their
    default (the runner's flag default gives the same value)."""
    out = {}
    for name, value in params.items():
        axis = _BY_NAME.get(name)
        if axis is not None and axis.since > PARAMS_RELEASE and value in (axis.default, None):
            continue
        out[name] = value
    return out


def argv(runner: str, params: Mapping[str, Any]) -> list[str]:
    """The runner's flags for a cell's axes, in table order (an argument list)."""
    out: list[str] = []
    for axis in TABLE:
        flag = axis.flag_for(runner)
        if flag is None or axis.name not in params:
            continue
        out += flag.encode(params[axis.name])
    return out


def add_flags(parser: argparse.ArgumentParser, runner: str, framework: str,
              kind: str | None = None) -> None:
    """Add to a runner's parser every axis flag it has (of ``kind``'s axes where given):
    name, type, default and valid values from the table (the runner's parse-back is
    ``cell_from_args``)."""
    from dlbench import cli

    for axis in of_kind(kind) if kind else TABLE:
        flag = axis.flag_for(runner)
        if flag is None or flag.style == "pair":
            continue  # PARAM's parser is PARAM's own (dlbench.ops.cli)
        # argparse %-formats help text (for %(default)s): a literal "5%" must be doubled.
        help_text = (flag.help or axis.help or axis.name.replace("_", " ")).replace("%", "%%")
        default = axis.default if axis.default is not REQUIRED else None
        if flag.values is not None:
            default = flag.values.get(default, default)
        kw: dict[str, Any] = {"dest": flag.attr}
        if flag.style == "switch":  # PARAM's --use-device-time: true where given
            parser.add_argument(flag.option, *flag.also, action="store_true", help=help_text,
                                **kw)
            continue
        if flag.style == "bool":
            cli.add_bool(parser, flag.option, bool(default), help_text, dest=flag.attr)
            continue
        if flag.style == "json":
            kw.update(type=cli.json_object, default={})
        elif axis.type is int:
            kw.update(type=_parser_type(flag.parse) if flag.parse else int, default=default)
        elif flag.values is not None and all(type(v) is int for v in flag.values.values()):
            # A flag of numbers standing for the axis's values (PARAM's --c 0|1).
            kw.update(type=int, default=default, choices=sorted(set(flag.values.values())))
        else:
            kw.update(default=default if default is not None else "")
            valid = axis.valid_values({"framework": framework})
            if valid is not None and flag.values is None:
                aliases = [a for a, v in axis.aliases.items() if v in valid]
                kw["choices"] = [*aliases, *valid]
        if axis.default is REQUIRED:
            kw["required"] = True
        parser.add_argument(flag.option, *flag.also, help=help_text, **kw)


def _parser_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse`` as an argparse type: its ValueError's text is the flag's error line."""
    def read(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return read


def cell_from_args(kind: str, runner: str, framework: str,
                   args: argparse.Namespace) -> dict[str, Any]:
    """A runner's flags read back into the cell's axes (what its result records)."""
    cell: dict[str, Any] = {}
    for axis in of_kind(kind):
        flag = axis.flag_for(runner)
        if axis.name == "framework":
            cell["framework"] = framework
        elif flag is not None:
            cell[axis.name] = flag.decode(getattr(args, flag.attr))
        else:
            cell[axis.name] = None
    for axis in of_kind(kind):
        cell[axis.name] = axis.normalise(cell[axis.name])
    if kind == "model":
        # The dataset: its name, else the folder (or record file) read, else synthetic.
        data_dir = Path(getattr(args, "data_dir", "") or ".")
        read = data_dir.stem if data_dir.is_file() else data_dir.name
        cell["data"] = cell.get("data") or read or "synthetic"
    for axis in of_kind(kind):
        if not axis.used_by(cell):
            cell[axis.name] = None
    return cell


def recorded(kind: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The cell as a result records it: the axes its framework does not use are None, and
    those a job leaves out at their default (job_params) hold it."""
    out = dict(params)
    for axis in of_kind(kind):
        if axis.name not in out and axis.default is not REQUIRED:
            out[axis.name] = axis.default
        if axis.name in out and not axis.used_by(out):
            out[axis.name] = None
    return out


def with_later_axes(kind: str, cell: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded cell with the axes added after the release that recorded it (absent from
    it, ``since`` > 1) at their defaults where its framework uses them: a result from
    before ``num_nodes`` is a one-node cell, and reads as one."""
    out = dict(cell)
    for axis in of_kind(kind):
        if axis.since > 1 and axis.name not in out and axis.used_by(out):
            out[axis.name] = axis.default
    return out


_ARROW_TYPES = {int: "int64", bool: "bool", str: "string"}


def columns() -> list[tuple[str, str]]:
    """(column, arrow type name) of the axes that are columns of the aggregate table."""
    return [(axis.name, _ARROW_TYPES[axis.type]) for axis in TABLE
            if axis.column and axis.type in _ARROW_TYPES]


_JSON_TYPES = {int: "integer", bool: "boolean", str: "string", dict: "object"}


def schema_fragment(kind: str) -> dict[str, Any]:
    """The grid of a study of this kind as the config schema states it: each axis, a value
    of its type or a non-empty list of them. Structure only, like the rest of the schema:
    unknown axes, bounds and valid values are dlbench.study's one-line errors."""
    props = {}
    for axis in of_kind(kind):
        value = {"type": _JSON_TYPES[axis.type]}
        props[axis.name] = {"anyOf": [value, {"type": "array", "minItems": 1, "items": value}]}
    return {"type": "object", "properties": props}
