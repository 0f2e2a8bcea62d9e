"""The peer of benchmarks/transformer_vs_hf.py: a plain PyTorch training loop around Hugging Face transformers'
GPT2LMHeadModel or LlamaForCausalLM, built from a config (no weights downloaded), at a bench shape id's numbers.

    hf_transformer_loop.py SHAPE_ID --batch B --seq T --threads N --warmup W --steps S --windows K

The same step as bench's worker: AdamW (lr 1e-3, betas 0.9/0.95, weight decay 0.1, foreach), fp32, PyTorch's SDPA
attention, the loss over every position. Prints one line per window: `window K: X tokens/s`.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import transformers  # noqa: E402

from models.workloads.transformer.shapes import lookup  # noqa: E402


def model_for(shape):
    if shape.style == "gpt2":
        config = transformers.GPT2Config(n_embd=shape.width, n_layer=shape.layers, n_head=shape.heads,
                                         n_positions=shape.seq, vocab_size=shape.vocab, n_inner=shape.ffn,
                                         activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                                         attn_pdrop=0.0, tie_word_embeddings=shape.tied)
        return transformers.GPT2LMHeadModel(config)
    config = transformers.LlamaConfig(hidden_size=shape.width, num_hidden_layers=shape.layers,
                                      num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
                                      intermediate_size=shape.ffn, vocab_size=shape.vocab,
                                      max_position_embeddings=shape.seq, rope_theta=shape.rope_theta,
                                      tie_word_embeddings=shape.tied)
    return transformers.LlamaForCausalLM(config)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("shape")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--windows", type=int, default=3)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    shape = lookup(a.shape)
    model = model_for(shape)
    model.config._attn_implementation = "sdpa"
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
    # seq + 1 tokens a window, as bench's worker reads: the model sees seq of them.
    tokens = torch.randint(0, shape.vocab, (4, a.batch, a.seq + 1), generator=torch.Generator().manual_seed(0))

    def step(i):
        batch = tokens[i % len(tokens)]
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=batch[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                                 batch[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        return loss

    for i in range(a.warmup):
        step(i)
    for w in range(a.windows):
        t0 = time.perf_counter()
        for i in range(a.steps):
            step(i)
        elapsed = time.perf_counter() - t0
        print(f"window {w}: {a.steps * a.batch * a.seq / elapsed:.1f} tokens/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
