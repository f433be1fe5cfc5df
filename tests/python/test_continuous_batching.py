"""transformers' continuous batching (model.generate_batch) with attn computing the attention
(attn.hf.generate_batch): the same greedy tokens as continuous batching on sdpa and as
ordinary generate, for a Llama (GQA) and a Mistral with a sliding window shorter than the
prompts; the model's attention implementation is restored afterwards."""
import pytest
import torch

import attn.hf

transformers = pytest.importorskip("transformers")
pytest.importorskip("transformers.generation.continuous_batching")

PROMPTS = [[1, 5, 7, 9], [3, 4], [8, 8, 8, 8, 8, 8, 2, 6, 5], [2] * 20, [11]]


def model_of(name):
    torch.manual_seed(0)
    common = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2)
    if name == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**common)).eval()
    return transformers.MistralForCausalLM(
        transformers.MistralConfig(sliding_window=5, **common)).eval()


@pytest.mark.parametrize("name", ["llama", "mistral"])
def test_generate_batch_tokens_equal_sdpa(name):
    model = model_of(name)
    model.config._attn_implementation = "sdpa"
    config = transformers.GenerationConfig(max_new_tokens=10, do_sample=False, eos_token_id=-1)
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    small = dict(continuous_batching_config=ContinuousBatchingConfig(
        num_blocks=16, max_batch_tokens=64, page_size=16), progress_bar=False)
    want = model.generate_batch(PROMPTS, generation_config=config, **small)
    got = attn.hf.generate_batch(model, PROMPTS, generation_config=config, threads=2, **small)
    assert model.config._attn_implementation == "sdpa"
    assert sorted(got) == sorted(want)
    for request in want:
        assert got[request].generated_tokens == want[request].generated_tokens, request
    # and ordinary generate, one prompt at a time
    for request, prompt in zip(sorted(want, key=lambda r: int(r.split("_")[1])), PROMPTS):
        ids = model.generate(torch.tensor([prompt]), max_new_tokens=10, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
        assert ids[0, len(prompt):].tolist() == got[request].generated_tokens, request
