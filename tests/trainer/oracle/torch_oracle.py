"""PyTorch oracle for ax's decoder models: loss and every parameter gradient, compared with ax's.

Usage: /usr/bin/python3 torch_oracle.py DIR   (Debian's python3-torch: scripts/setup.sh --with oracle)

DIR is written by oracle_test.cc:
  manifest.json   {"config": resolved ax config (model.* is read), "vocab": V, "batch": B,
                   "seq_len": T, "loss": ax's mean loss, "num_targets": n,
                   "tensors": [{"name": ..., "shape": [...]}, ...]}
  tokens.i32      (B, T) int32 little-endian
  targets.i32     (B, T) int32, < 0 = ignored
  params/NAME.f32 the parameter, float32 row-major, shape from the manifest
  grads/NAME.f32  ax's gradient of the mean loss with respect to it

The model below is written from docs/parameter-names.md and the op comments of
trainer/include/ax/trainer/backend.h, not from ax's C++. It runs in float64 from ax's float32
weights, so it is the exact answer up to float64 rounding; a float32 run of the same code is
reported beside it to show how far plain float32 arithmetic lands from that answer.

Relative error of a tensor: ||a - b|| / max(||b||, tiny), b the float64 oracle. The test fails
when the loss differs by more than 1e-5 or any gradient by more than 1e-4.
"""

import json
import math
import os
import sys

LOSS_TOL = 1e-5
GRAD_TOL = 1e-4
TINY = 1e-30
SETUP = "bash scripts/setup.sh --with oracle"

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"torch_oracle: {sys.executable} cannot import PyTorch/NumPy ({e}); "
          f"install them with `{SETUP}`", file=sys.stderr)
    sys.exit(1)


def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)  # biased, as LayerNorm defines it
    y = (x - mean) / torch.sqrt(var + eps) * w
    return y + b if b is not None else y


def rms_norm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def rope(x, theta):
    """x (B, H, T, HD): pairs (j, j + HD/2) rotate by t * theta^(-2j/HD) ("rotate half")."""
    T, HD = x.shape[-2], x.shape[-1]
    half = HD // 2
    j = torch.arange(half, dtype=x.dtype)
    inv_freq = theta ** (-2 * j / HD)
    angle = torch.arange(T, dtype=x.dtype)[:, None] * inv_freq[None, :]  # (T, HD/2)
    cos, sin = torch.cos(angle), torch.sin(angle)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def linear(x, p, name, bias):
    y = x @ p[name + ".weight"].T  # weight (out, in)
    return y + p[name + ".bias"] if bias else y


def norm(x, p, name, m):
    if m["norm"] == "layernorm":
        return layer_norm(x, p[name + ".weight"], p.get(name + ".bias"), m["norm_eps"])
    return rms_norm(x, p[name + ".weight"], m["norm_eps"])


def attention(x, p, i, m):
    B, T, _ = x.shape
    NH, KVH = m["num_heads"], m["num_kv_heads"]
    HD = m["model_dim"] // NH
    qkv = linear(x, p, f"h.{i}.attn.qkv", m["bias"])  # rows: NH q heads, KVH k, KVH v
    q, k, v = qkv.split([NH * HD, KVH * HD, KVH * HD], dim=-1)
    q = q.view(B, T, NH, HD).transpose(1, 2)  # (B, NH, T, HD)
    k = k.view(B, T, KVH, HD).transpose(1, 2)
    v = v.view(B, T, KVH, HD).transpose(1, 2)
    if m["position"] == "rope":
        q, k = rope(q, m["rope_theta"]), rope(k, m["rope_theta"])
    group = NH // KVH  # query head h reads key/value head h // group
    kv_of = torch.arange(NH) // group
    k, v = k[:, kv_of], v[:, kv_of]
    scores = q @ k.transpose(-1, -2) / math.sqrt(HD)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    y = torch.softmax(scores, dim=-1) @ v  # (B, NH, T, HD)
    y = y.transpose(1, 2).reshape(B, T, NH * HD)
    return linear(y, p, f"h.{i}.attn.proj", m["bias"])


def mlp(x, p, i, m):
    h = linear(x, p, f"h.{i}.mlp.fc", m["bias"])
    if m["activation"] == "gelu":
        h = gelu_tanh(h)
    else:  # swiglu: rows [0, F) gate through SiLU, [F, 2F) up
        gate, up = h.chunk(2, dim=-1)
        h = gate * torch.sigmoid(gate) * up
    return linear(h, p, f"h.{i}.mlp.proj", m["bias"])


def mean_loss(p, tokens, targets, m, vocab):
    T = tokens.shape[1]
    x = p["wte"][tokens]
    if m["position"] == "learned":
        x = x + p["wpe"][:T]
    for i in range(m["num_layers"]):
        x = x + attention(norm(x, p, f"h.{i}.ln1", m), p, i, m)
        x = x + mlp(norm(x, p, f"h.{i}.ln2", m), p, i, m)
    x = norm(x, p, "lnf", m)
    head = p["wte"] if m["tied_embeddings"] else p["lm_head.weight"]
    logits = (x @ head.T)[..., :vocab]  # padded vocabulary columns take no part
    logits = logits.reshape(-1, vocab)
    flat = targets.reshape(-1)
    keep = flat >= 0
    logp = torch.log_softmax(logits[keep], dim=-1)
    return -logp.gather(1, flat[keep][:, None]).mean()


def run_torch(weights, tokens, targets, m, vocab, dtype):
    p = {n: torch.tensor(w, dtype=dtype, requires_grad=True) for n, w in weights.items()}
    loss = mean_loss(p, tokens, targets, m, vocab)
    loss.backward()
    return loss.item(), {n: t.grad.numpy().astype(np.float64) for n, t in p.items()}


def rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), TINY))


def max_abs(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def main():
    if len(sys.argv) != 2:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    d = sys.argv[1]
    with open(os.path.join(d, "manifest.json")) as f:
        man = json.load(f)
    m, vocab = man["config"]["model"], man["vocab"]
    B, T = man["batch"], man["seq_len"]
    tokens = torch.from_numpy(np.fromfile(os.path.join(d, "tokens.i32"), "<i4").reshape(B, T))
    targets = torch.from_numpy(np.fromfile(os.path.join(d, "targets.i32"), "<i4").reshape(B, T))
    tokens, targets = tokens.long(), targets.long()

    weights, ax_grads = {}, {}
    for t in man["tensors"]:
        name, shape = t["name"], t["shape"]
        weights[name] = np.fromfile(os.path.join(d, "params", name + ".f32"), "<f4").reshape(shape)
        ax_grads[name] = np.fromfile(os.path.join(d, "grads", name + ".f32"), "<f4").reshape(shape)

    torch.set_num_threads(2)
    loss64, grads64 = run_torch(weights, tokens, targets, m, vocab, torch.float64)
    loss32, grads32 = run_torch(weights, tokens, targets, m, vocab, torch.float32)
    n_targets = int((targets >= 0).sum())

    print(f"oracle: {man['config']['experiment']} ({m['family']}: {m['norm']}, {m['activation']}, "
          f"{m['position']}, bias={m['bias']}, tied={m['tied_embeddings']}, "
          f"heads {m['num_heads']}/{m['num_kv_heads']}), vocab {vocab} padded to "
          f"{weights['wte'].shape[0]}, batch {B}x{T}, {n_targets} targets; ax {man['backend']}")
    ok = True
    if man["num_targets"] != n_targets:
        print(f"FAIL num_targets: ax {man['num_targets']}, oracle {n_targets}")
        ok = False
    loss_err = abs(man["loss"] - loss64) / max(abs(loss64), TINY)
    loss_err32 = abs(loss32 - loss64) / max(abs(loss64), TINY)
    ok &= loss_err <= LOSS_TOL
    print(f"loss: ax {man['loss']:.9g}  torch-f64 {loss64:.9g}  rel {loss_err:.2e} "
          f"(torch-f32 rel {loss_err32:.2e}; tol {LOSS_TOL:g})")

    print(f"{'tensor':26} {'shape':>12} {'||g||':>10} {'rel ax':>9} {'maxabs ax':>10} "
          f"{'rel f32':>9}")
    worst = ("", 0.0)
    for name in weights:
        g = grads64[name]
        r, r32 = rel_err(ax_grads[name], g), rel_err(grads32[name], g)
        bad = not r <= GRAD_TOL  # also catches NaN
        ok &= not bad
        worst = max(worst, (name, r), key=lambda w: w[1])
        shape = "x".join(str(s) for s in g.shape)
        print(f"{name:26} {shape:>12} {np.linalg.norm(g):10.3e} {r:9.2e} "
              f"{max_abs(ax_grads[name], g):10.2e} {r32:9.2e}{'  FAIL' if bad else ''}")
    print(f"worst gradient: {worst[0]} rel {worst[1]:.2e} (tol {GRAD_TOL:g})")
    print("oracle: PASS" if ok else "oracle: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
