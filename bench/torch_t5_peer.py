"""The PyTorch T5 peer of ax-train-bench: trains a plain T5 v1.1 and prints its step times.

Run by ax-train-bench (bench/train_bench.cc) for the T5 configs (bench-t5-a, bench-t5-b) under
Debian's /usr/bin/python3 with python3-torch, in the environment of torch_peer.py (whose step
loop, schedule and report it shares). By hand:

  OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=2 OPENBLAS_CORETYPE=SkylakeX \
    /usr/bin/python3 bench/torch_t5_peer.py --layers 2 --dim 256 --heads 4 --ff 1024

The network is ax's `t5` family (docs/t5.md) written as a plain nn.Module, the way Hugging Face's
modeling_t5.py writes it: one token embedding shared by the encoder's and the decoder's input,
pre-norm RMSNorm (no mean, no bias, eps 1e-6), fused q/k/v projections without biases, attention
logits scaled by 1/sqrt(d_kv), a relative position bias per stack (32 buckets, max distance 128;
bidirectional in the encoder, causal in the decoder) computed once a step and added to every
layer's logits together with the mask, decoder cross-attention, gated GELU (tanh) MLP, final
norms, an untied LM head, cross-entropy plus z-loss 1e-4 · lse² over the non-padding targets.
Then backward, global-norm clipping, AdamW with weight decay on matrices and embeddings (not the
norms, not the position-bias tables) and ax's schedule.

The batch has the shapes of ax's span-corrupted rows: encoder inputs (batch, encoder_seq), decoder
inputs (batch, seq) = the targets shifted right behind the start token 0, `targets` real targets
a row and padding after them (ignored, segment 0: masked as T5x masks it). Ids are random.

bench/torch_gpu_peer.py imports T5 and batch from here for the GPU benchmark (bench/gpu_bench.sh:
bf16 autocast, eager and torch.compile): one PyTorch T5 for both benchmarks. Its relative
position buckets are bench/t5_buckets.py, the function the oracle that checks ax's tiny-t5 uses.

Prints one JSON line: {"step_seconds": [...timed steps...], "losses": [...], "params": N}.
"""

import argparse
import math

from t5_buckets import relative_position_buckets
from torch_peer import add_optimizer_args, train

import torch
import torch.nn as nn
import torch.nn.functional as F


class RmsNorm(nn.Module):
    def __init__(self, dim, eps, device):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, device=device))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, dim, heads, d_kv, cross, device):
        super().__init__()
        self.heads, self.d_kv, inner = heads, d_kv, heads * d_kv
        if cross:
            self.q = nn.Linear(dim, inner, bias=False, device=device)
            self.kv = nn.Linear(dim, 2 * inner, bias=False, device=device)
        else:
            self.qkv = nn.Linear(dim, 3 * inner, bias=False, device=device)
        self.proj = nn.Linear(inner, dim, bias=False, device=device)

    def forward(self, x, bias, memory=None):
        """bias: the position bias and the mask, added to the logits (broadcast over B/heads)."""
        B, Tq, _ = x.shape
        inner = self.heads * self.d_kv
        if memory is None:
            q, k, v = self.qkv(x).split(inner, dim=-1)
        else:
            q = self.q(x)
            k, v = self.kv(memory).split(inner, dim=-1)
        Tk = k.shape[1]
        q = q.view(B, Tq, self.heads, self.d_kv).transpose(1, 2) * (1.0 / math.sqrt(self.d_kv))
        k = k.view(B, Tk, self.heads, self.d_kv).transpose(1, 2)
        v = v.view(B, Tk, self.heads, self.d_kv).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-2, -1) + bias, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, Tq, inner)
        return self.proj(y)


class Mlp(nn.Module):
    """Gated GELU: fc holds wi_0 (gate) then wi_1 (up), proj is wo."""

    def __init__(self, dim, ff, device):
        super().__init__()
        self.fc = nn.Linear(dim, 2 * ff, bias=False, device=device)
        self.proj = nn.Linear(ff, dim, bias=False, device=device)

    def forward(self, x):
        gate, up = self.fc(x).chunk(2, dim=-1)
        return self.proj(F.gelu(gate, approximate="tanh") * up)


class Layer(nn.Module):
    def __init__(self, a, cross, device):
        super().__init__()
        self.ln1 = RmsNorm(a.dim, a.norm_eps, device)
        self.attn = Attention(a.dim, a.heads, a.d_kv, False, device)
        if cross:
            self.ln_cross = RmsNorm(a.dim, a.norm_eps, device)
            self.cross = Attention(a.dim, a.heads, a.d_kv, True, device)
        self.ln2 = RmsNorm(a.dim, a.norm_eps, device)
        self.mlp = Mlp(a.dim, a.ff, device)

    def forward(self, x, bias, memory=None, cross_bias=None):
        x = x + self.attn(self.ln1(x), bias)
        if memory is not None:
            x = x + self.cross(self.ln_cross(x), cross_bias, memory)
        return x + self.mlp(self.ln2(x))


class T5(nn.Module):
    """Built on `device` (cpu, cuda, or meta: the shapes alone, for counting)."""

    def __init__(self, a, device="cpu"):
        super().__init__()
        self.wte = nn.Embedding(a.vocab, a.dim, device=device)
        self.enc_rel_bias = nn.Embedding(a.buckets, a.heads, device=device)
        self.dec_rel_bias = nn.Embedding(a.buckets, a.heads, device=device)
        self.enc = nn.ModuleList(Layer(a, False, device) for _ in range(a.layers))
        self.dec = nn.ModuleList(Layer(a, True, device) for _ in range(a.decoder_layers))
        self.enc_lnf = RmsNorm(a.dim, a.norm_eps, device)
        self.dec_lnf = RmsNorm(a.dim, a.norm_eps, device)
        self.lm_head = nn.Linear(a.dim, a.vocab, bias=False, device=device)
        self.z_loss = a.z_loss
        self.register_buffer("enc_buckets", relative_position_buckets(
            a.encoder_seq, a.encoder_seq, True, a.buckets, a.max_distance).to(device))
        self.register_buffer("dec_buckets", relative_position_buckets(
            a.seq, a.seq, False, a.buckets, a.max_distance).to(device))
        # ax's initialisation (T5x's variance scaling, fan_in; docs/t5.md).
        inner = a.heads * a.d_kv
        for name, p in self.named_parameters():
            if name.endswith("rel_bias.weight"):
                nn.init.normal_(p, 0.0, math.sqrt(2.0 / (a.buckets + a.heads)))
            elif name == "wte.weight":
                nn.init.normal_(p, 0.0, 1.0)
            elif name.endswith("attn.proj.weight") or name.endswith("cross.proj.weight"):
                nn.init.normal_(p, 0.0, 1.0 / math.sqrt(inner))
            elif name.endswith("mlp.proj.weight"):
                nn.init.normal_(p, 0.0, 1.0 / math.sqrt(a.ff))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 1.0 / math.sqrt(a.dim))

    def forward(self, enc_tokens, tokens, targets, dec_mask, cross_mask):
        """dec_mask (B, 1, Td, Td) and cross_mask (B, 1, Td, Te): 0 or -1e9, added to logits."""
        x = self.wte(enc_tokens)
        bias = self.enc_rel_bias(self.enc_buckets).permute(2, 0, 1)[None]  # (1, NH, Te, Te)
        for layer in self.enc:
            x = layer(x, bias)
        memory = self.enc_lnf(x)
        x = self.wte(tokens)
        bias = self.dec_rel_bias(self.dec_buckets).permute(2, 0, 1)[None] + dec_mask
        for layer in self.dec:
            x = layer(x, bias, memory, cross_mask)
        # In f32 (under autocast too), over every row with the padding weighted 0: the same
        # shapes each step (no data-dependent indexing, which torch.compile would break on).
        logits = self.lm_head(self.dec_lnf(x)).view(-1, self.lm_head.out_features).float()
        flat = targets.view(-1)
        keep = (flat >= 0).float()
        lse = torch.logsumexp(logits, dim=-1)
        loss = lse - logits.gather(1, flat.clamp(min=0)[:, None])[:, 0]
        return ((loss + self.z_loss * lse * lse) * keep).sum() / keep.sum()


def batch(a, device):
    """Random rows with the shapes of ax's span-corrupted ones (pack 1)."""
    enc = torch.randint(0, a.vocab, (a.batch, a.encoder_seq))
    targets = torch.full((a.batch, a.seq), -1, dtype=torch.long)
    targets[:, :a.targets] = torch.randint(0, a.vocab, (a.batch, a.targets))
    tokens = torch.zeros(a.batch, a.seq, dtype=torch.long)  # pad = the decoder start, 0
    tokens[:, 1:a.targets] = targets[:, :a.targets - 1]
    seg = (targets >= 0).long()  # 1 on the targets, 0 on the padding
    causal = torch.ones(a.seq, a.seq, dtype=torch.bool).tril()
    dec_ok = (seg[:, :, None] == seg[:, None, :]) & causal
    cross_ok = (seg[:, :, None] == 1).expand(a.batch, a.seq, a.encoder_seq)
    to_bias = lambda ok: torch.zeros(ok.shape).masked_fill(~ok, -1e9)[:, None]
    return [t.to(device) for t in (enc, tokens, targets, to_bias(dec_ok), to_bias(cross_ok))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, required=True, help="encoder layers")
    ap.add_argument("--decoder-layers", type=int, default=0, help="default: --layers")
    ap.add_argument("--dim", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--d-kv", type=int, default=64)
    ap.add_argument("--ff", type=int, required=True)
    ap.add_argument("--encoder-seq", type=int, default=256)
    ap.add_argument("--seq", type=int, default=64, help="decoder tokens a row")
    ap.add_argument("--targets", type=int, default=58, help="real targets a row (<= --seq)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--buckets", type=int, default=32)
    ap.add_argument("--max-distance", type=int, default=128)
    ap.add_argument("--norm-eps", type=float, default=1e-6)
    ap.add_argument("--z-loss", type=float, default=1e-4)
    ap.add_argument("--device", default="cpu")
    add_optimizer_args(ap, beta2=0.999)
    a = ap.parse_args()
    a.decoder_layers = a.decoder_layers or a.layers
    if not 1 <= a.targets <= a.seq:
        ap.error("--targets must be in [1, --seq]")

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = T5(a, a.device)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "rel_bias" not in n]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2 or "rel_bias" in n]
    rows = batch(a, a.device)
    train(a, model, lambda: model(*rows), decay, no_decay)


if __name__ == "__main__":
    main()
