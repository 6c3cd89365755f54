#!/usr/bin/env python3
"""torch_reference.py: PyTorch's figures for the shapes `burst bench kernels`
and `burst bench train` measure, to put beside ours in doc/BENCHMARKS.md.

Attention: scaled_dot_product_attention forward and forward + backward on
[1, 8, N, d] fp32, full and causal, GFLOP/s counted as `burst bench kernels`
counts them (forward 4 N^2 d per head, backward 2.5x that, halved for causal).
Training: one step (forward, backward, gradient clipping, AdamW) of the small
preset's shape (6 layers, d_model 512, 8 heads, SwiGLU 1408, vocab 8192, tied
embedding, RMSNorm, RoPE) on one sequence of N tokens, in tokens/s; nothing is
recomputed. Each figure is the median of --reps runs after one warm-up.

PyTorch is not a dependency of burstengine: without it this says so and exits 0.
Usage: python3 src/bench/torch_reference.py [--threads 2] [--seq 4096 8192]
       [--d 64 128] [--reps 3] [--no-train] [--no-attention]
"""
import argparse
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch_reference: PyTorch is not installed; nothing measured")
    sys.exit(0)


def median_seconds(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times)


def attention(seq, d, causal, reps):
    q, k, v = (torch.randn(1, 8, seq, d, requires_grad=True) for _ in range(3))
    do = torch.randn(1, 8, seq, d)
    flops = 4.0 * seq * seq * d * 8 * (0.5 if causal else 1.0)

    def fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def fwd_bwd():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        o.backward(do)

    t_fwd, lo_f, hi_f = median_seconds(fwd, reps)
    t_all, lo_a, hi_a = median_seconds(fwd_bwd, reps)
    t_bwd = max(t_all - t_fwd, 1e-9)
    print(f"sdpa {'causal' if causal else 'full':6} seq {seq:6} d {d:4}: "
          f"fwd {flops / t_fwd / 1e9:7.1f} GFLOP/s ({flops / hi_f / 1e9:.1f}-{flops / lo_f / 1e9:.1f}), "
          f"bwd {2.5 * flops / t_bwd / 1e9:7.1f} GFLOP/s (fwd+bwd minus fwd)")


class Block(torch.nn.Module):
    def __init__(self, dim, heads, ffn):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = torch.nn.RMSNorm(dim), torch.nn.RMSNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim, bias=False)
        self.o = torch.nn.Linear(dim, dim, bias=False)
        self.gate_up = torch.nn.Linear(dim, 2 * ffn, bias=False)
        self.down = torch.nn.Linear(ffn, dim, bias=False)

    def forward(self, x, cos, sin):
        n, dim = x.shape[1], x.shape[2]
        q, k, v = self.qkv(self.n1(x)).view(1, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(1, n, dim))
        g, u = self.gate_up(self.n2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def train_step(seq, reps):
    dim, heads, ffn, vocab, layers = 512, 8, 1408, 8192, 6
    emb = torch.nn.Embedding(vocab, dim)
    blocks = torch.nn.ModuleList(Block(dim, heads, ffn) for _ in range(layers))
    norm = torch.nn.RMSNorm(dim)
    params = list(emb.parameters()) + list(blocks.parameters()) + list(norm.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    hd = dim // heads
    inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2).float() / hd))
    ang = torch.outer(torch.arange(seq).float(), inv)
    cos, sin = torch.cat((ang, ang), -1).cos(), torch.cat((ang, ang), -1).sin()
    tokens = torch.randint(0, vocab, (1, seq + 1))

    def step():
        x = emb(tokens[:, :-1])
        for b in blocks:
            x = b(x, cos, sin)
        logits = norm(x) @ emb.weight.t()
        loss = F.cross_entropy(logits.view(-1, vocab), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    t, lo, hi = median_seconds(step, reps)
    print(f"train small seq {seq:6}: {seq / t:8.1f} tokens/s ({seq / hi:.1f}-{seq / lo:.1f})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seq", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--d", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-train", action="store_true", help="skip the training steps")
    ap.add_argument("--no-attention", action="store_true", help="skip the SDPA figures")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, fp32")
    for seq in [] if a.no_attention else a.seq:
        for d in a.d:
            for causal in (False, True):
                attention(seq, d, causal, a.reps)
    if not a.no_train:
        for seq in a.seq:
            train_step(seq, a.reps)


if __name__ == "__main__":
    main()
