"""The multi-head wrapper: projections around any kernel, and none a kernel does not use."""

from __future__ import annotations

import functools

import torch

from vitattn.attention import MultiHeadAttention
from vitattn.attention.reformer import ReformerAttention
from vitattn.attention.softmax import SoftmaxAttention


def test_a_shared_qk_kernel_gets_no_key_projection() -> None:
    reformer = MultiHeadAttention(32, 2, 16, functools.partial(ReformerAttention, chunk=16))
    softmax = MultiHeadAttention(32, 2, 16, SoftmaxAttention)
    assert reformer.qkv.out_features == 2 * 32 and softmax.qkv.out_features == 3 * 32
    seen = {}
    reformer.kernel.register_forward_pre_hook(lambda _, args: seen.update(qkv=args))
    reformer.eval()(torch.randn(2, 16, 32))
    q, k, v = seen["qkv"]
    assert k is q and not torch.equal(q, v)  # the queries stand in for the ignored keys


def test_an_old_checkpoint_with_key_rows_loads_without_them() -> None:
    torch.manual_seed(0)
    attention = MultiHeadAttention(32, 2, 16, functools.partial(ReformerAttention, chunk=16))
    old = attention.state_dict()
    weight, bias = old["qkv.weight"], old["qkv.bias"]  # query rows, then value rows
    # Saved before shared-QK kernels lost their key projection: query, key, value rows.
    old["qkv.weight"] = torch.cat([weight[:32], torch.randn(32, 32), weight[32:]])
    old["qkv.bias"] = torch.cat([bias[:32], torch.randn(32), bias[32:]])
    fresh = MultiHeadAttention(32, 2, 16, functools.partial(ReformerAttention, chunk=16))
    fresh.load_state_dict(old)
    torch.testing.assert_close(fresh.qkv.weight, weight)
    torch.testing.assert_close(fresh.qkv.bias, bias)
