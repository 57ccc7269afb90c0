"""How a transformers cache maps to strata objects (docs/transformers.md).

A model's DynamicCache holds one layer object per decoder layer. strata.hf knows three:

- DynamicLayer (plain and MLA attention): `keys` and `values`, each (1, heads, tokens, dim).
  Its rows become KV objects: per block of B tokens, row r is token r's keys of every head
  followed by its values of every head, in the cache's dtype.
- DynamicIndexedLayer (DSA): the same KV rows plus `indexer_keys` (1, tokens, dim) as IDX
  objects: row r is token r's indexer key.
- LinearAttentionLayer (KDA, Gated DeltaNet): `conv_states[0]` and `recurrent_states[0]`,
  fixed-size states after the last token the cache has seen. Every such layer's two states,
  in layer order, make the one KDA object of a checkpoint.

KV and IDX objects are numbered by the attention layer's ordinal among the cache's attention
layers; the KDA object is layer 0. The layout is read off the cache of a short probe forward,
so it needs no knowledge of a model's config fields.
"""

import json

import torch

_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


def dtype_name(dt):
    if dt not in _DTYPES:
        raise ValueError("strata.hf keeps f32, bf16 or f16 rows, not %s" % dt)
    return _DTYPES[dt]


class AttentionLayer:
    """One attention layer of the cache: where its rows come from and how wide they are."""

    def __init__(self, index, ordinal, layer):
        self.index, self.ordinal = index, ordinal
        _, self.k_heads, _, self.k_dim = layer.keys.shape
        _, self.v_heads, _, self.v_dim = layer.values.shape
        self.dtype = layer.keys.dtype
        if layer.values.dtype != self.dtype:
            raise ValueError("layer %d: keys are %s but values %s" %
                             (index, layer.keys.dtype, layer.values.dtype))
        self.k_elems = self.k_heads * self.k_dim
        self.row_elems = self.k_elems + self.v_heads * self.v_dim
        self.row_bytes = self.row_elems * self.dtype.itemsize
        keys = getattr(layer, "indexer_keys", None)
        self.idx_dim = int(keys.shape[-1]) if keys is not None else 0
        self.idx_dtype = keys.dtype if keys is not None else None
        self.idx_row_bytes = self.idx_dim * (keys.dtype.itemsize if keys is not None else 0)

    def describe(self):
        d = {"layer": self.index, "kv": self.ordinal, "dtype": dtype_name(self.dtype),
             "keys": [self.k_heads, self.k_dim], "values": [self.v_heads, self.v_dim],
             "row_bytes": self.row_bytes}
        if self.idx_dim:
            d.update(idx_dim=self.idx_dim, idx_dtype=dtype_name(self.idx_dtype),
                     idx_row_bytes=self.idx_row_bytes)
        return d

    def rows(self, layer, start, end):
        """Tokens [start, end) of the cached layer as (tokens, row_bytes) uint8 on the CPU."""
        k = layer.keys[0, :, start:end, :].transpose(0, 1).reshape(end - start, -1)
        v = layer.values[0, :, start:end, :].transpose(0, 1).reshape(end - start, -1)
        both = torch.cat([k, v], dim=1).contiguous()
        return both.view(torch.uint8).cpu()

    def idx_rows(self, layer, start, end):
        return layer.indexer_keys[0, start:end, :].contiguous().view(torch.uint8).cpu()

    def fill(self, layer, rows, device, idx_rows=None):
        """Fills an empty cache layer from (tokens, row_bytes) uint8 rows on the CPU."""
        t = rows.to(device, non_blocking=True).view(self.dtype).view(-1, self.row_elems)
        k = t[:, :self.k_elems].reshape(-1, self.k_heads, self.k_dim).transpose(0, 1)
        v = t[:, self.k_elems:].reshape(-1, self.v_heads, self.v_dim).transpose(0, 1)
        layer.update(k.unsqueeze(0).contiguous(), v.unsqueeze(0).contiguous())
        if self.idx_dim:
            keys = idx_rows.to(device, non_blocking=True).view(self.idx_dtype)
            layer.update_indexer(keys.view(1, -1, self.idx_dim))


class LinearLayer:
    """One linear-attention layer: its convolution and recurrent states' shapes and dtypes."""

    def __init__(self, index, layer):
        if layer.number_of_states != 1:
            raise ValueError("layer %d keeps %d states; strata.hf maps one" %
                             (index, layer.number_of_states))
        self.index = index
        conv, rec = layer.conv_states[0], layer.recurrent_states[0]
        if conv is None or rec is None:
            raise ValueError("layer %d: a linear-attention layer without a convolution or "
                             "recurrent state" % index)
        self.conv_shape, self.conv_dtype = tuple(conv.shape), conv.dtype
        self.rec_shape, self.rec_dtype = tuple(rec.shape), rec.dtype
        self.kernel = layer.conv_kernel_size[0]
        self.conv_bytes = conv.numel() * conv.dtype.itemsize
        self.nbytes = self.conv_bytes + rec.numel() * rec.dtype.itemsize

    def describe(self):
        return {"layer": self.index, "conv": list(self.conv_shape),
                "conv_dtype": dtype_name(self.conv_dtype), "recurrent": list(self.rec_shape),
                "recurrent_dtype": dtype_name(self.rec_dtype), "bytes": self.nbytes}

    def state_bytes(self, layer):
        conv = layer.conv_states[0].contiguous().view(torch.uint8).reshape(-1)
        rec = layer.recurrent_states[0].contiguous().view(torch.uint8).reshape(-1)
        return torch.cat([conv, rec]).cpu()

    def fill(self, layer, data, device):
        """Restores both states from this layer's slice of a KDA object (uint8 on the CPU)."""
        t = data.to(device, non_blocking=True)
        conv = t[:self.conv_bytes].view(self.conv_dtype).view(self.conv_shape)
        rec = t[self.conv_bytes:].view(self.rec_dtype).view(self.rec_shape)
        layer.update_conv_state(conv, conv_kernel_size=self.kernel)
        layer.update_recurrent_state(rec)


class Layout:
    """Every cached layer of a model, as strata objects."""

    def __init__(self, cache, model_type):
        self.model_type = model_type
        self.attention, self.linear = [], []
        for i, layer in enumerate(cache.layers):
            kind = type(layer).__name__
            if kind in ("DynamicLayer", "DynamicIndexedLayer"):
                self.attention.append(AttentionLayer(i, len(self.attention), layer))
            elif kind == "LinearAttentionLayer":
                self.linear.append(LinearLayer(i, layer))
            else:
                raise NotImplementedError(
                    "layer %d is a %s: strata.hf maps DynamicLayer, DynamicIndexedLayer and "
                    "LinearAttentionLayer (sliding-window and static caches are not mapped)" %
                    (i, kind))
        if not self.attention:
            raise NotImplementedError("the cache has no attention layer: nothing tracks its "
                                      "length")
        self.idx_layers = sum(1 for a in self.attention if a.idx_dim)
        self.kda_bytes = sum(ln.nbytes for ln in self.linear)

    def describe(self):
        """The model descriptor: everything that decides what bytes an object holds."""
        return {"model_type": self.model_type, "attention": [a.describe() for a in self.attention],
                "linear": [ln.describe() for ln in self.linear], "kda_bytes": self.kda_bytes}

    def describe_json(self):
        return json.dumps(self.describe(), sort_keys=True, separators=(",", ":"))

    def kda_state(self, cache):
        """The KDA object of the cache's current position: uint8 on the CPU."""
        return torch.cat([ln.state_bytes(cache.layers[ln.index]) for ln in self.linear])

    def fill_linear(self, cache, data, device):
        off = 0
        for ln in self.linear:
            ln.fill(cache.layers[ln.index], data[off:off + ln.nbytes], device)
            off += ln.nbytes


def probe_layout(model, tokens=8):
    """The Layout of model's cache, from a forward of a few tokens into a throwaway cache."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    ids = torch.zeros((1, tokens), dtype=torch.long, device=device)
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
    return Layout(cache, model.config.model_type)
