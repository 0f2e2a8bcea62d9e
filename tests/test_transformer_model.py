"""The transformer bench trains is the one users know, and its FLOPs are counted right.

- Parameter counts: each named configuration's `Shape.params()` equals the module bench builds and the module
  Hugging Face transformers builds from the same config (on the meta device: no memory), and GPT-2 small is the
  published 124,439,808.
- Equality: at small GPT-2 and Llama shapes with the same weights copied across, bench's logits and loss equal
  transformers' GPT2LMHeadModel's and LlamaForCausalLM's (fp32, eval mode).
- FLOPs: the convention in models/workloads/transformer/shapes.py (6·N + 12·L·H·Q·T per token) equals what
  torch.utils.flop_counter counts for one real training step.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from models.workloads.transformer import model as tfm  # noqa: E402
from models.workloads.transformer.shapes import (CONFIGS, Shape, lookup, shape_from_id,  # noqa: E402
                                                 shape_from_mapping, shape_id)


def hf_config(shape: Shape):
    if shape.style == "gpt2":
        return transformers.GPT2Config(n_embd=shape.width, n_layer=shape.layers, n_head=shape.heads,
                                       n_positions=shape.seq, vocab_size=shape.vocab, n_inner=shape.ffn,
                                       activation_function="gelu_new", layer_norm_epsilon=shape.norm_eps,
                                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                       tie_word_embeddings=shape.tied)
    return transformers.LlamaConfig(hidden_size=shape.width, num_hidden_layers=shape.layers,
                                    num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
                                    intermediate_size=shape.ffn, vocab_size=shape.vocab,
                                    max_position_embeddings=shape.seq, rms_norm_eps=shape.norm_eps,
                                    rope_theta=shape.rope_theta, tie_word_embeddings=shape.tied,
                                    attention_bias=False, mlp_bias=False, hidden_act="silu")


def hf_model(shape: Shape, device="cpu"):
    cls = transformers.GPT2LMHeadModel if shape.style == "gpt2" else transformers.LlamaForCausalLM
    with torch.device(device):
        return cls(hf_config(shape))


def count(module) -> int:
    return sum(p.numel() for p in module.parameters())  # a tied matrix is one parameter, counted once


@pytest.mark.parametrize("name", list(CONFIGS))
def test_parameter_counts_match_transformers_and_the_built_module(name):
    shape = CONFIGS[name]
    assert count(tfm.build(shape, device="meta")) == shape.params()
    assert count(hf_model(shape, "meta")) == shape.params()


def test_gpt2_small_is_the_published_124m():
    assert CONFIGS["gpt2-124m"].params() == 124_439_808
    assert CONFIGS["llama3-8b"].params() == 8_030_261_248
    assert CONFIGS["llama3-70b"].params() == 70_553_706_496  # the published 70B and 405B
    assert CONFIGS["llama3-405b"].params() == 405_853_388_800


def copy_from_hf(ours: tfm.Decoder, theirs) -> None:
    """transformers' weights into bench's module (GPT-2's Conv1D stores (in, out): transposed)."""
    s = ours.shape
    sd = theirs.state_dict()
    with torch.no_grad():
        if s.style == "gpt2":
            ours.embed.weight.copy_(sd["transformer.wte.weight"])
            ours.positions.weight.copy_(sd["transformer.wpe.weight"])
            for i, b in enumerate(ours.blocks):
                p = f"transformer.h.{i}."
                b.attn_norm.weight.copy_(sd[p + "ln_1.weight"]), b.attn_norm.bias.copy_(sd[p + "ln_1.bias"])
                b.attn.qkv.weight.copy_(sd[p + "attn.c_attn.weight"].T)
                b.attn.qkv.bias.copy_(sd[p + "attn.c_attn.bias"])
                b.attn.out.weight.copy_(sd[p + "attn.c_proj.weight"].T)
                b.attn.out.bias.copy_(sd[p + "attn.c_proj.bias"])
                b.mlp_norm.weight.copy_(sd[p + "ln_2.weight"]), b.mlp_norm.bias.copy_(sd[p + "ln_2.bias"])
                b.mlp.up.weight.copy_(sd[p + "mlp.c_fc.weight"].T), b.mlp.up.bias.copy_(sd[p + "mlp.c_fc.bias"])
                b.mlp.down.weight.copy_(sd[p + "mlp.c_proj.weight"].T), b.mlp.down.bias.copy_(sd[p + "mlp.c_proj.bias"])
            ours.norm.weight.copy_(sd["transformer.ln_f.weight"]), ours.norm.bias.copy_(sd["transformer.ln_f.bias"])
        else:
            ours.embed.weight.copy_(sd["model.embed_tokens.weight"])
            for i, b in enumerate(ours.blocks):
                p = f"model.layers.{i}."
                b.attn_norm.weight.copy_(sd[p + "input_layernorm.weight"])
                b.attn.qkv.weight.copy_(torch.cat([sd[p + f"self_attn.{x}_proj.weight"] for x in "qkv"]))
                b.attn.out.weight.copy_(sd[p + "self_attn.o_proj.weight"])
                b.mlp_norm.weight.copy_(sd[p + "post_attention_layernorm.weight"])
                b.mlp.up.weight.copy_(torch.cat([sd[p + "mlp.gate_proj.weight"], sd[p + "mlp.up_proj.weight"]]))
                b.mlp.down.weight.copy_(sd[p + "mlp.down_proj.weight"])
            ours.norm.weight.copy_(sd["model.norm.weight"])
        if not s.tied:
            ours.head.weight.copy_(sd["lm_head.weight"])


SMALL = {
    "gpt2": Shape("gpt2", layers=2, width=64, heads=4, kv_heads=4, ffn=256, vocab=512, seq=32, tied=True),
    "llama-gqa": Shape("llama", layers=2, width=64, heads=8, kv_heads=2, ffn=160, vocab=512, seq=32, tied=False,
                       rope_theta=500_000.0),
    "llama-tied": Shape("llama", layers=2, width=64, heads=4, kv_heads=4, ffn=128, vocab=300, seq=32, tied=True),
}


@pytest.mark.parametrize("name", list(SMALL))
def test_same_weights_give_transformers_logits_and_loss(name):
    shape = SMALL[name]
    torch.manual_seed(1)
    theirs = hf_model(shape).eval()
    ours = tfm.build(shape).eval()
    copy_from_hf(ours, theirs)
    tokens = torch.randint(0, shape.vocab, (3, shape.seq), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = theirs(input_ids=tokens, labels=tokens)
        logits = ours(tokens)
        loss = tfm.next_token_loss(logits, tokens)
    torch.testing.assert_close(logits, out.logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(loss, out.loss, rtol=1e-5, atol=1e-5)


def test_a_wrong_rope_is_caught_by_the_equality_check():
    """The check can fail: a Llama with GPT-style interleaved RoPE (pairs (0,1), (2,3), ...) differs from
    transformers' half-split layout."""
    shape = SMALL["llama-gqa"]
    theirs = hf_model(shape).eval()
    ours = tfm.build(shape).eval()
    copy_from_hf(ours, theirs)
    tokens = torch.randint(0, shape.vocab, (2, shape.seq), generator=torch.Generator().manual_seed(3))

    def interleaved(x, cos, sin):
        pairs = x.unflatten(-1, (-1, 2))
        rotated = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
        return x * cos + rotated * sin

    original = tfm._rotate
    try:
        tfm._rotate = interleaved
        with torch.no_grad():
            wrong = ours(tokens)
    finally:
        tfm._rotate = original
    with torch.no_grad():
        right = theirs(input_ids=tokens).logits
    assert not torch.allclose(wrong, right, rtol=1e-3, atol=1e-3)


def counted_training_flops(shape: Shape, batch: int, seq: int) -> int:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    model = tfm.build(shape)
    tokens = torch.randint(0, shape.vocab, (batch, seq))
    # The flop counter has formulas for the GPU's fused attention kernels but none for the CPU's flash kernel, which
    # it would count as zero: on the CPU, attention runs as the math kernel's explicit batched matrix multiplies.
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
        tfm.next_token_loss(model(tokens), tokens).backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("name", ["gpt2", "llama-gqa"])
def test_flop_convention_equals_the_flop_counter(name):
    shape = SMALL[name]
    batch, seq = 2, 24  # shorter than the model's context: T in 12·L·H·Q·T is the trained length
    counted = counted_training_flops(shape, batch, seq)
    assert counted == batch * shape.flops_per_sequence(seq)


def test_flop_convention_would_notice_a_missing_term():
    """The check can fail: leaving out the attention term (12·L·H·Q·T) is visibly off the counted step."""
    shape = SMALL["gpt2"]
    counted = counted_training_flops(shape, 2, 32)
    assert counted != 2 * 32 * 6 * shape.matmul_params()


def test_shape_ids_round_trip_and_bad_shapes_say_why():
    tiny = CONFIGS["tiny"]
    assert shape_id(tiny) == "llama-L2-d128-h4-kv2-f384-v4096-t128-tied"
    assert shape_from_id(shape_id(tiny)) == tiny
    assert lookup(shape_id(CONFIGS["gpt2-124m"])) == CONFIGS["gpt2-124m"]
    with pytest.raises(ValueError, match="width 100 is not a multiple of heads 3"):
        shape_from_mapping(dict(style="llama", layers=1, width=100, heads=3, kv_heads=1, ffn=8, vocab=8, seq=8,
                                tied=True))
    with pytest.raises(ValueError, match="unknown key 'depth'"):
        shape_from_mapping({"depth": 3})
    with pytest.raises(ValueError, match="unknown transformer 'gpt5'"):
        lookup("gpt5")


def test_sdpa_kernel_is_named():
    kernel = tfm.sdpa_kernel_used(CONFIGS["tiny"], 2, 64, torch.float32, "cpu")
    assert kernel in tfm.SDPA_KERNELS.values()
