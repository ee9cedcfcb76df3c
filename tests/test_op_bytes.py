"""Bytes an operator call moves (dlbench.ops.cost): views move none, in-place writes count."""

import pytest
import torch

from dlbench.ops import cost, output
from dlbench.ops.registry import CallableOp, resolve

N = 64
SIZE = N * N * 4  # one float32 N x N tensor


def forward_bytes(op, args, kwargs=None):
    return cost.count(op, args, kwargs or {}, backward=False)["forward"]["bytes"]


def tensor(device):
    return torch.ones(N, N, device=device)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_reshape_of_a_contiguous_tensor_moves_no_bytes(device):
    op = resolve("torch.reshape")()
    assert forward_bytes(op, [tensor(device), [N * N]]) is None


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_a_view_of_an_input_that_is_itself_a_view_moves_no_bytes(device):
    # The output's _base is the slice's base, not the input: aliasing goes by storage.
    sliced = torch.ones(2 * N, N, device=device)[N:]
    assert forward_bytes(resolve("torch.reshape")(), [sliced, [N * N]]) is None
    assert forward_bytes(resolve("torch.transpose")(), [sliced, 0, 1]) is None


def test_an_input_returned_unchanged_moves_no_bytes():
    op = CallableOp("contiguous", torch.Tensor.contiguous)
    assert forward_bytes(op, [tensor("cpu")]) is None


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_an_in_place_op_counts_its_write(device):
    # read a, read b, write a: three tensors, as STREAM's add.
    op = resolve("torch.add_")()
    assert forward_bytes(op, [tensor(device), tensor(device)]) == 3 * SIZE


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name", ["t_", "unsqueeze_", "transpose_"])
def test_an_in_place_view_changes_a_shape_and_moves_no_bytes(device, name):
    """t_ and unsqueeze_ bump the tensor's version counter as a write does, but change
    only its shape and strides: no bytes, where add_ (above) writes its tensor."""
    args = {"t_": (), "unsqueeze_": (0,), "transpose_": (0, 1)}[name]
    op = CallableOp(name, lambda x: getattr(x, name)(*args))
    assert forward_bytes(op, [tensor(device)]) is None


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_an_ordinary_op_counts_its_inputs_and_new_output(device):
    op = resolve("torch.add")()
    assert forward_bytes(op, [tensor(device), tensor(device)]) == 3 * SIZE


def test_an_out_tensor_counts_as_written_once():
    op = resolve("torch.add")()
    out = tensor("cpu")
    assert forward_bytes(op, [tensor("cpu"), tensor("cpu")], {"out": out}) == 3 * SIZE


def test_a_view_output_beside_new_data_does_not_count():
    op = CallableOp("view_and_double", lambda x: (x.view(-1), x * 2))
    assert forward_bytes(op, [tensor("cpu")]) == 2 * SIZE


def test_no_bytes_give_no_gbps():
    work = {"forward": {"flops": None, "bytes": None}}
    (m,) = output.measurements("torch.reshape", "0|0|0", {"forward": {"measure.time": [1.0, 1.2]}},
                               work, {}, {})
    assert m["bytes_per_iteration"] is None and m["gbps"] is None
