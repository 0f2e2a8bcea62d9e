"""A pre-tokenized token file made from local text, for the transformer's `--data tokens` cells, with no download.

The layout is the one nanoGPT's train.bin and Megatron-style loaders read: token ids back to back, no header, uint16
(uint32 on request). The tokenizer is the text's UTF-8 bytes (ids 0-255): a real tokenizer (GPT-2's BPE) needs its
vocabulary files, which a machine without the internet does not have, and what a data cell measures is the reading of
random windows from the file, which the ids' meaning does not change. Any model of 256 tokens or more reads it; the
worker refuses an id outside its vocabulary. A JSON file beside it (OUT.json) says what it holds and where it came from.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from bench.core.errors import BenchInputError

TEXT_SUFFIXES = (".txt", ".md", ".rst", ".py", ".yaml", ".yml", ".json", ".csv")
BYTE_VOCAB = 256
MIN_TOKENS = 1024  # a few windows of the tiny model's 128 tokens at least


def text_files(sources: list[Path]) -> list[Path]:
    """The text files a source names: itself, or a folder's files with a text suffix (sorted, recursively)."""
    out: list[Path] = []
    for src in sources:
        if src.is_file():
            out.append(src)
        elif src.is_dir():
            out += sorted(p for p in src.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)
        else:
            raise BenchInputError("no such file or folder", str(src))
    return out


def make_token_sample(out: Path, sources: list[Path], *, tokens: int | None = None,
                      dtype: str = "uint16") -> dict:
    """Writes `out` (and `out`.json) from the sources' bytes: all of them, or the first `tokens` ids (repeating the
    text when it is shorter). Returns what the JSON says."""
    files = text_files(sources)
    chunks, described = [], []
    for path in files:
        data = path.read_bytes()
        if data:
            chunks.append(data)
            described.append({"path": str(path), "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    text = b"".join(chunks)
    if not text:
        raise BenchInputError("no text to tokenize (empty files, or a folder without "
                              f"{', '.join(TEXT_SUFFIXES)} files)", ", ".join(map(str, sources)))
    ids = np.frombuffer(text, dtype=np.uint8)
    repeats = 1
    if tokens is not None:
        repeats = -(-tokens // len(ids))
        ids = np.tile(ids, repeats)[:tokens]
    if len(ids) < MIN_TOKENS:
        raise BenchInputError(f"{len(ids)} tokens of text; a token file needs at least {MIN_TOKENS} (add text or "
                              f"ask for --tokens {MIN_TOKENS})", ", ".join(map(str, sources)))
    out.parent.mkdir(parents=True, exist_ok=True)
    ids.astype(np.dtype(dtype)).tofile(out)
    meta = {"format": "bench-token-file", "layout": "flat token ids, no header (nanoGPT train.bin)",
            "tokenizer": "utf-8 bytes", "vocab": BYTE_VOCAB, "dtype": dtype, "tokens": int(len(ids)),
            "text_repeated": repeats, "sources": described}
    Path(f"{out}.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return meta
