"""hf_oracle.py: Hugging Face transformers as the oracle of burstengine's
import, export and evaluation (tests/train/test_hf.sh). Everything is local:
tiny random models built here, no hub download.

  make DIR --vocab V --hidden D --layers L --heads H --kv KV --ff F [--tied]
           [--rope-scaling JSON] [--dtype float32|float16|bfloat16] [--arch llama|mistral]
  tokens OUT.npy --n N --vocab V [--seed S]
  nll DIR TOKENS.npy --seq S --samples K     -> {"nll": mean, "tokens": count}
  load DIR                                   -> fails unless every key loads
  corrupt SRC OUT --kind dtype|missing|extra|shape   a broken copy of SRC
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch
import transformers
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM)


def make(a):
    torch.manual_seed(a.seed)
    common = dict(
        vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.ff,
        num_hidden_layers=a.layers, num_attention_heads=a.heads,
        num_key_value_heads=a.kv, tie_word_embeddings=a.tied,
        rope_theta=a.theta, rms_norm_eps=1e-5, max_position_embeddings=a.max_pos,
        # large weights: outputs far from uniform, so a wrong mapping shows
        initializer_range=0.25, torch_dtype=a.dtype)
    if a.arch == "mistral":
        model = MistralForCausalLM(MistralConfig(sliding_window=None, **common))
    else:
        scaling = json.loads(a.rope_scaling) if a.rope_scaling else None
        model = LlamaForCausalLM(LlamaConfig(rope_scaling=scaling, **common))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):  # gains other than 1: their mapping shows
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
    model.to(getattr(torch, a.dtype)).save_pretrained(a.dir, safe_serialization=True)


def tokens(a):
    rng = np.random.default_rng(a.seed)
    np.save(a.out, rng.integers(0, a.vocab, size=a.n, dtype=np.int64))


def nll(a):
    model = AutoModelForCausalLM.from_pretrained(a.dir, torch_dtype=torch.float32)
    model.eval()
    toks = np.load(a.tokens)
    w = a.seq + 1
    total, count = 0.0, 0
    with torch.no_grad():
        for s in range(a.samples):
            window = torch.tensor(toks[s * w:(s + 1) * w], dtype=torch.long)[None]
            logits = model(window[:, :-1]).logits.double()
            lp = torch.log_softmax(logits, dim=-1)
            total -= lp[0, torch.arange(a.seq), window[0, 1:]].sum().item()
            count += a.seq
    print(json.dumps({"nll": total / count, "tokens": count}))


def load(a):
    model, info = AutoModelForCausalLM.from_pretrained(a.dir, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        sys.exit(f"{a.dir}: from_pretrained: {bad}")
    print(f"{a.dir}: {type(model).__name__}, every key loaded")


def corrupt(a):
    from safetensors.torch import load_file, save_file
    w = load_file(os.path.join(a.src, "model.safetensors"))
    name = "model.layers.0.self_attn.k_proj.weight"
    if a.kind == "dtype":
        w[name] = w[name].to(torch.int64)
    elif a.kind == "missing":
        del w[name]
    elif a.kind == "extra":
        w["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(w[name].shape[1])
    elif a.kind == "shape":
        w[name] = w[name][:-1].contiguous()
    os.makedirs(a.out)
    shutil.copy(os.path.join(a.src, "config.json"), a.out)
    save_file(w, os.path.join(a.out, "model.safetensors"), metadata={"format": "pt"})


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    for k in ("vocab", "hidden", "layers", "heads", "kv", "ff"):
        m.add_argument("--" + k, type=int, required=True)
    m.add_argument("--tied", action="store_true")
    m.add_argument("--theta", type=float, default=10000.0)
    m.add_argument("--max-pos", type=int, default=2048)
    m.add_argument("--rope-scaling", default="")
    m.add_argument("--dtype", default="float32")
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--arch", default="llama", choices=["llama", "mistral"])
    t = sub.add_parser("tokens")
    t.add_argument("out")
    t.add_argument("--n", type=int, required=True)
    t.add_argument("--vocab", type=int, required=True)
    t.add_argument("--seed", type=int, default=2)
    n = sub.add_parser("nll")
    n.add_argument("dir")
    n.add_argument("tokens")
    n.add_argument("--seq", type=int, required=True)
    n.add_argument("--samples", type=int, required=True)
    ld = sub.add_parser("load")
    ld.add_argument("dir")
    c = sub.add_parser("corrupt")
    c.add_argument("src")
    c.add_argument("out")
    c.add_argument("--kind", required=True, choices=["dtype", "missing", "extra", "shape"])
    a = p.parse_args()
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    {"make": make, "tokens": tokens, "nll": nll, "load": load, "corrupt": corrupt}[a.cmd](a)


if __name__ == "__main__":
    main()
