#!/usr/bin/env python3
"""strata.hf against real daemons on loopback with real transformers models on a GPU
(kimi_linear, deepseek_v32, qwen3_next at small configs, seeded random weights).

Per model, a four-turn conversation through strata.hf.Chat; before each later turn the
history is resumed at a KDA checkpoint, between checkpoints (the tail recomputed) and, by
the turn itself, at the previous turn's end: each resumed forward's last-token logits must
equal a full forward's within the tolerance (fp32: 1e-4 absolute; bf16: 1.5 % of the
largest logit), and a cache zeroed after the resume must miss it (the check can fail). A second
process resumes the history as well; a node killed between the lookup and the reads falls
back (a new lookup, else recompute) and still matches; a model with other weights, and the
same model in bf16, get other namespaces and resume nothing of the fp32 model's.

Exits 77 (ctest: skipped) with the reason when torch, transformers or a GPU is missing, after
checking that `import strata.hf` without torch fails with a message that names it."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77
FP32_TOL = 1e-4
BF16_REL_TOL = 0.015
BLOCK_TOKENS = 32
KDA_INTERVAL = 4  # a checkpoint every 128 tokens

CFG = {
    "kimi_linear": dict(
        vocab_size=512, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32,
        q_lora_rank=None, qk_rope_head_dim=16, v_head_dim=16, qk_nope_head_dim=16, num_experts=4,
        num_experts_per_tok=2, linear_head_dim=16, linear_num_heads=4, pad_token_id=0,
        bos_token_id=1, eos_token_id=2,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        mlp_layer_types=["dense"] * 4),
    "deepseek_v32": dict(
        vocab_size=512, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32,
        q_lora_rank=48, qk_rope_head_dim=16, v_head_dim=16, qk_nope_head_dim=16,
        n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1, index_topk=64,
        index_head_dim=32, index_n_heads=4, first_k_dense_replace=2, pad_token_id=0),
    "qwen3_next": dict(
        vocab_size=512, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=16, linear_value_head_dim=16, num_experts=4, num_experts_per_tok=2,
        pad_token_id=0,
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"]),
}
TURNS = [150, 70, 110, 90]  # user tokens per turn
ANSWER = 6  # tokens generated per turn


def skip_reason():
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        return "torch or transformers not installed (%s)" % e
    if not torch.cuda.is_available():
        return "no CUDA device"
    return None


def build(name, seed, dtype):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    torch.manual_seed(seed)
    cfg = AutoConfig.for_model(name, **CFG[name])
    return AutoModelForCausalLM.from_config(cfg).to("cuda", dtype).eval()


def full_logits(model, ids):
    """The last token's logits of a forward over all of ids, into a fresh cache."""
    import torch
    from transformers import DynamicCache
    with torch.no_grad():
        out = model(torch.tensor([ids], device="cuda"), use_cache=True,
                    past_key_values=DynamicCache(config=model.config))
    return out.logits[0, -1].float()


def tolerance(ref, dtype):
    import torch
    return FP32_TOL if dtype == torch.float32 else BF16_REL_TOL * float(ref.abs().max())


def resumed_logits(store, ids, corrupt=False):
    """(reused tokens, last-token logits) of a resume of ids and a forward of the rest."""
    cache, reused = store.resume(ids)
    if corrupt:
        for layer in cache.layers:
            for t in [getattr(layer, "keys", None), getattr(layer, "values", None)] + \
                    list(getattr(layer, "recurrent_states", {}).values()):
                if t is not None and t.numel():
                    t.zero_()
    logits, _ = store.prefill(ids, cache, start=reused, save=False)
    return reused, logits[0, -1].float()


def expected_reuse(store, n_tokens):
    """Where a resume of n_tokens tokens must start, by what this test's stores wrote."""
    limit = (n_tokens - 1) // store.block_tokens * store.block_tokens
    if not store.layout.linear:  # every block boundary of the written rows resumes
        return min(limit, max(store.saved_positions | {0}))
    return max([p for p in store.checkpoints if p <= limit] + [0])


class Check:
    def __init__(self, name):
        self.name, self.rows, self.failures = name, [], []

    def close(self, what, diff, tol, reused=None, expect=None):
        ok = diff <= tol and (expect is None or reused == expect)
        self.rows.append({"check": what, "diff": diff, "tol": tol, "reused": reused,
                          "expected_reuse": expect, "ok": ok})
        print("%-13s %-44s diff %.3g (tol %.3g) reused %s%s %s" % (
            self.name, what, diff, tol, reused,
            "" if expect is None else " (want %d)" % expect, "ok" if ok else "FAIL"))
        if not ok:
            self.failures.append(what)

    def truth(self, what, cond, detail=""):
        self.rows.append({"check": what, "ok": bool(cond), "detail": detail})
        print("%-13s %-44s %s %s" % (self.name, what, detail, "ok" if cond else "FAIL"))
        if not cond:
            self.failures.append(what)


def probe_points(store, history):
    """A resume at the last KDA checkpoint and one between checkpoints, inside history."""
    bt, step = store.block_tokens, store.block_tokens * store.kda_interval
    points = []
    at = (len(history) - 1) // step * step
    if at:
        points.append(("at a checkpoint (%d)" % at, history[:at + 1]))
    # A block and 7 tokens past a checkpoint that has no other one in the block after it:
    # the KV rows go on, the state does not, so the tail is recomputed.
    marks = sorted(store.checkpoints if store.layout.linear else store.saved_positions)
    for c in reversed([0] + marks):
        n = c + bt + 7
        if n <= len(history) and not any(c < p <= c + bt for p in marks):
            points.append(("between checkpoints (%d tokens)" % n, history[:n]))
            break
    return points


def conversation(chk, store, model, dtype, rng, turns):
    """turns turns of a Chat, the resumes checked before each; returns the history."""
    import strata.hf
    chat = strata.hf.Chat(store, "chat-%s-%s" % (chk.name, str(dtype)[6:]))
    for t, n_user in enumerate(turns):
        if t:
            for what, q in probe_points(store, chat.tokens):
                ref = full_logits(model, q)
                reused, got = resumed_logits(store, q)
                chk.close("turn %d: %s" % (t + 1, what), float((got - ref).abs().max()),
                          tolerance(ref, dtype), reused, expected_reuse(store, len(q)))
        new = [int(x) for x in rng.integers(3, 500, size=n_user)]
        want = expected_reuse(store, len(chat.tokens) + n_user) if t else 0
        chat.turn(new, max_new_tokens=ANSWER)
        ids = chat.tokens[:len(chat.tokens) - ANSWER]
        ref = full_logits(model, ids)
        chk.close("turn %d: at the previous turn's end" % (t + 1),
                  float((chat.last_prompt_logits.float() - ref).abs().max()),
                  tolerance(ref, dtype), chat.turns[-1]["reused"], want)
    return chat.tokens


def negative_control(chk, store, model, history, dtype):
    q = history[:len(history) - 3]
    ref = full_logits(model, q)
    reused, got = resumed_logits(store, q, corrupt=True)
    diff = float((got - ref).abs().max())
    chk.truth("a zeroed resumed cache misses the logits", reused > 0 and diff > 2 *
              tolerance(ref, dtype), "diff %.3g, reused %d" % (diff, reused))


def second_process(chk, args, nodes, history, store):
    q = history + [7, 8, 9]
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--second", chk.name,
                          "--nodes", nodes, "--binding", args.binding],
                         input=json.dumps(q), capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        chk.truth("a second process resumes", False, out.stderr[-2000:])
        return
    got = json.loads(out.stdout.strip().splitlines()[-1])
    chk.close("a second process resumes", got["diff"], FP32_TOL, got["reused"],
              expected_reuse(store, len(q)))


def second_main(name, nodes):
    """The second process: the same model rebuilt, nothing in memory, resumes stdin's ids."""
    import torch
    import strata.hf
    ids = json.loads(sys.stdin.read())
    model = build(name, 0, torch.float32)
    store = strata.hf.Store(model, nodes, kda_interval=KDA_INTERVAL, timeout_ms=3000)
    reused, got = resumed_logits(store, ids)
    diff = float((got - full_logits(model, ids)).abs().max())
    print(json.dumps({"reused": reused, "diff": diff, "model_name": store.model_name}))
    store.close()


def node_killed(chk, model, nodes, daemons, history):
    """Kills a daemon between the lookup and the reads of a resume (segments of 4 blocks
    spread the history over both), then the other one the same way: each resume must still
    match, the second by recomputing everything."""
    import strata.hf
    victims = []

    class KillStore(strata.hf.Store):
        def _before_get(self, blocks):
            if victims and victims[0].poll() is None:
                victims[0].kill()
                victims[0].wait()

    store = KillStore(model, nodes, kda_interval=KDA_INTERVAL, timeout_ms=3000)
    q = history + [11, 12]
    ref = full_logits(model, q)
    for i, what in ((1, "one of two nodes killed while reading"),
                    (0, "the last node killed while reading")):
        victims[:] = [daemons[i]]
        reused, got = resumed_logits(store, q)
        chk.close(what, float((got - ref).abs().max()), FP32_TOL, reused, 0 if i == 0 else None)
        chk.truth("  (its resume)", True, "%s, reused %d" % (store.last_resume, reused))
    store.client.close()


def start_daemons(stratad, data):
    from obs_harness import free_port
    ports = [free_port(), free_port()]
    nodes = ",".join("127.0.0.1:%d" % p for p in ports)
    procs = []
    for p in ports:
        pr = subprocess.Popen([stratad, "--listen", "127.0.0.1:%d" % p, "--peers", nodes,
                               "--cluster-secret", "strata-hf-test-secret-0123",
                               "--block-tokens", str(BLOCK_TOKENS), "--segment-blocks", "4",
                               "--memory-limit", "2G"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        line = pr.stdout.readline().decode()
        assert "stratad ready" in line, line
        procs.append(pr)
    return nodes, procs


def one_model(name, args, data):
    import numpy as np
    import torch
    import strata.hf
    chk = Check(name)
    nodes, daemons = start_daemons(args.stratad, data)
    try:
        rng = np.random.default_rng(22)
        model = build(name, 0, torch.float32)
        store = strata.hf.Store(model, nodes, kda_interval=KDA_INTERVAL, timeout_ms=3000)
        chk.truth("model descriptor", True, store.layout.describe_json()[:300])
        history = conversation(chk, store, model, torch.float32, rng, TURNS)
        negative_control(chk, store, model, history, torch.float32)
        second_process(chk, args, nodes, history, store)

        other = strata.hf.Store(build(name, 1, torch.float32), nodes, kda_interval=KDA_INTERVAL)
        cache, reused = other.resume(history)
        chk.truth("other weights: another namespace, no reuse",
                  other.model_name != store.model_name and reused == 0,
                  "%s vs %s, reused %d" % (other.model_name, store.model_name, reused))
        other.close()

        bf = strata.hf.Store(build(name, 0, torch.bfloat16), nodes, kda_interval=KDA_INTERVAL)
        cache, reused = bf.resume(history)
        chk.truth("bf16: another namespace, no reuse of fp32 rows",
                  bf.model_name != store.model_name and reused == 0,
                  "%s, reused %d" % (bf.model_name, reused))
        bhist = conversation(chk, bf, bf.model, torch.bfloat16, np.random.default_rng(5),
                             TURNS[:3])
        negative_control(chk, bf, bf.model, bhist, torch.bfloat16)
        bf.close()
        store.flush()
        node_killed(chk, model, nodes, daemons, history)
    finally:
        for p in daemons:
            if p.poll() is None:
                p.terminate()
                p.wait()
    return chk


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stratad")
    ap.add_argument("--lib")
    ap.add_argument("--binding", required=True)
    ap.add_argument("--models", default=",".join(CFG))
    ap.add_argument("--out", help="write the checks here as JSON")
    ap.add_argument("--second", help=argparse.SUPPRESS)
    ap.add_argument("--nodes", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.lib:
        os.environ["STRATA_LIB"] = args.lib
    sys.path.insert(0, args.binding)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "integration"))
    why = skip_reason()
    if why and "torch" in why:
        # Without torch, strata.hf must say what it needs (the rest of strata still loads).
        try:
            import strata.hf  # noqa: F401
            print("import strata.hf without torch did not fail")
            return 1
        except ImportError as e:
            if "needs torch and transformers" not in str(e):
                print("import strata.hf without torch: unclear message %r" % str(e))
                return 1
    if why:
        print("test_hf skipped: %s (strata.hf's device test runs on a machine with a GPU, "
              "torch and transformers; docs/transformers.md)" % why)
        return SKIP
    if args.second:
        second_main(args.second, args.nodes)
        return 0
    for name in args.models.split(","):
        if name not in CFG:
            print("--models: unknown model %r (known: %s)" % (name, ", ".join(CFG)))
            return 2
    results, failed = {}, []
    data = tempfile.mkdtemp(prefix="strata-hf-")
    for name in args.models.split(","):
        chk = one_model(name, args, data)
        results[name] = chk.rows
        failed += ["%s: %s" % (name, f) for f in chk.failures]
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    if failed:
        print("FAILED:\n  " + "\n  ".join(failed))
        return 1
    print("test_hf: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
