"""attn after fork(): a process that has run multi-threaded attn calls forks, and the children
call attn too (multiprocessing with the fork start method; a torch DataLoader with two workers).
Every child's result equals the parent's bit for bit and the float64 reference within 1e-5; a
child that hangs fails the test after 60 s instead of blocking the suite."""
import multiprocessing

import numpy as np
import pytest

import attn
from reference import reference

B, T, HQ, HKV, D = 2, 80, 8, 2, 32


def _inputs():
    rng = np.random.default_rng(7)
    q = rng.standard_normal((B, T, HQ, D), dtype=np.float32)
    k = rng.standard_normal((B, T, HKV, D), dtype=np.float32)
    v = rng.standard_normal((B, T, HKV, D), dtype=np.float32)
    return q, k, v


def _child_forward(threads):
    q, k, v = _inputs()
    return attn.forward(q, k, v, causal="bottom-right", threads=threads)


def test_multiprocessing_fork_children_compute_what_the_parent_does():
    q, k, v = _inputs()
    parent = attn.forward(q, k, v, causal="bottom-right", threads=2)
    expected, _ = reference(q, k, v, causal="bottom-right")
    assert np.max(np.abs(parent - expected)) <= 1e-5
    context = multiprocessing.get_context("fork")
    with context.Pool(2) as pool:
        results = pool.map_async(_child_forward, [2, 2, 1, 2]).get(timeout=60)
    for result in results:
        assert np.array_equal(result, parent)
    again = attn.forward(q, k, v, causal="bottom-right", threads=2)
    assert np.array_equal(again, parent)


def test_torch_dataloader_workers_call_attn():
    torch = pytest.importorskip("torch")
    import attn.torch as attn_torch

    q, k, v = (torch.from_numpy(x).transpose(1, 2).contiguous() for x in _inputs())
    parent = attn_torch.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    expected = torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double().repeat_interleave(HQ // HKV, 1),
        v.double().repeat_interleave(HQ // HKV, 1), is_causal=True)
    assert torch.max(torch.abs(parent.double() - expected)).item() <= 1e-5

    class Calls(torch.utils.data.Dataset):
        def __len__(self):
            return 6

        def __getitem__(self, index):
            return attn_torch.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                           enable_gqa=True)

    loader = torch.utils.data.DataLoader(Calls(), batch_size=None, num_workers=2,
                                         multiprocessing_context="fork", timeout=60)
    results = list(loader)
    assert len(results) == 6
    for result in results:
        assert torch.equal(result, parent)
