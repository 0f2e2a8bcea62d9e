"""A compact decoder-only transformer in PyTorch, built from a models/workloads/transformer/shapes.Shape.

Bench's own definition rather than a library's, so a worker needs nothing beyond torch (the GPU device kit has no
package index). tests/test_transformer_model.py proves it is the model users know: at the same shape and weights it
gives Hugging Face transformers' GPT2LMHeadModel's and LlamaForCausalLM's logits and loss, and it has their
parameter counts.

Attention is PyTorch's fused scaled_dot_product_attention (causal); which of its kernels ran is asked of the
dispatcher (`sdpa_kernel_used`) and recorded, since a silent fall-back to the math kernel costs memory and time.
q, k and v come from one matrix multiply (and SwiGLU's gate and up from one), which is the same arithmetic as
separate projections and fewer kernel launches.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from models.workloads.transformer.shapes import Shape


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        # In fp32 whatever the compute precision, as Llama's reference does.
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rope_tables(shape: Shape, seq: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of each position's rotation angles, (seq, head_dim), the half-split layout Llama uses."""
    d = shape.head_dim
    inv_freq = 1.0 / (shape.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=device) / d))
    angles = torch.outer(torch.arange(seq, dtype=torch.float32, device=device), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos + rotated * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, shape: Shape):
        super().__init__()
        self.shape = shape
        self.qkv = nn.Linear(shape.width, shape.width + 2 * shape.kv_width, bias=shape.bias)
        self.out = nn.Linear(shape.width, shape.width, bias=shape.bias)

    def forward(self, x, rope=None):
        b, t, _ = x.shape
        s = self.shape
        h = self.qkv(x)
        # Under tensor parallel (models/workloads/transformer/tensor_parallel.py) a rank computes 1/tp of the heads
        tp = (s.width + 2 * s.kv_width) // h.shape[-1]
        heads, kv_heads = s.heads // tp, s.kv_heads // tp
        q, k, v = h.split((s.width // tp, s.kv_width // tp, s.kv_width // tp), dim=-1)
        q = q.view(b, t, heads, s.head_dim).transpose(1, 2)
        k = k.view(b, t, kv_heads, s.head_dim).transpose(1, 2)
        v = v.view(b, t, kv_heads, s.head_dim).transpose(1, 2)
        if rope is not None:
            cos, sin = rope
            q, k = _rotate(q, cos[:t], sin[:t]), _rotate(k, cos[:t], sin[:t])
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv_heads != heads)
        return self.out(y.transpose(1, 2).reshape(b, t, heads * s.head_dim))


class MLP(nn.Module):
    def __init__(self, shape: Shape):
        super().__init__()
        self.swiglu = shape.style == "llama"
        inner = 2 * shape.ffn if self.swiglu else shape.ffn  # SwiGLU: gate and up in one product
        self.up = nn.Linear(shape.width, inner, bias=shape.bias)
        self.down = nn.Linear(shape.ffn, shape.width, bias=shape.bias)

    def forward(self, x):
        h = self.up(x)
        if self.swiglu:
            gate, up = h.chunk(2, dim=-1)
            return self.down(F.silu(gate) * up)
        return self.down(F.gelu(h, approximate="tanh"))


class Block(nn.Module):
    def __init__(self, shape: Shape):
        super().__init__()
        norm = (lambda: nn.LayerNorm(shape.width, eps=shape.norm_eps)) if shape.style == "gpt2" else (
            lambda: RMSNorm(shape.width, shape.norm_eps))
        self.attn_norm, self.attn = norm(), Attention(shape)
        self.mlp_norm, self.mlp = norm(), MLP(shape)

    def forward(self, x, rope=None):
        x = x + self.attn(self.attn_norm(x), rope)
        return x + self.mlp(self.mlp_norm(x))


class Decoder(nn.Module):
    """Token ids (batch, seq) → logits (batch, seq, vocab)."""

    def __init__(self, shape: Shape, checkpointing: bool = False):
        super().__init__()
        self.shape, self.checkpointing = shape, checkpointing
        self.embed = nn.Embedding(shape.vocab, shape.width)
        self.positions = nn.Embedding(shape.seq, shape.width) if shape.style == "gpt2" else None
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.norm = nn.LayerNorm(shape.width, eps=shape.norm_eps) if shape.style == "gpt2" else RMSNorm(
            shape.width, shape.norm_eps)
        self.head = nn.Linear(shape.width, shape.vocab, bias=False)
        if shape.tied:
            self.head.weight = self.embed.weight
        self._rope_cache: tuple | None = None
        self.head_loss = head_loss  # compile_parts puts a compiled one here

    def init_weights(self, seed: int = 0) -> None:
        """GPT-2's initialisation (normal, std 0.02; residual projections scaled by 1/sqrt(2·layers)), from `seed`
        so every rank and the single-process reference start equal."""
        g = torch.Generator().manual_seed(seed)
        for name, p in self.named_parameters():
            if p.dim() == 1:
                with torch.no_grad():
                    p.fill_(1.0 if name.endswith("norm.weight") else 0.0)
                continue
            std = 0.02 / math.sqrt(2 * self.shape.layers) if name.endswith(("attn.out.weight", "mlp.down.weight")) \
                else 0.02
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=g) * std)

    def _rope(self, t: int, device):
        if self.shape.style != "llama":
            return None
        if self._rope_cache is None or self._rope_cache[0].shape[0] < t or self._rope_cache[0].device != device:
            self._rope_cache = rope_tables(self.shape, max(t, self.shape.seq), device)
        return self._rope_cache

    def forward(self, idx, targets=None):
        """Logits (batch, seq, vocab); with `targets` (batch, seq), the mean next-token cross-entropy instead, computed
        by `self.head_loss` (compiled with the blocks by `compile_parts`)."""
        t = idx.shape[1]
        x = self.embed(idx)
        if self.positions is not None:
            x = x + self.positions(torch.arange(t, device=idx.device))
        rope = self._rope(t, idx.device)
        for block in self.blocks:
            # Activation checkpointing per block: the block's activations are recomputed in the backward pass.
            x = checkpoint(block, x, rope, use_reentrant=False) if self.checkpointing and self.training else \
                block(x, rope)
        if targets is not None:
            return self.head_loss(self.norm, self.head, x, targets)
        return self.head(self.norm(x))

    def compile_parts(self, mode: str | None) -> None:
        """torch.compile each block (one graph the blocks share) and the final norm, head and loss together, as
        nanoGPT compiles its loss with its model: inductor can then fuse the head's fp32 cast into the cross-entropy
        rather than write and read a (batch, seq, vocab) fp32 tensor (GPT-2's 50,257-wide logits are the largest
        activation of the step).
        The embedding lookups stay eager. `mode`: None for torch.compile's default, or one of its modes."""
        for block in self.blocks:
            block.compile(mode=mode)
        self.head_loss = torch.compile(head_loss, mode=mode)


def next_token_loss(logits, tokens):
    """Mean cross-entropy of predicting tokens[:, 1:] from logits[:, :-1] (how transformers' models shift labels)."""
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1))


def head_loss(norm, head, x, targets):
    """The final norm, the output head and the mean cross-entropy of the last block's output `x` against `targets`,
    in fp32 whatever the compute precision."""
    logits = head(norm(x))
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def window_loss(model, windows):
    """Mean cross-entropy of a batch of token windows (batch, seq + 1): the model reads the first seq tokens of each
    and predicts the next at every position, so a window trains seq tokens. Through the model's forward (DDP's and
    FSDP2's hooks run), which computes the loss itself."""
    return model(windows[:, :-1], windows[:, 1:])


def build(shape: Shape, *, checkpointing: bool = False, device="cpu", seed: int = 0) -> Decoder:
    """The model on `device`, initialised from `seed` (on the meta device: shapes only, nothing initialised)."""
    if str(device) == "meta":
        with torch.device("meta"):
            return Decoder(shape, checkpointing)
    model = Decoder(shape, checkpointing)
    model.init_weights(seed)
    return model.to(device)


# The kernels scaled_dot_product_attention dispatches to, by the aten op that runs (torch 2.x names).
SDPA_KERNELS = {
    "_scaled_dot_product_flash_attention": "flash",
    "_scaled_dot_product_flash_attention_for_cpu": "flash (cpu)",
    "_scaled_dot_product_efficient_attention": "memory-efficient",
    "_scaled_dot_product_cudnn_attention": "cudnn",
    "_scaled_dot_product_fused_attention_overrideable": "fused (backend-provided)",
    "_scaled_dot_product_attention_math": "math",
}


def sdpa_kernel_used(shape: Shape, batch: int, seq: int, dtype, device) -> str:
    """Which kernel scaled_dot_product_attention picks for this shape, dtype and device, asked of the dispatcher
    with one call on tensors of the cell's sizes; 'unknown' if none of the known ops ran."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func.__name__.split(".")[0])
            return func(*args, **(kwargs or {}))

    q = torch.zeros(batch, shape.heads, seq, shape.head_dim, dtype=dtype, device=device)
    kv = torch.zeros(batch, shape.kv_heads, seq, shape.head_dim, dtype=dtype, device=device)
    with torch.no_grad(), Watch():
        F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=shape.kv_heads != shape.heads)
    return next((SDPA_KERNELS[op] for op in seen if op in SDPA_KERNELS), "unknown")
