"""attn.torch under torch.compile: the custom ops' fake kernels declare exactly what the CPU
kernels return (torch.library.opcheck on both ops, with and without the LSE gradient, GQA,
masks, biases, bf16), compiled training steps (fullgraph, forward and backward) equal eager
ones, and the inference fast path never runs while something traces or records."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import attn.torch as at


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=torch.float64).to(dtype)


# (mask, bias, causal, alignment, window, window_left, window_right, scale, softcap, alibi)
def _configs(B, Hq, Tq, Tk, dtype):
    mask = torch.rand(B, 1, Tq, Tk) > 0.3
    mask[..., 0] = True
    bias = randn(1, Hq, Tq, Tk)
    return [
        dict(mask=None, bias=None, causal=True, alignment=1),
        dict(mask=mask.expand(B, Hq, Tq, Tk), bias=None, causal=False, alignment=0),
        dict(mask=None, bias=bias.to(dtype), causal=False, alignment=2, window=True,
             window_left=3, window_right=1, scale=0.5, softcap=2.0),
    ]


def _op_arguments(config):
    return (config.get("mask"), config.get("bias"), None, config["causal"],
            config["alignment"], config.get("window", False), config.get("window_left", -1),
            config.get("window_right", -1), config.get("scale"), config.get("softcap", 0.0),
            False, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck_both_ops_with_and_without_lse_gradient(dtype):
    B, Tq, Tk, Hq, Hkv = 2, 5, 7, 4, 2
    for config in _configs(B, Hq, Tq, Tk, dtype):
        q, k, v = randn(B, Tq, Hq, 8, dtype=dtype), randn(B, Tk, Hkv, 8, dtype=dtype), \
            randn(B, Tk, Hkv, 6, dtype=dtype)
        options = _op_arguments(config)
        out, lse = torch.ops.attn.forward(q, k, v, *options)
        torch.library.opcheck(torch.ops.attn.forward.default,
                              (q.requires_grad_(), k.requires_grad_(), v.requires_grad_(),
                               *options))
        dout = randn(*out.shape, dtype=dtype)
        for dlse in (None, randn(*lse.shape)):
            args = (q.detach(), k.detach(), v.detach(), out, lse, dout, dlse, *options)
            torch.library.opcheck(torch.ops.attn.backward.default, args)
            dq, dk, dv, _ = torch.ops.attn.backward(*args)
            for g in (dq, dk, dv):
                assert g.is_contiguous() and g.dtype == dtype
            torch.library.opcheck(torch.ops.attn.backward.default, args + (2,))   # threads


class TinyAttention(torch.nn.Module):
    """Projections, GQA attention through attn.torch.attention, an output projection; the
    loss uses the output and (optionally) the LSE."""

    def __init__(self, d=32, hq=4, hkv=2, head=8):
        super().__init__()
        self.hq, self.hkv, self.head = hq, hkv, head
        self.q = torch.nn.Linear(d, hq * head)
        self.kv = torch.nn.Linear(d, 2 * hkv * head)
        self.o = torch.nn.Linear(hq * head, d)

    def forward(self, x, mask=None, bias=None, causal="bottom-right", use_lse=True):
        B, T, _ = x.shape
        q = self.q(x).view(B, T, self.hq, self.head)
        k, v = self.kv(x).view(B, T, 2, self.hkv, self.head).unbind(2)
        out, lse = at.attention(q, k, v, causal=causal, mask=mask, bias=bias,
                                empty_rows="zero")
        y = self.o(out.reshape(B, T, -1))
        loss = y.float().pow(2).mean()
        if use_lse:
            loss = loss + 0.1 * torch.logsumexp(lse, dim=-1).mean()
        return loss


def _step(model, run, *args, **kwargs):
    """One training step of `run` (model, or model compiled): the loss and model's gradients."""
    model.zero_grad()
    loss = run(*args, **kwargs)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _compare(backend, dtype, use_lse, mask, bias, causal, loss_tol, grad_tol):
    torch.manual_seed(0)
    model = TinyAttention().to(dtype)
    x = randn(2, 9, 32, dtype=dtype)
    kwargs = dict(mask=mask, bias=bias, causal=causal, use_lse=use_lse)
    want_loss, want = _step(model, model, x, **kwargs)
    torch._dynamo.reset()                               # each test's graphs, no recompile limit
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    for _ in range(2):                                  # the second step reuses the graph
        got_loss, got = _step(model, compiled, x, **kwargs)
        torch.testing.assert_close(got_loss, want_loss, rtol=loss_tol, atol=loss_tol)
        for name in want:
            torch.testing.assert_close(got[name], want[name], rtol=grad_tol, atol=grad_tol)


def test_compiled_training_step_inductor_lse_gradient_gqa_mask():
    """Inductor asserts every custom op output's strides against the fake kernel: the LSE
    gradient path (dv computed with a padding column) must return contiguous gradients."""
    mask = torch.ones(2, 1, 9, 9, dtype=torch.bool).tril()
    mask[1, :, :, :3] = False                           # left padding of the second batch
    mask[1, :, :, 3] = True
    _compare("inductor", torch.float32, True, mask, None, None, 1e-5, 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("use_lse", [False, True])
@pytest.mark.parametrize("masking", ["causal", "mask", "bias"])
def test_compiled_training_step_matches_eager(dtype, use_lse, masking):
    mask = bias = causal = None
    if masking == "causal":
        causal = "bottom-right"
    elif masking == "mask":
        mask = torch.rand(2, 4, 9, 9) > 0.4
        mask[..., 0] = True
    else:
        bias = randn(1, 4, 9, 9, dtype=dtype)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    _compare("aot_eager", dtype, use_lse, mask, bias, causal, tol, tol)


def test_compiled_hf_llama_training_step_matches_eager():
    """A Llama-architecture model (random weights, GQA, four layers) through attn, one
    training step compiled with fullgraph=True: loss and every gradient within 1e-5 of
    eager."""
    transformers = pytest.importorskip("transformers")
    import attn.hf
    attn.hf.register()
    config = transformers.LlamaConfig(vocab_size=61, hidden_size=32, intermediate_size=48,
                                      num_hidden_layers=4, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=32)
    config._attn_implementation = "attn"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).train()
    ids = torch.randint(0, 61, (2, 8))

    def loss(run):
        return lambda: run(input_ids=ids, labels=ids).loss

    want_loss, want = _step(model, loss(model))
    torch._dynamo.reset()
    got_loss, got = _step(model, loss(torch.compile(model, backend="aot_eager",
                                                     fullgraph=True)))
    assert abs(float(got_loss) - float(want_loss)) < 1e-5
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-5)


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_fast_path_never_runs_when_traced_recorded_or_under_a_mode():
    q, k, v = randn(1, 6, 2, 8), randn(1, 6, 2, 8), randn(1, 6, 2, 8)
    want, _ = at.attention(q, k, v, causal="bottom-right")     # the fast path (inference)
    with torch.no_grad(), _Recorder() as recorder:
        got, _ = at.attention(q, k, v, causal="bottom-right")
    assert any("attn.forward" in op for op in recorder.ops)
    assert torch.equal(got, want)
    graphs = []

    def backend(graph, inputs):
        graphs.append(str(graph.graph))
        return graph.forward

    with torch.no_grad():
        got = torch.compile(lambda a, b, c: at.attention(a, b, c, causal="bottom-right")[0],
                            backend=backend, fullgraph=True)(q, k, v)
    assert "attn.forward" in graphs[0]
    assert torch.equal(got, want)
    leaf = q.clone().requires_grad_()
    out, _ = at.attention(leaf, k, v, causal="bottom-right")
    assert out.grad_fn is not None                              # recorded: through the op
