"""The PyTorch peer of ax-train-bench: trains a plain GPT on CPU and prints its step times.

Run by ax-train-bench (bench/train_bench.cc) under Debian's /usr/bin/python3 with python3-torch
(scripts/setup.sh --with oracle), with the environment that gives it its best speed on the
machine: OMP_WAIT_POLICY=PASSIVE, OPENBLAS_NUM_THREADS=threads, OPENBLAS_CORETYPE=SkylakeX
(docs/benchmarks-train.md). Can also be run by hand:

  OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=2 OPENBLAS_CORETYPE=SkylakeX \
    /usr/bin/python3 bench/torch_peer.py --layers 4 --dim 256 --heads 4

The model is ax's `gpt` family at those sizes: pre-LayerNorm, fused qkv, causal attention with an
explicit mask (PyTorch 1.13 has no fused attention), GELU (tanh) MLP, learned
positions, biases, LM head tied to the token embedding. A step is what ax's train loop does:
forward, mean softmax cross-entropy, backward, global-norm clipping, AdamW with weight decay on
matrices and embeddings only, ax's learning-rate schedule. Tokens are random (the same distribution as ax's side).

Prints one JSON line: {"step_seconds": [...timed steps...], "losses": [...], "params": N}.
"""

import argparse
import json
import math
import os
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    print(f"torch_peer: {sys.executable} cannot import torch ({e}); "
          "install it with `bash scripts/setup.sh --with oracle`", file=sys.stderr)
    sys.exit(1)


# The settings that decide the peer's speed, echoed in its report.
PEER_ENV = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE")


class Block(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, hidden)
        self.fc_proj = nn.Linear(hidden, dim)

    def forward(self, x, mask):
        B, T, C = x.shape
        hd = C // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
        q = q.view(B, T, self.heads, hd).transpose(1, 2)
        k = k.view(B, T, self.heads, hd).transpose(1, 2)
        v = v.view(B, T, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, layers, dim, heads, hidden, vocab, seq, std):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, hidden) for _ in range(layers))
        self.lnf = nn.LayerNorm(dim)
        self.register_buffer("mask", torch.ones(seq, seq, dtype=torch.bool).triu(1))
        for name, p in self.named_parameters():
            if p.dim() == 2:
                residual = name.endswith("proj.weight")
                nn.init.normal_(p, 0.0, std / math.sqrt(2 * layers) if residual else std)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe.weight[:T]
        mask = self.mask[:T, :T]
        for block in self.blocks:
            x = block(x, mask)
        logits = self.lnf(x) @ self.wte.weight.T
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def learning_rate(a, s):
    """ax's schedule (docs/trainer.md): linear warm-up, cosine (or linear) decay to
    min_lr_ratio·lr."""
    if s <= a.warmup_steps:
        return a.lr * s / a.warmup_steps
    low = a.min_lr_ratio * a.lr
    if s >= a.decay_end:
        return low
    progress = (s - a.warmup_steps) / (a.decay_end - a.warmup_steps)
    if a.schedule == "linear":
        return a.lr - (a.lr - low) * progress
    return low + (a.lr - low) * (1 + math.cos(math.pi * progress)) / 2


def add_optimizer_args(ap, beta2):
    """The step and optimizer options ax-train-bench gives both peers."""
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--warmup-steps", type=int, default=5)
    ap.add_argument("--decay-end", type=int, default=20)
    ap.add_argument("--schedule", choices=("cosine", "linear"), default="cosine")
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--beta2", type=float, default=beta2)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1234)


def train(a, model, loss_of, decay, no_decay):
    """Times a.warmup + a.steps steps of loss_of() and prints the peer's JSON line."""
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, a.beta2), eps=1e-8, foreach=False)
    times, losses = [], []
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = learning_rate(a, step + 1)
        loss = loss_of()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        if next(model.parameters()).is_cuda:
            torch.cuda.synchronize()  # the step's kernels are asynchronous
        losses.append(loss.item())
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    env = " ".join(f"{k}={os.environ[k]}" for k in PEER_ENV if k in os.environ)
    print(json.dumps({"step_seconds": times, "losses": losses,
                      "params": sum(p.numel() for p in model.parameters()),
                      "torch": f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads, "
                               f"AdamW for-loop, {env}"}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--dim", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--hidden", type=int, default=0, help="MLP width (default 4·dim)")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=8192)
    add_optimizer_args(ap, beta2=0.95)
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = Gpt(a.layers, a.dim, a.heads, a.hidden or 4 * a.dim, a.vocab, a.seq, 0.02)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    data = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
    inputs, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    train(a, model, lambda: model(inputs, targets), decay, no_decay)


if __name__ == "__main__":
    main()
