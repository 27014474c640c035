"""The PyTorch peer of bench/gpu_bench.sh: ax's models in plain PyTorch, eager or torch.compile.

  python3 bench/torch_gpu_peer.py run --model Pile126M --mode eager --batches 128,64,32
  python3 bench/torch_gpu_peer.py count --model fuji-1B-v2
  python3 bench/torch_gpu_peer.py report RESULTS_DIR

`run` builds the named experiment exactly as ax does (trainer/config/src/experiments.cc,
docs/parameter-names.md): the `gpt` family (pre-LayerNorm, fused qkv with biases, GELU (tanh),
learned positions, LM head tied to the token embedding) or the `llama` family (RMSNorm, fused qkv
without biases, RoPE "rotate half", grouped-query attention, SwiGLU with the gate first, head tied
or not as the config says). Parameters and their shapes are ax's, so the counts match
(`count`, checked by `gpu_bench.sh --check`). The vocabulary is padded as ax pads it; the loss is
taken over the padded logits and the random targets lie in the real vocabulary.

The `t5` family (t5-small/base/large, tiny-t5) is bench/torch_t5_peer.py's T5 v1.1, imported (one
PyTorch T5 for the CPU and the GPU benchmark): explicit softmax(QKᵀ/√d_kv + position bias + mask)
attention as Hugging Face's T5 computes it (F.scaled_dot_product_attention is not used: the
position bias is a learned additive mask), z-loss 1e-4, T5x's Pile recipe's AdamW and linear
schedule. Its batch has the shapes of ax's span-corrupted rows (ENC_SL encoder tokens, DEC_SL
decoder tokens, of which the real targets T5's random_spans_helper gives, 114 for ENC_SL 512;
the rest padding, masked), the same on both sides; tokens/s counts encoder and decoder tokens,
FLOPs are ax's encoder-decoder count (flops_per_row in trainer/models/src/encoder_decoder.cc).

A step is what ax-train-bench's worker does: forward, mean cross-entropy, backward, global-norm
clipping, AdamW (weight decay on matrices and embeddings, ax's schedule), with f32 master weights
and bf16 autocast on CUDA (f32 on CPU), F.scaled_dot_product_attention (causal), the fused AdamW
on CUDA. Tokens are random, the same batch every step. `--mode compile` wraps the model (loss
included) in torch.compile(dynamic=False); the optimizer stays eager.

`--batches` lists batch sizes to try, largest first; the first that survives a whole step (out of
memory is caught) is timed. Prints one JSON line: step times, losses, the batch, parameter counts,
PaLM FLOPs per token, peak memory (torch.cuda.max_memory_allocated / max_memory_reserved, and the
device memory in use at the end from cudaMemGetInfo, which includes the CUDA context).

`report` reads the JSON files gpu_bench.sh collected and prints the comparison table.
"""

import argparse
import gc
import glob
import json
import math
import os
import re
import statistics
import sys
import time
import types

# ---- ax's experiments (trainer/config/src/experiments.cc) -------------------------------------


def _gpt(layers, dim, heads, hidden, vocab, seq, init_std):
    return dict(family="gpt", layers=layers, dim=dim, heads=heads, kv_heads=heads, hidden=hidden,
                vocab=vocab, vocab_size=0, seq=seq, max_seq=seq, norm="layernorm",
                activation="gelu", position="learned", rope_theta=1e4, tied=True, bias=True,
                eps=1e-5, init_std=init_std, lr=6e-4, warmup_steps=636, decay_end=500000)


def _fuji_1b(version):
    v3 = version == 3
    seq = {1: 2048, 2: 4096, 3: 8192}[version]
    vocab = 131072 if v3 else 32768
    return dict(family="llama", layers=16, dim=2048, heads=32, kv_heads=8, hidden=8192,
                vocab=vocab, vocab_size=vocab, seq=seq, max_seq=seq, norm="rmsnorm",
                activation="swiglu", position="rope", rope_theta=5e5 if v3 else 1e4, tied=True,
                bias=False, eps=1e-5, init_std=0.02, lr=3e-4, warmup_steps=2000,
                decay_end=(15 << 40) // (16 << 20) if v3 else (1 << 40) // (4 << 20) * version)


def _tiny_gpt():
    c = _gpt(2, 64, 4, 256, 512, 64, 0.02)
    c.update(vocab_size=512, lr=1e-3, warmup_steps=2, decay_end=20)
    return c


def _tiny_llama():
    c = _tiny_gpt()
    c.update(family="llama", kv_heads=2, hidden=128, norm="rmsnorm", activation="swiglu",
             position="rope", rope_theta=1e4, tied=False, bias=False)
    return c


def span_targets(inputs_length, noise_density=0.15, mean_noise_span_length=3.0):
    """The targets a span-corrupted row holds at ENC_SL inputs_length: T5's random_spans_helper
    (t5/data/preprocessors.py; one sentinel per span on each side, EOS on each), as ax's
    SpanLengths derives it (docs/t5.md): 114 for 512 (from 568-token raw chunks)."""
    def lengths(tokens):
        noise = int(round(tokens * noise_density))
        spans = int(round(noise / mean_noise_span_length))
        return tokens - noise + spans + 1, noise + spans + 1

    tokens = inputs_length - 1
    while lengths(tokens + 1)[0] <= inputs_length:
        tokens += 1
    return lengths(tokens)[1]


def _t5(layers, dim, ff, heads):
    """T5 v1.1 with T5x's Pile recipe (ax's t5-*): ENC_SL 512, DEC_SL 128, AdamW lr 1e-4 (weight
    decay 0.01, beta2 0.999), 10k warm-up, linear decay to 1e-5 at step 1M. No dropout on either
    side (t5-small's 0.1 needs row ids that ax-train-bench's rows do not carry)."""
    return dict(family="t5", layers=layers, decoder_layers=layers, dim=dim, heads=heads, d_kv=64,
                hidden=ff, vocab=32128, vocab_size=32128, encoder_seq=512, seq=128,
                targets=span_targets(512), buckets=32, max_distance=128, eps=1e-6, z_loss=1e-4,
                lr=1e-4, warmup_steps=10000, decay_end=1000000, schedule="linear",
                min_lr_ratio=0.1, beta2=0.999, weight_decay=0.01)


def _tiny_t5():
    """ax's tiny-t5: its vocabulary comes from the tokenizer, the GPT-2 size in ax-train-bench."""
    c = _t5(2, 64, 128, 4)
    c.update(d_kv=16, vocab=50257, vocab_size=0, encoder_seq=64, seq=16, targets=span_targets(64),
             lr=1e-3, warmup_steps=2, decay_end=20)
    return c


# Pile126M takes its vocabulary from the tokenizer (model.vocab_size 0): the GPT-2 tokenizer's
# 50257 pieces of Pax's GPT126M, which ax-train-bench assumes too (kGpt2Vocab).
CONFIGS = {
    "Pile126M": _gpt(12, 768, 12, 3072, 50257, 2048, 0.023),
    "fuji-1B-v1": _fuji_1b(1),
    "fuji-1B-v2": _fuji_1b(2),
    "fuji-1B-v3": _fuji_1b(3),
    "t5-small": _t5(8, 512, 1024, 6),
    "t5-base": _t5(12, 768, 2048, 12),
    "t5-large": _t5(24, 1024, 2816, 16),
    "tiny-gpt": _tiny_gpt(),
    "tiny-llama": _tiny_llama(),
    "tiny-t5": _tiny_t5(),
}

# T5x's published per-GPU training throughput of the same models (ENC_SL 512 / DEC_SL 128, the
# Pile recipe), from NVIDIA/JAX-Toolbox@cd829880 rosetta/rosetta/projects/t5x/README.md
# (shared/reference/models-and-numbers.md §4.4): anchors stated beside the table, not measured.
T5X_PUBLISHED = {
    "t5-small": ["T5x: 714 seq/s/GPU on A100, bf16 (8 GPUs, batch 256/GPU)"],
    "t5-large": ["T5x: 75.8 seq/s/GPU on A100, bf16 (64 GPUs, batch 32/GPU)",
                 "T5x: 174.1 seq/s/GPU on H100, TE FP8 (64 GPUs, batch 32/GPU): not like for "
                 "like, ax and the peer run bf16 (FP8's dense peak is twice bf16's) on one GPU "
                 "(no data-parallel communication)"],
}


def padded_vocab(c):
    return c["vocab_size"] if c["vocab_size"] > 0 else -(-c["vocab"] // 128) * 128


def flops_per_token(c, matmul_params, enc_matmul_params=0):
    """gpt/llama: 6·N + 6·L·H·Q·T: PaLM's count with causal attention halved, as MaxText counts it
    (ax's flops_per_token with causal = true, trainer/config/src/metrics.cc). t5: ax's
    EncoderDecoder::flops_per_row over the row's encoder + decoder tokens: 6 FLOPs per matmul
    parameter per token of its stack (the LM head with the decoder), the encoder's whole Te x Te
    attention, the decoder's causal half of Td x Td and its cross-attention's whole Td x Te."""
    if c["family"] == "t5":
        te, td, hd = c["encoder_seq"], c["seq"], c["heads"] * c["d_kv"]
        e, d = c["layers"], c["decoder_layers"]
        dec_matmul_params = matmul_params - enc_matmul_params
        row = (6.0 * (enc_matmul_params * te + dec_matmul_params * td) + 12.0 * e * hd * te * te
               + 6.0 * d * hd * td * td + 12.0 * d * hd * td * te)
        return row / (te + td)
    head_dim = c["dim"] // c["heads"]
    return 6.0 * matmul_params + 6.0 * c["layers"] * c["heads"] * head_dim * c["seq"]


def row_tokens(c):
    """Tokens a row computes: the encoder's and the decoder's for t5."""
    return c["seq"] + c.get("encoder_seq", 0)


# Dense bf16 peak of the device: the bf16 column of ax's CUDA backend table (gpu_peak in
# trainer/backend_cuda/src/gpu_peak.cc), for the report's cross-check.
def peak_bf16_flops(props, clock_khz):
    name, major, minor, sms = props.name, props.major, props.minor, props.multi_processor_count
    if (major, minor) == (9, 0):
        if re.search(r"H20(?!\d)", name) or sms == 78:
            return 148e12
        if "NVL" in name:
            return 835.5e12
        if "PCIe" in name or sms == 114:
            return 756.5e12
        if sms >= 132:
            return 989.4e12
    if (major, minor) == (8, 0):
        if "A100" in name or "A800" in name:
            return 312e12
        if "A30" in name:
            return 165e12
    if major == 8 and minor != 0:
        per_sm_clock = 512 if "GeForce" in name else 1024
    else:
        per_sm_clock = {8: 2048, 9: 4096, 10: 8192}.get(major, 0)
    return per_sm_clock * sms * clock_khz * 1e3 if clock_khz and per_sm_clock else None


# ---- the model --------------------------------------------------------------------------------


def t5_args(c, batch=1):
    """bench/torch_t5_peer.py's options for config c."""
    return types.SimpleNamespace(
        layers=c["layers"], decoder_layers=c["decoder_layers"], dim=c["dim"], heads=c["heads"],
        d_kv=c["d_kv"], ff=c["hidden"], vocab=padded_vocab(c), buckets=c["buckets"],
        max_distance=c["max_distance"], norm_eps=c["eps"], z_loss=c["z_loss"],
        encoder_seq=c["encoder_seq"], seq=c["seq"], targets=c["targets"], batch=batch)


def t5_peer():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch_t5_peer
    return torch_t5_peer


def build_model(c, device):
    if c["family"] == "t5":
        return t5_peer().T5(t5_args(c), device)

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    C, H, KV, HD = c["dim"], c["heads"], c["kv_heads"], c["dim"] // c["heads"]
    sdpa = getattr(F, "scaled_dot_product_attention", None)

    class Norm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(C, device=device))
            rms = c["norm"] == "rmsnorm"
            self.bias = nn.Parameter(torch.zeros(C, device=device)) if c["bias"] else None
            self.rms = rms

        def forward(self, x):
            if not self.rms:
                return F.layer_norm(x, (C,), self.weight, self.bias, c["eps"])
            h = x.float()
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + c["eps"])
            h = h.to(x.dtype) * self.weight
            return h + self.bias if self.bias is not None else h

    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(C, (H + 2 * KV) * HD, bias=c["bias"], device=device)
            self.proj = nn.Linear(H * HD, C, bias=c["bias"], device=device)

        def forward(self, x, rope):
            B, T, _ = x.shape
            q, k, v = self.qkv(x).split([H * HD, KV * HD, KV * HD], dim=-1)
            q = q.view(B, T, H, HD).transpose(1, 2)
            k = k.view(B, T, KV, HD).transpose(1, 2)
            v = v.view(B, T, KV, HD).transpose(1, 2)
            if rope is not None:
                cos, sin = (t[:T].to(q.dtype) for t in rope)
                q = q * cos + rotate_half(q) * sin
                k = k * cos + rotate_half(k) * sin
            if KV < H:  # query head h uses kv head h / (H / KV): Hugging Face's repeat_kv
                k = k[:, :, None].expand(B, KV, H // KV, T, HD).reshape(B, H, T, HD)
                v = v[:, :, None].expand(B, KV, H // KV, T, HD).reshape(B, H, T, HD)
            if sdpa is not None:
                y = sdpa(q, k, v, is_causal=True)
            else:  # PyTorch < 2.0 (Debian's 1.13, the CPU check): the explicit mask
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HD))
                mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
                y = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1) @ v
            return self.proj(y.transpose(1, 2).reshape(B, T, H * HD))

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            swiglu = c["activation"] == "swiglu"
            width = 2 * c["hidden"] if swiglu else c["hidden"]
            self.fc = nn.Linear(C, width, bias=c["bias"], device=device)
            self.proj = nn.Linear(c["hidden"], C, bias=c["bias"], device=device)
            self.swiglu = swiglu

        def forward(self, x):
            h = self.fc(x)
            if self.swiglu:  # rows [0, F) the gate, [F, 2F) the up projection
                gate, up = h.chunk(2, dim=-1)
                h = F.silu(gate) * up
            else:
                h = F.gelu(h, approximate="tanh")
            return self.proj(h)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.attn, self.ln2, self.mlp = Norm(), Attention(), Norm(), Mlp()

        def forward(self, x, rope):
            x = x + self.attn(self.ln1(x), rope)
            return x + self.mlp(self.ln2(x))

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            vp = padded_vocab(c)
            self.wte = nn.Embedding(vp, C, device=device)
            self.wpe = (nn.Embedding(c["max_seq"], C, device=device)
                        if c["position"] == "learned" else None)
            self.h = nn.ModuleList(Block() for _ in range(c["layers"]))
            self.lnf = Norm()
            self.lm_head = None if c["tied"] else nn.Linear(C, vp, bias=False, device=device)
            self.rope = None
            if c["position"] == "rope" and device != "meta":
                # Pairs (j, j + HD/2) rotate by t·θ^(−2j/HD), computed in f64 as ax does.
                inv = c["rope_theta"] ** (-2.0 * torch.arange(HD // 2, dtype=torch.float64) / HD)
                angle = torch.arange(c["seq"], dtype=torch.float64)[:, None] * inv[None, :]
                angle = torch.cat((angle, angle), dim=-1)
                self.rope = (angle.cos().float().to(device), angle.sin().float().to(device))

        def forward(self, idx, targets):
            T = idx.shape[1]
            x = self.wte(idx)
            if self.wpe is not None:
                x = x + self.wpe.weight[:T]
            for block in self.h:
                x = block(x, self.rope)
            head = self.wte.weight if self.lm_head is None else self.lm_head.weight
            logits = F.linear(self.lnf(x), head)
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    model = Decoder()
    if device != "meta":
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() == 2:  # matrices and embeddings
                    residual = name.endswith(("attn.proj.weight", "mlp.proj.weight"))
                    std = c["init_std"] / math.sqrt(2 * c["layers"]) if residual else c["init_std"]
                    p.normal_(0.0, std)
                elif name.endswith(".bias"):
                    p.zero_()
    return model


def parameter_counts(c, model):
    """All parameters, PaLM's N (the linear layers and the LM head, wte when tied), and N's
    encoder part (t5; 0 otherwise)."""
    params = sum(p.numel() for p in model.parameters())
    embeddings = ("wte", "wpe", "enc_rel_bias", "dec_rel_bias")
    matmul = sum(p.numel() for n, p in model.named_parameters()
                 if p.dim() == 2 and not n.startswith(embeddings))
    enc = sum(p.numel() for n, p in model.named_parameters()
              if p.dim() == 2 and n.startswith("enc."))
    if c.get("tied"):
        matmul += model.wte.weight.numel()
    return params, matmul, enc


def decays(c, name, p):
    """AdamW's weight decay applies to matrices and embeddings, not to T5's position-bias
    tables (as ax's optimizer groups them)."""
    return p.dim() == 2 and "rel_bias" not in name


def make_rows(c, b, device):
    """One step's batch of random rows, the model's forward arguments."""
    import torch
    if c["family"] == "t5":
        return t5_peer().batch(t5_args(c, b), device)
    data = torch.randint(0, c["vocab"], (b, c["seq"] + 1), device=device)
    return [data[:, :-1].contiguous(), data[:, 1:].contiguous()]


# ---- run --------------------------------------------------------------------------------------


def learning_rate(c, s):
    """ax's schedule (docs/trainer.md): linear warm-up, cosine (or linear) decay to
    min_lr_ratio·lr."""
    lr, warm, end = c["lr"], c["warmup_steps"], c["decay_end"]
    if s <= warm:
        return lr * s / warm
    low = c.get("min_lr_ratio", 0.1) * lr
    if s >= end:
        return low
    progress = (s - warm) / (end - warm)
    if c.get("schedule") == "linear":
        return lr - (lr - low) * progress
    return low + (lr - low) * (1 + math.cos(math.pi * progress)) / 2


def is_oom(e):
    import torch
    oom = getattr(torch.cuda, "OutOfMemoryError", ())
    return (oom and isinstance(e, oom)) or "out of memory" in str(e).lower()


def run(a):
    import torch

    c = CONFIGS[a.model]
    cuda = a.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        sys.exit(f"torch_gpu_peer: {a.device}: torch {torch.__version__} sees no CUDA device")
    if a.mode == "compile" and not hasattr(torch, "compile"):
        print(json.dumps({"error": f"torch {torch.__version__} has no torch.compile"}))
        sys.exit(5)
    torch.manual_seed(1234)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    model = build_model(c, a.device)
    params, matmul, enc_matmul = parameter_counts(c, model)
    forward = torch.compile(model, dynamic=False) if a.mode == "compile" else model
    decay = [p for n, p in model.named_parameters() if decays(c, n, p)]
    no_decay = [p for n, p in model.named_parameters() if not decays(c, n, p)]
    groups = [{"params": decay, "weight_decay": c.get("weight_decay", 0.1)},
              {"params": no_decay, "weight_decay": 0.0}]
    betas = (0.9, c.get("beta2", 0.95))
    try:
        opt = torch.optim.AdamW(groups, lr=c["lr"], betas=betas, eps=1e-8, fused=cuda)
        optimizer = "AdamW fused" if cuda else "AdamW"
    except (TypeError, RuntimeError):  # no fused AdamW in this PyTorch
        opt = torch.optim.AdamW(groups, lr=c["lr"], betas=betas, eps=1e-8)
        optimizer = "AdamW (default implementation)"
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if cuda else None)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def step(s, rows):
        for group in opt.param_groups:
            group["lr"] = learning_rate(c, s)
        if autocast is not None:
            with autocast:
                loss = forward(*rows)
        else:
            loss = forward(*rows)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()  # ax reads its loss (and gradient norm) every step too

    def measure(b):
        """Warm-up and timed steps at batch b: (losses, timed step seconds, first step seconds)."""
        rows = make_rows(c, b, a.device)
        losses, times, timed, first = [], [], 0.0, None
        for s in range(1, a.warmup + a.steps + 1):
            t0 = time.perf_counter()
            losses.append(step(s, rows))
            sync()
            dt = time.perf_counter() - t0
            first = dt if first is None else first
            if s > a.warmup:
                times.append(dt)
                timed += dt
                if a.max_seconds and timed > a.max_seconds and len(times) >= 3:
                    break
        return losses, times, first

    tried, result = [], None
    for b in a.batches:
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        failure = None
        try:
            result = measure(b)
        except Exception as e:  # noqa: BLE001 - out of memory is expected, anything else reported
            first_line = str(e).splitlines()[0] if str(e) else ""
            failure = "oom" if is_oom(e) else f"{type(e).__name__}: {first_line}"
        tried.append({"batch": b, "fits": failure is None} | ({"why": failure} if failure else {}))
        if failure is None:
            batch = b
            break
        opt.zero_grad(set_to_none=True)
        gc.collect()  # the exception is gone: its frames held the activations
        if failure != "oom":
            print(json.dumps({"error": failure, "tried": tried}))
            sys.exit(1)
        print(f"torch_gpu_peer: {a.model} {a.mode}: batch {b} does not fit", file=sys.stderr)
    if result is None:
        print(json.dumps({"error": "no batch fits", "tried": tried}))
        sys.exit(4)
    losses, times, first_step_s = result

    sdpa = hasattr(torch.nn.functional, "scaled_dot_product_attention")
    report = {"step_seconds": times, "losses": losses, "batch": batch, "seq": row_tokens(c),
              "params": params, "matmul_params": matmul,
              "flops_per_token": flops_per_token(c, matmul, enc_matmul), "tried": tried,
              "first_step_seconds": first_step_s, "mode": a.mode, "optimizer": optimizer,
              "attention": ("explicit softmax(QK^T + bias + mask)" if c["family"] == "t5" else
                            "F.scaled_dot_product_attention" if sdpa else "explicit mask"),
              "torch": torch.__version__}
    if c["family"] == "t5":
        report.update(encoder_seq=c["encoder_seq"], targets_per_row=c["targets"])
    if cuda:
        props = torch.cuda.get_device_properties(a.device)
        free, total = torch.cuda.mem_get_info(a.device)
        report.update(peak_allocated_bytes=torch.cuda.max_memory_allocated(a.device),
                      peak_reserved_bytes=torch.cuda.max_memory_reserved(a.device),
                      device_used_bytes=total - free, device=props.name,
                      peak_flops=peak_bf16_flops(props, getattr(props, "clock_rate", 0)),
                      cuda=torch.version.cuda)
    print(json.dumps(report))


def count(a):
    import torch

    c = CONFIGS[a.model]
    try:
        model = build_model(c, "meta")
    except (RuntimeError, NotImplementedError, TypeError):  # no meta device: build it for real
        model = build_model(c, "cpu")
    params, matmul, enc_matmul = parameter_counts(c, model)
    out = {"params": params, "matmul_params": matmul,
           "flops_per_token": flops_per_token(c, matmul, enc_matmul), "torch": torch.__version__}
    if c["family"] == "t5":
        out.update(encoder_seq=c["encoder_seq"], targets_per_row=c["targets"])
    print(json.dumps(out))


# ---- report -----------------------------------------------------------------------------------

SIDES = (("ax", "ax"), ("ax-cuda-cores", "ax, attention on CUDA cores"),
         ("eager", "PyTorch eager"), ("compile", "torch.compile"))


def load(path):
    try:
        with open(path) as f:
            lines = [line for line in f.read().splitlines() if line.strip().startswith("{")]
        return json.loads(lines[-1]) if lines else {"error": "no result"}
    except (OSError, ValueError) as e:
        return {"error": f"unreadable result ({e})"}


def gib(n):
    return f"{n / 2**30:.1f} GiB" if n else "n/a"


def report(a):
    d = a.results
    header = load(os.path.join(d, "device.json")) if os.path.exists(
        os.path.join(d, "device.json")) else {}
    models = []
    for path in sorted(glob.glob(os.path.join(d, "*.*.json"))):
        name = os.path.basename(path).rsplit(".", 2)[0]
        if name not in models and name != "device":
            models.append(name)
    peak = None  # ax's figure when ax ran, else the peer's detection
    runs = {}
    for m in models:
        for side, _ in SIDES:
            r = load(os.path.join(d, f"{m}.{side}.json")) if os.path.exists(
                os.path.join(d, f"{m}.{side}.json")) else {"error": "not run"}
            runs[(m, side)] = r
            if side == "ax" and r.get("peak_flops") and "error" not in r:
                peak = peak or ("ax's backend", r["peak_flops"], r.get("backend", ""))
    for m in models:
        for side in ("eager", "compile"):
            r = runs[(m, side)]
            if not peak and r.get("peak_flops"):
                peak = ("the PyTorch peer's copy of ax's table", r["peak_flops"], r.get("device"))
    print()
    if header:
        print(f"GPU: {header.get('gpu', '?')}; driver {header.get('driver', '?')}; "
              f"{header.get('torch', '')}")
    if peak:
        print(f"peak dense bf16: {peak[1] / 1e12:.1f} TFLOP/s ({peak[2]}; from {peak[0]})")
    else:
        print("peak dense bf16: unknown (MFU not computed)")
    print("MFU = tokens/s x FLOPs per token (6N + 6·L·H·Q·T: PaLM's, causal attention halved; "
          "T5: ax's encoder-decoder count, flops_per_row over encoder + decoder tokens) / peak. "
          "seq: tokens a row (T5: encoder + decoder, ENC_SL+DEC_SL; sequences/s is rows/s, "
          "T5x's seq/s/GPU). Step: median of the timed steps. Memory: ax = the backend's peak "
          "count (device memory in use during its run by nvidia-smi, CUDA context included); "
          "PyTorch = max_memory_allocated (device memory in use at the end, context and cache "
          "included).")
    print()
    print("| model | implementation | batch | seq | tokens/step | step (ms) | sequences/s "
          "| tokens/s | MFU | peak memory | loss first -> last | ax / this |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    ratios = []
    for m in models:
        ax_tps = None
        fpt = {}
        for side, label in SIDES:
            r = runs[(m, side)]
            if side == "ax-cuda-cores" and r.get("error") == "not run":
                continue  # a run without that side
            if "error" in r or not r.get("step_seconds"):
                why = r.get("error", "no timed steps")
                tried = ", ".join(str(t["batch"]) for t in r.get("tried", []) if not t["fits"])
                if tried:
                    why += f" (did not fit: {tried})"
                print(f"| {m} | {label} | — | — | — | — | — | — | — | — | — | {why} |")
                continue
            tokens = r["batch"] * r["seq"]
            step = statistics.median(r["step_seconds"])
            tps = tokens / step
            enc = r.get("encoder_seq")
            seq = f"{enc}+{r['seq'] - enc}" if enc else f"{r['seq']}"
            fpt[side] = r["flops_per_token"]
            mfu = f"{100 * tps * r['flops_per_token'] / peak[1]:.1f} %" if peak else "n/a"
            if side.startswith("ax"):
                ax_tps = tps if side == "ax" else ax_tps
                # The backend's own count (its blocks and scratch), then nvidia-smi's sampled
                # peak over the idle baseline (adds the CUDA context and library handles).
                mem = (f"{gib(r.get('backend_peak_bytes'))} "
                       f"({gib(r.get('device_used_bytes'))})")
            else:
                mem = (f"{gib(r.get('peak_allocated_bytes'))} "
                       f"({gib(r.get('device_used_bytes'))})")
            loss = f"{r['losses'][0]:.3f} -> {r['losses'][-1]:.3f}"
            ratio = "—" if side == "ax" else (f"{ax_tps / tps:.2f}x" if ax_tps else "n/a")
            if side != "ax" and ax_tps:
                ratios.append(f"{m}: ax/{label} = {ax_tps / tps:.2f}x")
            print(f"| {m} | {label} | {r['batch']} | {seq} | {tokens} | {1e3 * step:.0f} "
                  f"| {r['batch'] / step:,.1f} | {tps:,.0f} | {mfu} | {mem} | {loss} | {ratio} |")
        if len(set(round(v) for v in fpt.values())) > 1:
            print(f"warning: {m}: the sides disagree on FLOPs per token {fpt}: not the same model")
        targets = {side: runs[(m, side)].get("targets_per_row") for side, _ in SIDES
                   if runs[(m, side)].get("encoder_seq")}  # T5's sides
        if len(set(targets.values())) > 1:
            print(f"warning: {m}: the sides disagree on the real targets a row {targets}: not the "
                  "same batch")
    print()
    for line in ratios:
        print(line)
    attention = os.path.join(d, "attention.md")
    if os.path.exists(attention):  # ax-attention-bench's table (bench/gpu_bench.sh)
        print()
        print("Attention alone (ax-attention-bench: ax's tensor-core and CUDA-core kernels, "
              "PyTorch's SDPA, the same shapes):")
        with open(attention) as f:
            print(f.read().rstrip())
        print()
    for m in models:
        for line in T5X_PUBLISHED.get(m, []):
            print(f"{m}: anchor, published, not measured here: {line}")
    for m in models:
        r = runs[(m, "ax")]
        if "error" not in r:
            print(f"{m}: ax ran on {r.get('backend', '?')}; parameters {r.get('params')}, "
                  f"init {r.get('init_seconds', 0):.1f} s")
        for side in ("eager", "compile"):
            r = runs[(m, side)]
            if "error" not in r:
                print(f"{m}: {side}: PyTorch {r.get('torch')} (CUDA {r.get('cuda')}), "
                      f"{r.get('optimizer')}, {r.get('attention')}, first step "
                      f"{r.get('first_step_seconds', 0):.1f} s, parameters {r.get('params')}")
                ax = runs[(m, "ax")]
                if "error" not in ax and ax.get("params") != r.get("params"):
                    print(f"warning: {m}: ax has {ax.get('params')} parameters, the peer "
                          f"{r.get('params')}: not the same model")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="train one model and print one JSON line")
    r.add_argument("--model", choices=sorted(CONFIGS), required=True)
    r.add_argument("--mode", choices=("eager", "compile"), default="eager")
    r.add_argument("--device", default="cuda")
    r.add_argument("--batches", default="8",
                   help="batch sizes to try, largest first, comma-separated")
    r.add_argument("--warmup", type=int, default=3, help="untimed steps (the first included)")
    r.add_argument("--steps", type=int, default=10, help="timed steps at most")
    r.add_argument("--max-seconds", type=float, default=0,
                   help="stop timing after this long (at least 3 steps); 0 = all steps")
    c = sub.add_parser("count", help="print the parameter counts of a model (meta device)")
    c.add_argument("--model", choices=sorted(CONFIGS), required=True)
    p = sub.add_parser("report", help="print the table from gpu_bench.sh's results directory")
    p.add_argument("results")
    a = ap.parse_args()
    if a.command == "run":
        a.batches = [int(b) for b in a.batches.split(",") if b]
        a.warmup = max(1, a.warmup)
        run(a)
    elif a.command == "count":
        count(a)
    else:
        report(a)


if __name__ == "__main__":
    main()
