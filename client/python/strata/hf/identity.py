"""The namespace's model name: the model's config, a fingerprint of its weights and the layout
its rows are kept in, so two models, or one model at two precisions, never share keys."""

import hashlib
import json

import torch

# Config entries that do not change what the model computes.
_VOLATILE = ("transformers_version", "_name_or_path", "dtype", "torch_dtype", "architectures",
             "_attn_implementation_autoset", "output_attentions", "output_hidden_states")

SAMPLES_PER_TENSOR = 64


def config_json(config):
    d = {k: v for k, v in config.to_dict().items() if k not in _VOLATILE}
    return json.dumps(d, sort_keys=True, separators=(",", ":"), default=str)


def weights_fingerprint(model, samples=SAMPLES_PER_TENSOR):
    """sha256 over every parameter's name, shape and dtype and `samples` of its elements at
    evenly spaced positions (the first and last included), read as float32."""
    h = hashlib.sha256()
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda np_: np_[0]):
            flat = p.detach().reshape(-1)
            h.update(("%s%s%s" % (name, tuple(p.shape), p.dtype)).encode())
            n = flat.numel()
            if n == 0:
                continue
            k = min(n, samples)
            # Integer positions: float steps over a large tensor round past its end.
            idx = torch.arange(k, dtype=torch.int64) * (n - 1) // max(k - 1, 1)
            h.update(flat[idx.to(flat.device)].to(torch.float32).cpu().numpy().tobytes())
    return h.hexdigest()


def model_name(model, layout):
    """hf-<model_type>-<24 hex digits of sha256(config, weights, layout)>."""
    h = hashlib.sha256()
    for part in (config_json(model.config), weights_fingerprint(model), layout.describe_json()):
        h.update(part.encode())
        h.update(b"\0")
    return "hf-%s-%s" % (layout.model_type, h.hexdigest()[:24])
