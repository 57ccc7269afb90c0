#!/usr/bin/env python3
"""Turn-2 time to first token of a transformers kimi_linear model: resumed from strata
(strata.hf) against recomputing the history with the same model in the same run, and the
load's bytes and GB/s against the host-to-GPU copy rate measured in the same run.

    python3 bench/hf_resume.py --stratad PATH --binding client/python [--tokens 32768]

Two stratad on loopback (started here). The model: kimi_linear with seeded random weights
at the shape SHAPE below (bf16, dense MLPs). Turn 1 prefills the history through
Store.prefill (checkpoints every kda_interval blocks, saved in the background); turn 2
appends a 64-token message. Resumed TTFT = resume() (lookup, reads into pinned memory,
copies to the GPU) + the forward of the 64 new tokens + argmax; recompute TTFT = one forward
of history + message into a fresh cache + argmax. Each is repeated (--reps), medians and
median absolute deviations reported; a JSON summary goes to --out."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SHAPE = dict(vocab_size=32000, hidden_size=2048, intermediate_size=8192,
             moe_intermediate_size=1024, num_hidden_layers=16, num_attention_heads=16,
             num_key_value_heads=16, kv_lora_rank=512, q_lora_rank=None, qk_rope_head_dim=64,
             v_head_dim=128, qk_nope_head_dim=128, num_experts=8, num_experts_per_tok=2,
             linear_head_dim=128, linear_num_heads=16, pad_token_id=0, bos_token_id=1,
             eos_token_id=2, mlp_layer_types=["dense"] * 16)
# layer_types: the config's default for 16 layers, MLA at layers 4, 8 and 12, KDA elsewhere.
MESSAGE = 64


def med(xs):
    m = statistics.median(xs)
    return m, statistics.median([abs(x - m) for x in xs])


def h2d_rate(torch, nbytes, reps=10):
    """GB/s of pinned host -> GPU copies of nbytes, the median of reps."""
    src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst.copy_(src)
    torch.cuda.synchronize()
    rates = []
    for _ in range(reps):
        t = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        rates.append(nbytes / (time.perf_counter() - t) / 1e9)
    return med(rates)


def host_copy_rate(torch, nbytes, reps=10):
    """GB/s of a host copy of nbytes into pinned memory on torch's CPU threads (the
    machine's memory bandwidth as one parallel copy sees it), the median of reps."""
    src = torch.ones(nbytes, dtype=torch.uint8)
    dst = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dst.copy_(src)
    rates = []
    for _ in range(reps):
        t = time.perf_counter()
        dst.copy_(src)
        rates.append(nbytes / (time.perf_counter() - t) / 1e9)
    return med(rates)


def start(stratad, n=2, block_tokens=64):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                    "integration"))
    from obs_harness import free_port
    ports = [free_port() for _ in range(n)]
    nodes = ",".join("127.0.0.1:%d" % p for p in ports)
    procs = []
    for p in ports:
        pr = subprocess.Popen([stratad, "--listen", "127.0.0.1:%d" % p, "--peers", nodes,
                               "--cluster-secret", "strata-hf-bench-secret-0123",
                               "--memory-limit", "16G", "--max-object", "64M",
                               "--block-tokens", str(block_tokens)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert "stratad ready" in pr.stdout.readline().decode()
        procs.append(pr)
    return nodes, procs


def resumed_ttft(args, torch, store, prompt, ids):
    """Resumed TTFTs (s), the last resume's load record and logits."""
    times, loads, last = [], [], None
    for _ in range(args.reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        cache, reused = store.resume(prompt)
        with torch.no_grad():
            logits = store.model(ids[:, reused:], past_key_values=cache, use_cache=True).logits
        tok = int(logits[0, -1].argmax())
        times.append(time.perf_counter() - t)
        loads.append(dict(store.last_resume, reused=reused))
        last = (tok, logits[0, -1].float())
        del cache, logits
    return times, loads, last


def run(args, torch, stores, n_tokens):
    import numpy as np
    store = stores["inline"] if "inline" in stores else next(iter(stores.values()))
    model = store.model
    rng = np.random.default_rng(n_tokens)
    history = [int(x) for x in rng.integers(3, SHAPE["vocab_size"], size=n_tokens)]
    prompt = history + [int(x) for x in rng.integers(3, SHAPE["vocab_size"], size=MESSAGE)]
    t = time.perf_counter()
    _, cache = store.prefill(history)
    store.flush()
    torch.cuda.synchronize()
    prefill_s = time.perf_counter() - t
    del cache
    ids = torch.tensor([prompt], device="cuda")
    per = {}
    for name, st in stores.items():
        for p in args.pieces:
            st.load_pieces = p
            key = name if len(args.pieces) == 1 else "%s/p%d" % (name, p)
            per[key] = resumed_ttft(args, torch, st, prompt, ids)
    recompute, ref = [], None
    for _ in range(args.recompute_reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.no_grad():
            logits = model(ids, past_key_values=store.new_cache(), use_cache=True).logits
        tok_ref = int(logits[0, -1].argmax())
        recompute.append(time.perf_counter() - t)
        ref = logits[0, -1].float()
        del logits
    torch.cuda.empty_cache()
    r = {"tokens": n_tokens, "message": MESSAGE, "prefill_s": prefill_s,
         "recompute_ttft_s": med(recompute), "recompute_all": recompute, "transports": {}}
    for name, (times, loads, (tok, first)) in per.items():
        nbytes = loads[-1]["bytes"]
        h2d, h2d_mad = h2d_rate(torch, nbytes)
        host, host_mad = host_copy_rate(torch, nbytes)
        get_rates = [ld["bytes"] / ld["get_s"] / 1e9 for ld in loads]
        load_rates = [ld["bytes"] / (ld["get_s"] + ld["fill_s"]) / 1e9 for ld in loads]
        r["transports"][name] = {
            "reused": loads[-1]["reused"], "load_bytes": nbytes,
            "resumed_ttft_s": med(times), "speedup": med(recompute)[0] / med(times)[0],
            "get_gbps": med(get_rates), "load_gbps": med(load_rates), "h2d_gbps": [h2d, h2d_mad],
            "get_over_h2d": med(get_rates)[0] / h2d, "load_over_h2d": med(load_rates)[0] / h2d,
            "load_over_h2d_fresh": med(load_rates)[0] / args.h2d_fresh[0],
            "host_copy_gbps": [host, host_mad], "pieces": loads[-1].get("pieces", 1),
            "same_token": tok == tok_ref, "logit_diff": float((first - ref).abs().max()),
            "logit_max": float(ref.abs().max()), "resumed_all": times}
    print(json.dumps(r))
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stratad", required=True)
    ap.add_argument("--binding", required=True)
    ap.add_argument("--tokens", default="32768", help="history lengths, comma separated")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--recompute-reps", type=int, default=3)
    ap.add_argument("--kda-interval", type=int, default=16)
    ap.add_argument("--budget-s", type=float, default=480, help="skip lengths after this")
    ap.add_argument("--transports", default="inline,ucx",
                    help="client transports to resume over, each its own client; NAME+fresh: "
                         "that transport with Store(staging=False), fresh pinned buffers a resume")
    ap.add_argument("--block-tokens", type=int, default=64, help="the daemons' --block-tokens")
    ap.add_argument("--copy-threads", type=int, default=8)
    ap.add_argument("--pieces", default="4",
                    help="Store.load_pieces values to resume with, comma separated (each "
                         "measured on every transport's store)")
    ap.add_argument("--tmp", default="/tmp")
    ap.add_argument("--out")
    args = ap.parse_args()
    args.pieces = [int(x) for x in args.pieces.split(",")]
    sys.path.insert(0, args.binding)
    import torch
    # The host-to-GPU copy in a fresh process, before the model exists (the rate measured
    # after the model has run was half of it on some machines: docs/performance.md).
    args.h2d_fresh = h2d_rate(torch, 256 << 20)
    from transformers import AutoConfig, AutoModelForCausalLM
    import strata.hf
    t0 = time.perf_counter()
    torch.manual_seed(0)
    cfg = AutoConfig.for_model("kimi_linear", **SHAPE)
    model = AutoModelForCausalLM.from_config(cfg).to("cuda", torch.bfloat16).eval()
    nodes, procs = start(args.stratad, block_tokens=args.block_tokens)
    params = sum(p.numel() for p in model.parameters())
    results = {"shape": SHAPE, "dtype": "bf16", "params": params, "h2d_fresh_gbps": args.h2d_fresh,
               "gpu": torch.cuda.get_device_name(0), "runs": []}
    try:
        stores = {}
        for name in args.transports.split(","):
            transport, _, variant = name.partition("+")
            conf = os.path.join(args.tmp, "client-%s.conf" % name)
            with open(conf, "w") as f:
                f.write("transport = %s\ncopy_threads = %d\n" % (transport, args.copy_threads))
            stores[name] = strata.hf.Store(model, nodes, kda_interval=args.kda_interval,
                                           config_file=conf, staging=variant != "fresh")
        store = next(iter(stores.values()))
        results["descriptor"] = store.layout.describe()
        results["block_tokens"] = store.block_tokens
        for n in [int(x) for x in args.tokens.split(",")]:
            if time.perf_counter() - t0 > args.budget_s:
                print("skipped %d tokens: past --budget-s" % n)
                break
            results["runs"].append(run(args, torch, stores, n))
        for st in stores.values():
            st.close()
    finally:
        for p in procs:
            p.terminate()
            p.wait()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
