"""The decoder-only transformer configurations bench trains, their exact parameter counts and FLOPs per token.

Plain arithmetic, no torch: the control plane reads it to plan cells and compute MFU.
models/workloads/transformer/model.py builds the module from a `Shape`; tests/test_transformer_model.py holds the counts
here to the built module's and the module's logits to Hugging Face transformers' GPT-2 and Llama at the same shape and
weights.

Two styles, the two families users train:
- `gpt2`: learned position embeddings, LayerNorm with bias, GELU (tanh) MLP, biases in every linear layer, the output
  head tied to the token embedding (Radford et al., 2019; the 124M and 350M shapes are GPT-2 small and medium).
- `llama`: rotary position embeddings (RoPE), RMSNorm, SwiGLU MLP, grouped-query attention (fewer key/value heads
  than query heads), no biases (Llama 3: Grattafiori et al., 2024, "The Llama 3 Herd of Models", table 3).

FLOPs (`flops_per_token`) follow the convention of PaLM's appendix B (Chowdhery et al., 2022) that nanoGPT and
torchtitan use for MFU: 6·N + 12·L·H·Q·T per trained token, where N is the parameters a token is multiplied by, L
the layers, H the query heads, Q the head width and T the sequence length. 6·N is the forward pass's 2 FLOPs per
multiply-add times 3 (forward, and a backward pass of two products of the same size); 12·L·H·Q·T is the attention
scores and the weighted sum of values, 2·2·T·Q per head and layer forward, times 3. As torchtitan does, causal
masking is not discounted (the kernel's skipped half is still counted) and activation recomputation is not counted
(MFU stays a property of the model, not of the memory trade). N here is every matrix a token goes through — each
block's weights and the output head — and not what is looked up (the token embedding when untied, GPT-2's position
table), normalisation or biases: they are no matrix multiplies. This is nanoGPT's count (its position table left
out) and it keeps the output head, which torchtitan's "parameters less the embedding" drops for a tied model.
torch.utils.flop_counter counts the same training step a second way (tests/test_transformer_model.py).
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields

STYLES = ("gpt2", "llama")


@dataclass(frozen=True)
class Shape:
    """One decoder-only transformer: what decides its parameters, its FLOPs and its memory."""

    style: str  # gpt2 | llama
    layers: int
    width: int  # the residual stream (d_model)
    heads: int  # query heads
    kv_heads: int  # key/value heads (grouped-query attention when fewer than heads)
    ffn: int  # the MLP's inner width (SwiGLU: of each of its gate and up projections)
    vocab: int
    seq: int  # the context the model is built for (GPT-2's position table is this long); a cell may train shorter
    tied: bool  # the output head shares the token embedding's matrix
    norm_eps: float = 1e-5
    rope_theta: float = 10_000.0  # llama only

    def __post_init__(self):
        problems = self.problems()
        if problems:
            raise ValueError(f"transformer shape: {'; '.join(problems)}")

    def problems(self) -> list[str]:
        out = []
        if self.style not in STYLES:
            out.append(f"style {self.style!r} is not one of {', '.join(STYLES)}")
        for name in ("layers", "width", "heads", "kv_heads", "ffn", "vocab", "seq"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) <= 0:
                out.append(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if out:
            return out
        if self.width % self.heads:
            out.append(f"width {self.width} is not a multiple of heads {self.heads}")
        elif (self.width // self.heads) % 2 and self.style == "llama":
            out.append(f"head width {self.width // self.heads} is odd: RoPE rotates pairs of features")
        if self.heads % self.kv_heads:
            out.append(f"heads {self.heads} is not a multiple of kv_heads {self.kv_heads}")
        if self.style == "gpt2" and self.kv_heads != self.heads:
            out.append("GPT-2 style has as many key/value heads as query heads")
        return out

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def bias(self) -> bool:
        return self.style == "gpt2"

    # --- parameters ---------------------------------------------------------------------------------------------
    def block_matrices(self) -> int:
        """Weights of one block's matrix multiplies: attention's q, k, v and output, and the MLP's."""
        attention = self.width * (self.width + 2 * self.kv_width) + self.width * self.width
        mlp = (3 if self.style == "llama" else 2) * self.width * self.ffn
        return attention + mlp

    def block_vectors(self) -> int:
        """One block's biases and norm weights."""
        norms = 2 * self.width * (2 if self.style == "gpt2" else 1)  # LayerNorm has a bias, RMSNorm does not
        biases = (self.width + 2 * self.kv_width + self.width + self.ffn + self.width) if self.bias else 0
        return norms + biases

    def params(self) -> int:
        """Every parameter, counted once (a tied head is the embedding)."""
        embedding = self.vocab * self.width
        positions = self.seq * self.width if self.style == "gpt2" else 0
        final_norm = self.width * (2 if self.style == "gpt2" else 1)
        head = 0 if self.tied else self.vocab * self.width
        return embedding + positions + self.layers * (self.block_matrices() + self.block_vectors()) + final_norm + head

    def matmul_params(self) -> int:
        """N of the FLOP convention: the blocks' matrices and the output head (tied or not)."""
        return self.layers * self.block_matrices() + self.vocab * self.width

    # --- FLOPs --------------------------------------------------------------------------------------------------
    def flops_per_token(self, seq: int | None = None) -> int:
        """Training FLOPs per token at sequence length `seq` (the shape's own by default): 6·N + 12·L·H·Q·T."""
        t = seq or self.seq
        return 6 * self.matmul_params() + 12 * self.layers * self.heads * self.head_dim * t

    def flops_per_sequence(self, seq: int | None = None) -> int:
        t = seq or self.seq
        return self.flops_per_token(t) * t

    def as_dict(self) -> dict:
        return asdict(self)


# The configurations by name. Parameter counts (tests hold `params()` to the built module and, for the GPT-2 and
# Llama shapes, to transformers' own classes built from the same config):
#   gpt2-124m   124,439,808  GPT-2 small (the "124M" of nanoGPT and llm.c)
#   gpt2-350m   354,823,168  GPT-2 medium
#   llama3-1b 1,235,814,400  Llama 3.2 1B's shape (tied head); its long-context RoPE scaling, which changes the
#                            rotation frequencies and not the cost, is left out
#   llama3-8b 8,030,261,248  Llama 3 8B (the 3.1 release differs only in that RoPE scaling)
#   llama3-70b  70,553,706,496   Llama 3 70B, and llama3-405b 405,853,388,800: the paper's shapes (Grattafiori et
#                                al., 2024, "The Llama 3 Herd of Models", table 3: layers, width, heads, key/value
#                                heads; FFN widths 28,672 and 53,248 as torchtitan's llama3 args); for cluster cells
#   tiny        for the CPU cells: Llama-style (RoPE, RMSNorm, SwiGLU, grouped-query attention) at a size 2 cores
#               train in well under a second a step
CONFIGS: dict[str, Shape] = {
    "gpt2-124m": Shape("gpt2", layers=12, width=768, heads=12, kv_heads=12, ffn=3072, vocab=50_257, seq=1024,
                       tied=True),
    "gpt2-350m": Shape("gpt2", layers=24, width=1024, heads=16, kv_heads=16, ffn=4096, vocab=50_257, seq=1024,
                       tied=True),
    "llama3-1b": Shape("llama", layers=16, width=2048, heads=32, kv_heads=8, ffn=8192, vocab=128_256, seq=8192,
                       tied=True, rope_theta=500_000.0),
    "llama3-8b": Shape("llama", layers=32, width=4096, heads=32, kv_heads=8, ffn=14_336, vocab=128_256, seq=8192,
                       tied=False, rope_theta=500_000.0),
    "llama3-70b": Shape("llama", layers=80, width=8192, heads=64, kv_heads=8, ffn=28_672, vocab=128_256, seq=8192,
                        tied=False, rope_theta=500_000.0),
    "llama3-405b": Shape("llama", layers=126, width=16_384, heads=128, kv_heads=8, ffn=53_248, vocab=128_256,
                         seq=8192, tied=False, rope_theta=500_000.0),
    "tiny": Shape("llama", layers=2, width=128, heads=4, kv_heads=2, ffn=384, vocab=4096, seq=128, tied=True),
}

# A shape given in the matrix rather than by name: its id says every number that decides what is measured, so two
# cells of the same shape share an id and a changed number is a new cell.
_SHAPE_KEYS = ("style", "layers", "width", "heads", "kv_heads", "ffn", "vocab", "seq", "tied")
_ID = re.compile(r"^(gpt2|llama)-L(\d+)-d(\d+)-h(\d+)-kv(\d+)-f(\d+)-v(\d+)-t(\d+)-(tied|untied)$")


def shape_id(shape: Shape) -> str:
    """The name of a shape given by its numbers: llama-L2-d128-h4-kv2-f384-v4096-t128-tied."""
    return (f"{shape.style}-L{shape.layers}-d{shape.width}-h{shape.heads}-kv{shape.kv_heads}-f{shape.ffn}"
            f"-v{shape.vocab}-t{shape.seq}-{'tied' if shape.tied else 'untied'}")


def shape_from_id(name: str) -> Shape | None:
    """The shape a `shape_id` names, or None if `name` is not one."""
    m = _ID.match(name)
    if not m:
        return None
    style, *numbers, tied = m.groups()
    layers, width, heads, kv_heads, ffn, vocab, seq = (int(x) for x in numbers)
    return Shape(style, layers=layers, width=width, heads=heads, kv_heads=kv_heads, ffn=ffn, vocab=vocab, seq=seq,
                 tied=tied == "tied")


def shape_from_mapping(values: dict) -> Shape:
    """A shape from the matrix's numbers (every key of `_SHAPE_KEYS`; norm_eps and rope_theta optional)."""
    known = {f.name for f in fields(Shape)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"transformer shape: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")
    missing = [k for k in _SHAPE_KEYS if k not in values]
    if missing:
        raise ValueError(f"transformer shape: missing {', '.join(missing)}")
    return Shape(**values)


def lookup(name: str) -> Shape:
    """A configuration by name or by shape id; ValueError naming the known ones otherwise."""
    shape = CONFIGS.get(name) or shape_from_id(name)
    if shape is None:
        raise ValueError(f"unknown transformer {name!r} (known: {', '.join(CONFIGS)}, or a shape id such as "
                         f"{shape_id(CONFIGS['tiny'])})")
    return shape
