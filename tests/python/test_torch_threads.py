"""attn.torch's parallel regions on PyTorch's own OpenMP threads (attn_set_region_runner): the
results equal those of attn's own pool bit for bit (forward and backward, several thread
counts, torch.set_num_threads(1) included) and the float64 reference within 1e-5; a process
whose calls ran on PyTorch's threads forks, and its children's calls (on attn's own pool)
equal the parent's; ATTN_TORCH_THREADS=own keeps attn's pool."""
import multiprocessing
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import attn.torch as attn_torch  # noqa: E402
from attn import _attn as extension  # noqa: E402

from reference import reference  # noqa: E402

B, T, HQ, HKV, D = 2, 192, 8, 2, 32
OPENMP = "OpenMP" in torch.__config__.parallel_info()


def _inputs(requires_grad=False):
    generator = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(B, T, h, D, generator=generator) for h in (HQ, HKV, HKV))
    return [x.requires_grad_(requires_grad) for x in (q, k, v)]


def _runtime():
    return os.path.join(os.path.dirname(torch.__file__), "lib", "libgomp.so.1")


def _forward_and_gradients(threads):
    q, k, v = _inputs(requires_grad=True)
    out, lse = attn_torch.attention(q, k, v, causal="bottom-right", threads=threads)
    (out * torch.linspace(-1, 1, D)).sum().backward()
    return [t.detach().clone() for t in (out, lse, q.grad, k.grad, v.grad)]


@pytest.mark.skipif(not OPENMP, reason="PyTorch's intra-op backend is not OpenMP")
def test_torch_threads_in_use_and_results_bitwise_the_own_pool():
    assert attn_torch._TORCH_THREADS
    q, k, v = _inputs()
    expected, _ = reference(q.numpy(), k.numpy(), v.numpy(), causal="bottom-right")
    previous = torch.get_num_threads()
    try:
        for torch_threads in (2, 1):
            torch.set_num_threads(torch_threads)
            for threads in (None, 2, 3):
                assert extension.use_openmp(_runtime()) or extension.use_openmp("libgomp.so.1")
                on_torch = _forward_and_gradients(threads)
                extension.use_openmp(None)
                on_own = _forward_and_gradients(threads)
                for a, b in zip(on_torch, on_own):
                    assert torch.equal(a, b)
                assert np.max(np.abs(on_torch[0].numpy() - expected)) <= 1e-5
    finally:
        torch.set_num_threads(previous)
        attn_torch._use_torch_threads()


def _child(threads):
    q, k, v = _inputs()
    return attn_torch.attention(q, k, v, causal="bottom-right", threads=threads)[0].numpy()


@pytest.mark.skipif(not OPENMP, reason="PyTorch's intra-op backend is not OpenMP")
def test_fork_after_calls_on_torch_threads():
    assert attn_torch._TORCH_THREADS
    q, k, v = _inputs()
    parent = attn_torch.attention(q, k, v, causal="bottom-right", threads=2)[0].numpy()
    context = multiprocessing.get_context("fork")
    with context.Pool(2) as pool:
        results = pool.map_async(_child, [2, 2, 1]).get(timeout=60)
    for result in results:
        assert np.array_equal(result, parent)
    again = attn_torch.attention(q, k, v, causal="bottom-right", threads=2)[0].numpy()
    assert np.array_equal(again, parent)


def test_environment_keeps_the_own_pool():
    code = "import attn.torch as t; print(t._TORCH_THREADS)"
    environment = dict(os.environ, ATTN_TORCH_THREADS="own")
    result = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True,
                            text=True, timeout=120, check=True)
    assert result.stdout.strip() == "False"
