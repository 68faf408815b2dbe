#!/usr/bin/python3
"""Train Orrery's two small Llama-style models on the King James Bible.

    /usr/bin/python3 models/kjv/train.py --out .cache/kjv [--steps-target 540] [--steps-draft 600]

needs Debian's bible-kjv, python3-torch, python3-sentencepiece and libopenblas0-pthread
(`make kjv-train` installs them; without OpenBLAS torch runs 10x slower).
It writes, under --out:
  corpus-train.txt, heldout.txt   the text, one chapter a line (see split())
  kjv.model                       the SentencePiece vocabulary (BPE, 4096, byte fallback)
  kjv-target.safetensors          ~10.5 M parameters, F32, tensors named and laid out as in GGUF
  kjv-draft.safetensors           ~1.7 M parameters, same vocabulary
  train.log                       the loss curve and held-out loss
`orrery convert` then writes each safetensors file as a GGUF (see models/kjv/README.md).

The architecture is llama.cpp's `llama`: RMSNorm (eps 1e-5), RoPE on adjacent
pairs (llama.cpp's NORM type, so no permutation of q and k is needed), SwiGLU,
untied output. Everything is seeded, and the step counts are fixed (not timed), so that
a rerun on the same packages gives the same weights up to the CPU's
floating-point order.
"""
import argparse
import json
import math
import os
import random
import re
import struct
import subprocess
import sys
import time

import numpy as np
import sentencepiece as spm
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 20261206
CTX = 256  # training window, BOS included; written as the GGUF's context_length

SHAPES = {
    # ~10.5 M parameters: 8 layers of 1.05 M, embeddings and output head 1.05 M each.
    # Every row is a multiple of 256, so that llama-quantize makes real K-quants.
    "target": dict(layers=8, dim=256, heads=4, ff=1024),
    # ~1.7 M parameters: most of it the embeddings and head (0.5 M each).
    "draft": dict(layers=3, dim=128, heads=2, ff=384),
}


def read_bible():
    """Chapters as lists of verses, from the `bible` program of Debian's bible-kjv."""
    out = subprocess.run(["bible", "Gen1:1-Rev22:21"], check=True, capture_output=True, text=True).stdout
    chapters, verse = [], None
    for line in out.splitlines():
        if re.fullmatch(r"\S.* \d+", line):  # a chapter heading: "Genesis 1"
            chapters.append([])
            verse = None
        elif m := re.match(r"^\s+(\d+) (.*)$", line):  # a verse: "  12 text"
            chapters[-1].append(m.group(2))
            verse = len(chapters[-1]) - 1
        elif line.strip() and verse is not None:  # a wrapped verse continues
            chapters[-1][verse] += " " + line.strip()
    return chapters


def split(chapters):
    """One chapter a line (its verses joined by spaces); every 20th chapter,
    from the 10th, is held out (59 of 1189)."""
    train, held = [], []
    for i, ch in enumerate(chapters):
        (held if i % 20 == 10 else train).append(" ".join(ch))
    return train, held


def train_tokenizer(out, train_chapters):
    verses = os.path.join(out, "verses.txt")
    with open(verses, "w") as f:
        for ch in train_chapters:
            for v in re.split(r"(?<=[.:;?!])\s+", ch):
                f.write(v + "\n")
    # identity normalisation and kept whitespace: llama.cpp's SPM tokenizer
    # normalises nothing, so both must see the same text.
    spm.SentencePieceTrainer.train(
        input=verses, model_prefix=os.path.join(out, "kjv"), vocab_size=4096, model_type="bpe",
        byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=True, split_digits=True, character_coverage=1.0, unk_id=0, bos_id=1, eos_id=2,
        pad_id=-1, num_threads=2, minloglevel=2)
    os.remove(verses)
    return spm.SentencePieceProcessor(model_file=os.path.join(out, "kjv.model"))


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight


def rope_tables(hd, n, base=10000.0):
    inv = base ** (-torch.arange(0, hd, 2, dtype=torch.float32) / hd)
    ang = torch.arange(n, dtype=torch.float32)[:, None] * inv[None, :]
    return ang.cos(), ang.sin()


def rope(x, cos, sin):
    # x: (B, H, T, hd); rotate adjacent pairs (x0, x1), (x2, x3), … as llama.cpp's NORM rope.
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = cos[: x.shape[2]], sin[: x.shape[2]]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, dim, heads, ff):
        super().__init__()
        self.heads, self.hd = heads, dim // heads
        self.attn_norm, self.ffn_norm = RMSNorm(dim), RMSNorm(dim)
        self.attn_q, self.attn_k, self.attn_v, self.attn_output = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.ffn_gate, self.ffn_up = nn.Linear(dim, ff, bias=False), nn.Linear(dim, ff, bias=False)
        self.ffn_down = nn.Linear(ff, dim, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, D = x.shape
        h = self.attn_norm(x)
        q, k, v = (m(h).view(B, T, self.heads, self.hd).transpose(1, 2) for m in (self.attn_q, self.attn_k, self.attn_v))
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd) + mask[:T, :T]
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D)
        x = x + self.attn_output(y)
        h = self.ffn_norm(x)
        return x + self.ffn_down(F.silu(self.ffn_gate(h)) * self.ffn_up(h))


class Llama(nn.Module):
    def __init__(self, vocab, layers, dim, heads, ff):
        super().__init__()
        self.token_embd = nn.Embedding(vocab, dim)
        self.blk = nn.ModuleList(Block(dim, heads, ff) for _ in range(layers))
        self.output_norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        cos, sin = rope_tables(dim // heads, CTX)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.register_buffer("mask", torch.full((CTX, CTX), float("-inf")).triu(1), persistent=False)
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if n.endswith(("attn_output.weight", "ffn_down.weight")) else 0.02
                nn.init.normal_(p, 0, std)

    def forward(self, ids):
        x = self.token_embd(ids)
        for b in self.blk:
            x = b(x, self.cos, self.sin, self.mask)
        return self.output(self.output_norm(x))


def batches(stream, bos, batch, rng):
    """Random windows of CTX-1 tokens, each after a BOS (llama-perplexity puts
    BOS first in every chunk, as the runner puts it first in every prompt)."""
    n = len(stream) - CTX
    while True:
        starts = rng.integers(0, n, size=batch)
        x = np.stack([np.concatenate(([bos], stream[s: s + CTX - 1])) for s in starts])
        y = np.stack([stream[s: s + CTX] for s in starts])
        yield torch.from_numpy(x), torch.from_numpy(y)


@torch.no_grad()
def heldout_loss(model, held, bos):
    """Mean loss over the held-out stream in consecutive BOS-led windows."""
    model.eval()
    tot, n = 0.0, 0
    for s in range(0, len(held) - CTX, CTX - 1):
        x = torch.from_numpy(np.concatenate(([bos], held[s: s + CTX - 1])))[None]
        y = torch.from_numpy(held[s: s + CTX])[None]
        tot += F.cross_entropy(model(x)[0], y[0], reduction="sum").item()
        n += y.numel()
    model.train()
    return tot / n


def train(name, shape, stream, held, vocab, bos, steps, log, batch=16):
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    model = Llama(vocab, **shape)
    params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() == 2]
    nodecay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0}],
                            lr=3e-3, betas=(0.9, 0.95))
    it = batches(stream, bos, batch, rng)
    log(f"{name}: {params:,} parameters, {shape}; {steps} steps of {batch}x{CTX} tokens "
        f"({steps * batch * CTX / len(stream):.2f} epochs)")
    warm = min(200, steps // 10)
    t0, avg = time.time(), None
    for step in range(steps):
        lr = 3e-3 * (step + 1) / warm if step < warm else 3e-4 + 0.5 * (3e-3 - 3e-4) * (
            1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = next(it)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        avg = loss.item() if avg is None else 0.98 * avg + 0.02 * loss.item()
        if step % 50 == 0 or step == steps - 1:
            log(f"{name} step {step}/{steps} loss {avg:.3f} lr {lr:.2e} {time.time() - t0:.0f} s")
    hl = heldout_loss(model, held, bos)
    log(f"{name}: held-out loss {hl:.4f} (perplexity {math.exp(hl):.2f}) after {time.time() - t0:.0f} s")
    return model, hl


def save_safetensors(path, model, meta):
    """safetensors by hand (no extra package): an 8-byte header length, a
    JSON header, then the F32 tensors. Names and row-major layout are GGUF's
    (a Linear's (out, in) weight is ggml's ne = [in, out])."""
    header, blobs, off = {"__metadata__": meta}, [], 0
    for n, p in model.state_dict().items():
        a = p.detach().float().contiguous().numpy().astype("<f4")
        header[n] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def vocab_meta(sp):
    # GGUF token types: 1 normal, 2 unknown, 3 control, 6 byte.
    toks, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        toks.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        types.append(2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 1)
    return {"tokens": json.dumps(toks), "scores": json.dumps(scores), "token_types": json.dumps(types)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    # About 80 and 10 minutes on 2 cores of a 2023 Xeon (8–9 s and 1 s a step).
    ap.add_argument("--steps-target", type=int, default=540)
    ap.add_argument("--steps-draft", type=int, default=600)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--only", choices=["target", "draft"], help="train one model (the tokenizer and split are redone)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(a.threads)
    random.seed(SEED)
    logf = open(os.path.join(a.out, "train.log"), "a")

    def log(s):
        line = time.strftime("%H:%M:%S ") + s
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    log(f"torch {torch.__version__}, sentencepiece {spm.__version__}, {a.threads} threads, seed {SEED}")
    train_ch, held_ch = split(read_bible())
    for fn, lines in (("corpus-train.txt", train_ch), ("heldout.txt", held_ch)):
        with open(os.path.join(a.out, fn), "w") as f:
            f.write("\n".join(lines) + "\n")
    sp = train_tokenizer(a.out, train_ch)
    # Whole documents, as llama.cpp tokenizes a file: one dummy prefix, then
    # the newlines (byte tokens) between chapters.
    enc = lambda lines: np.array(sp.encode("\n".join(lines) + "\n"), dtype=np.int64)
    stream, held = enc(train_ch), enc(held_ch)
    log(f"corpus: {len(train_ch)} chapters, {len(stream):,} tokens; held out: {len(held_ch)} chapters, {len(held):,} tokens")
    meta = vocab_meta(sp)
    for name in ("target", "draft"):
        if a.only and a.only != name:
            continue
        shape = SHAPES[name]
        model, hl = train(name, shape, stream, held, sp.get_piece_size(), sp.bos_id(),
                          a.steps_target if name == "target" else a.steps_draft, log)
        m = dict(meta, arch="llama", context_length=str(CTX), heldout_loss=f"{hl:.4f}", seed=str(SEED),
                 name=f"orrery-kjv-{name}", **{k: str(v) for k, v in shape.items()})
        save_safetensors(os.path.join(a.out, f"kjv-{name}.safetensors"), model, m)
        log(f"wrote kjv-{name}.safetensors")


if __name__ == "__main__":
    main()
