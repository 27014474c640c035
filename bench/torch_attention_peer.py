"""PyTorch's side of bench/attention_bench.cc (ax-attention-bench --peer): the same attention
shapes through torch.nn.functional.scaled_dot_product_attention in bf16 (CUDA) or f32 (CPU),
forward and backward, one JSON line per shape:

  {"shape": NAME, "forward_ms": F, "backward_ms": B, "backend": ...}  or  {"shape": NAME, "error": ...}

Milliseconds are medians of --repeats passes after two untimed ones (CUDA events on a GPU). The
backward time is that of a forward plus backward pass minus the forward's median (the forward
timed with autograd on, as in training). Without SDPA (PyTorch before 2.0) a matmul-softmax
attention stands in, and the backend field says so. GQA repeats
the key/value heads (Hugging Face's repeat_kv); T5's shared bias is an attn_mask that requires
grad (SDPA then takes its memory-efficient or math kernel); causal without a bias is
is_causal=True (FlashAttention's kernel where PyTorch has it). The shapes are ax-attention-bench's
(keep the two tables equal)."""

import argparse
import json
import statistics
import sys
import time

SHAPES = {  # name: (B, T, NH, KVH, HD, causal, bias)
    "pile126m": (8, 2048, 12, 12, 64, True, False),
    "fuji-1b": (2, 4096, 32, 8, 64, True, False),
    "llama-hd128": (1, 4096, 32, 8, 128, True, False),
    "t5-encoder": (16, 512, 12, 12, 64, False, True),
    "t5-decoder": (16, 128, 12, 12, 64, True, True),
    "tiny": (2, 128, 4, 2, 64, True, False),
}


def run(name, repeats, device):
    import torch
    import torch.nn.functional as F

    B, T, NH, KVH, HD, causal, with_bias = SHAPES[name]
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    gen = torch.Generator(device="cpu").manual_seed(5)

    def rand(*shape, grad=True):
        t = torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)
        return t.requires_grad_(grad)

    q, k, v = rand(B, NH, T, HD), rand(B, KVH, T, HD), rand(B, KVH, T, HD)
    bias = rand(1, NH, T, T) if with_bias else None
    dout = rand(B, NH, T, HD, grad=False)
    if with_bias and causal:
        # The causal mask folded into the bias (SDPA takes a mask or is_causal, not both).
        keep = torch.ones(T, T, dtype=torch.bool, device=device).tril()
        mask_add = torch.zeros(T, T, dtype=dtype, device=device).masked_fill(~keep, float("-inf"))
    else:
        mask_add = None

    sdpa = getattr(F, "scaled_dot_product_attention", None)  # PyTorch 2.0 and later

    def math_attention(qq, kk, vv, m, is_causal):  # PyTorch before 2.0 (Debian's 1.13)
        s = (qq @ kk.transpose(-1, -2)) / HD ** 0.5
        if m is not None:
            s = s + m
        if is_causal:
            s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool, device=device).tril(),
                              float("-inf"))
        return torch.softmax(s.float(), dim=-1).to(dtype) @ vv

    def forward():
        kk = k.repeat_interleave(NH // KVH, dim=1) if KVH != NH else k
        vv = v.repeat_interleave(NH // KVH, dim=1) if KVH != NH else v
        m = None
        if with_bias:
            m = bias if mask_add is None else bias + mask_add
        if sdpa is None:
            return math_attention(q, kk, vv, m, causal and not with_bias)
        if with_bias:
            return sdpa(q, kk, vv, attn_mask=m)
        return sdpa(q, kk, vv, is_causal=causal)

    def both():
        out = forward()
        out.backward(dout)

    def timed(fn):
        ms = []
        for i in range(repeats + 2):
            if device == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                    enable_timing=True)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                elapsed = start.elapsed_time(end)
            else:
                t0 = time.perf_counter()
                fn()
                elapsed = 1e3 * (time.perf_counter() - t0)
            if i >= 2:
                ms.append(elapsed)
        return statistics.median(ms)

    fwd = timed(forward)  # with autograd on, as in training
    total = timed(both)
    kind = "scaled_dot_product_attention" if sdpa is not None else "matmul + softmax (no SDPA)"
    return {"shape": name, "forward_ms": fwd, "backward_ms": max(total - fwd, 0.0),
            "backend": f"torch {torch.__version__} {kind} on {device}, {dtype}"}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", required=True)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    a = p.parse_args()
    for name in a.shapes.split(","):
        try:
            if name not in SHAPES:
                raise ValueError(f"unknown shape {name}")
            line = run(name, a.repeats, a.device)
        except Exception as e:  # one shape's failure (memory, no SDPA) leaves the others
            line = {"shape": name, "error": f"{type(e).__name__}: {str(e)[:200]}"}
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
