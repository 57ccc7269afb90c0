"""strata.hf: Hugging Face transformers caches on a strata cluster (docs/transformers.md).

    import strata.hf
    store = strata.hf.Store(model, "127.0.0.1:7700")       # the namespace names the model
    chat = strata.hf.Chat(store, "chat-1")
    reply = chat.turn(prompt_ids, max_new_tokens=64)      # resume, prefill, generate, save
    cache, reused = store.resume(ids)                     # or by hand: the model's own cache
    logits, cache = store.prefill(ids, cache, start=reused)

Needs torch and transformers; the rest of the strata package does not.
"""

try:
    import torch  # noqa: F401
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError("strata.hf needs torch and transformers (pip install torch "
                      "transformers); the rest of strata works without them") from e

from .identity import model_name, weights_fingerprint  # noqa: E402
from .layout import Layout, probe_layout  # noqa: E402
from .store import SaveStats, Store  # noqa: E402

__all__ = ["Chat", "Layout", "SaveStats", "Store", "model_name", "probe_layout",
           "weights_fingerprint"]


class Chat:
    """A multi-turn conversation: each turn resumes the history from the cluster, computes the
    rest of the prompt, generates greedily and saves; the session record follows the history.

    Checkpoints (docs/transformers.md, "The checkpoint rule"): a linear-attention state is
    only known at the position the cache stands at, so prefill() stops at every
    kda_interval-th block boundary and at the prompt's last one, and generation saves each
    time it crosses a block boundary. A later turn resumes at the last of these and
    recomputes the fewer than block_tokens tokens after it."""

    def __init__(self, store, session_id=None):
        self.store = store
        self.session_id = session_id
        self.tokens = []
        self.turns = []  # per turn: {"reused", "computed", "generated"}
        self.last_prompt_logits = None  # the prompt's last-token logits of the latest turn
        if session_id:
            store.client.session_open(session_id)

    def turn(self, new_tokens, max_new_tokens=16, eos_token_id=None):
        """Appends new_tokens to the history, answers greedily; returns the answer's tokens."""
        import torch

        st = self.store
        ids = self.tokens + [int(t) for t in new_tokens]
        cache, reused = st.resume(ids)
        logits, cache = st.prefill(ids, cache, start=reused)
        self.last_prompt_logits = logits[0, -1]
        out = []
        with torch.no_grad():
            for _ in range(max_new_tokens):
                nxt = int(logits[0, -1].argmax())
                out.append(nxt)
                if nxt == eos_token_id or len(out) == max_new_tokens:
                    break
                step = torch.tensor([[nxt]], device=st.device)
                logits = st.model(step, past_key_values=cache, use_cache=True).logits
                if cache.get_seq_length() % st.block_tokens == 0:
                    st.save(cache, ids + out)
        # The last answer token has not gone through the model: the history the cache holds
        # ends one before it.
        self.tokens = ids + out
        st.save(cache, self.tokens[:cache.get_seq_length()])
        st.flush()
        if self.session_id and len(self.tokens) >= st.block_tokens:
            chain = st.client.hash(_u32(self.tokens))
            st.client.session_append(self.session_id, chain)
        self.turns.append({"reused": reused, "computed": len(ids) - reused,
                           "generated": len(out)})
        return out


def _u32(tokens):
    import numpy as np
    return np.asarray(tokens, dtype=np.uint32)
