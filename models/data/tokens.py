"""Token windows for the transformer workload: synthetic, or read from a pre-tokenized file.

- synthetic: walks over a fixed random "language" in which each token has four possible successors. Random tokens
  drawn uniformly would leave nothing to learn (the loss would sit at ln(vocab)), and a falling loss is what shows a
  step is really training. A pool of batches is made on the device before the first step and cycled, so no step
  waits for input (as the image workloads' synthetic data).
- tokens: the flat file of token ids nanoGPT's and Megatron-style loaders read (train.bin: the ids back to back,
  no header; uint16 when the vocabulary fits, else uint32). Each step each rank reads random windows of seq + 1
  tokens (its own random stream, seeded by rank), copied to the device.
"""
from __future__ import annotations

import os

import numpy as np

SUCCESSORS = 4  # each token's possible next tokens in the synthetic language: ln 4 ≈ 1.39 nats is what is learnable
POOL = 8  # synthetic steps made ahead and cycled


def token_dtype(name: str, vocab: int):
    if name == "auto":
        return np.uint16 if vocab <= 65_536 else np.uint32
    return {"uint16": np.uint16, "uint32": np.uint32}[name]


class SyntheticTokens:
    def __init__(self, torch, *, vocab: int, seq: int, micro_batch: int, grad_accum: int, rank: int, device,
                 seed: int = 1234):
        language = np.random.default_rng(seed)  # the same language on every rank
        table = language.integers(0, vocab, size=(vocab, SUCCESSORS))
        walks = np.random.default_rng(seed + 1 + rank)  # each rank its own walks
        n = POOL * grad_accum * micro_batch
        tokens = np.empty((n, seq + 1), dtype=np.int64)
        tokens[:, 0] = walks.integers(0, vocab, size=n)
        choice = walks.integers(0, SUCCESSORS, size=(n, seq))
        for t in range(seq):
            tokens[:, t + 1] = table[tokens[:, t], choice[:, t]]
        pool = torch.from_numpy(tokens).view(POOL, grad_accum, micro_batch, seq + 1)
        self.pool = pool.to(device)
        self.i = 0

    def __call__(self):
        batch = self.pool[self.i % POOL]
        self.i += 1
        return batch


class TokenFile:
    def __init__(self, torch, path: str, *, vocab: int, dtype: str, seq: int, micro_batch: int, grad_accum: int,
                 rank: int, device, seed: int = 1234):
        self.torch, self.device = torch, device
        self.tokens = np.memmap(path, dtype=token_dtype(dtype, vocab), mode="r")
        if len(self.tokens) < seq + 2:
            raise ValueError(f"{path}: {len(self.tokens)} tokens, fewer than one window of {seq + 1}")
        self.seq, self.shape = seq, (grad_accum, micro_batch)
        self.rng = np.random.default_rng(seed + 1 + rank)
        self.vocab = vocab

    def __call__(self):
        n = self.shape[0] * self.shape[1]
        starts = self.rng.integers(0, len(self.tokens) - self.seq - 1, size=n)
        windows = np.stack([self.tokens[s:s + self.seq + 1] for s in starts]).astype(np.int64)
        if windows.max() >= self.vocab:
            raise ValueError(f"token id {int(windows.max())} is outside the model's vocabulary of {self.vocab}")
        batch = self.torch.from_numpy(windows).view(*self.shape, self.seq + 1)
        if self.device.type == "cuda":
            return batch.pin_memory().to(self.device, non_blocking=True)
        return batch


def check_token_file(path: str, dtype: str, vocab: int) -> str | None:
    """Why a token file cannot feed a model of `vocab` tokens, or None."""
    if not os.path.isfile(path):
        return f"token file {path} does not exist"
    itemsize = np.dtype(token_dtype(dtype, vocab)).itemsize
    size = os.path.getsize(path)
    if size % itemsize:
        return f"token file {path}: {size} bytes is not a whole number of {itemsize}-byte token ids"
    return None
