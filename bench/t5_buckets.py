"""T5's relative position buckets, shared by the PyTorch T5s that are checked against ax.

Used by bench/torch_t5_peer.py (the benchmark's T5, on CPU and, through bench/torch_gpu_peer.py,
on a GPU) and tests/trainer/oracle/torch_oracle.py (the float64 oracle whose loss and gradients
ax's tiny-t5 must match), so the benchmark's model buckets positions as the oracle-checked one.
"""

import math

import torch


def relative_position_buckets(Tq, Tk, bidirectional, num_buckets, max_distance):
    """(Tq, Tk) bucket ids of key - query offsets, as Hugging Face's _relative_position_bucket:
    bidirectional: half the buckets for keys after the query; causal: offsets <= 0 only. Exact
    buckets below half of a side's, logarithmic ones up to max_distance, the last bucket beyond.
    """
    rel = torch.arange(Tk)[None, :] - torch.arange(Tq)[:, None]  # key - query
    n, ret = num_buckets, torch.zeros(Tq, Tk, dtype=torch.long)
    if bidirectional:
        n //= 2
        ret = (rel > 0).long() * n
        rel = rel.abs()
    else:
        rel = (-rel).clamp(min=0)
    max_exact = n // 2
    large = max_exact + (torch.log(rel.float() / max_exact) / math.log(max_distance / max_exact)
                         * (n - max_exact)).long()
    return ret + torch.where(rel < max_exact, rel, large.clamp(max=n - 1))
