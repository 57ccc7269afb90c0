"""save() and resume() of a transformers model's DynamicCache on a strata cluster."""

import concurrent.futures
import threading
import time
import weakref

import numpy as np
import torch

import strata

from .identity import model_name
from .layout import probe_layout


def _tokens(input_ids):
    """input_ids (a (1, T) or (T,) tensor, a numpy array or a list) as a uint32 numpy array."""
    if torch.is_tensor(input_ids):
        if input_ids.dim() == 2:
            if input_ids.shape[0] != 1:
                raise ValueError("strata.hf resumes one sequence at a time, not a batch of %d" %
                                 input_ids.shape[0])
            input_ids = input_ids[0]
        input_ids = input_ids.cpu().numpy()
    arr = np.asarray(input_ids)
    if arr.ndim != 1:
        raise ValueError("input_ids: expected one sequence, got shape %s" % (arr.shape,))
    if arr.size and (arr.min() < 0 or arr.max() > 0xFFFFFFFF):
        raise ValueError("input_ids: token ids must fit in 32 bits")
    return arr.astype(np.uint32)


def _pieces(ops, n):
    """ops cut into at most n runs of consecutive ops with about equal bytes each."""
    total = sum(op[3].nbytes for op in ops)
    out, cur, acc = [], [], 0
    for op in ops:
        cur.append(op)
        acc += op[3].nbytes
        if acc * n >= total * (len(out) + 1) and len(out) < n - 1:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def _runs(piece):
    """The (host buffer, start, end) ranges piece's ops cover, adjacent ones merged."""
    runs = []
    for op in piece:
        i, lo, hi = op[4], op[5], op[5] + op[3].nbytes
        if runs and runs[-1][0] == i and runs[-1][2] == lo:
            runs[-1][2] = hi
        else:
            runs.append([i, lo, hi])
    return runs


class SaveStats:
    """What one save wrote: objects and bytes, and the statuses other than 0 it got back."""

    def __init__(self):
        self.objects = self.bytes = 0
        self.failed = []  # [(block, kind, layer, status)]
        self.kda_block = None

    def __repr__(self):
        return "SaveStats(objects=%d, bytes=%d, kda_block=%s, failed=%d)" % (
            self.objects, self.bytes, self.kda_block, len(self.failed))


class Store:
    """A model's cache on a strata cluster.

    model: a transformers causal LM on its device. nodes etc.: strata.Client's arguments
    (the model name is derived here: model_name()). kda_interval: blocks between the
    checkpoints that prefill() takes (the end of a prompt's last full block is one too).
    staging: on a GPU, resume through one pinned buffer registered once (else fresh buffers a
    resume). load_pieces: on a GPU, the batches a resume reads in, all in flight at once, each
    copied to the device as soon as it has landed (docs/transformers.md).
    """

    def __init__(self, model, nodes=None, tenant="hf", kda_interval=16, client=None,
                 staging=True, load_pieces=4, **client_kw):
        if kda_interval < 1:
            raise ValueError("kda_interval must be at least 1, not %d" % kda_interval)
        if not 1 <= load_pieces <= 64:
            raise ValueError("load_pieces must be 1 to 64, not %d" % load_pieces)
        self.model = model
        self.device = next(model.parameters()).device
        self.layout = probe_layout(model)
        self.model_name = model_name(model, self.layout)
        self.client = client or strata.Client(nodes, tenant=tenant, model=self.model_name,
                                              **client_kw)
        self.block_tokens = self.client.block_tokens
        self.kda_interval = kda_interval
        self.checkpoints = set()  # token positions this Store wrote a KDA object at
        self.saved_positions = set()  # token positions up to which it wrote KV (and IDX)
        self._saved = weakref.WeakKeyDictionary()  # cache -> blocks of KV and IDX written
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="strata-hf")
        self._pending = []
        self._lock = threading.Lock()
        # Pinned host staging for resumes onto a GPU: allocated on the first resume, grown
        # (never shrunk) when a longer prefix needs more, and registered with the client's
        # transport once, so a resume pays neither cudaHostAlloc nor a transport
        # registration per call. One resume at a time uses it (_staging_lock).
        self.staging = staging
        # A resume onto a GPU reads its objects in load_pieces batches in flight at once
        # (libstrata runs them on its workers), each copied to the device on a stream of its
        # own as soon as it has landed, so reading, copying to the GPU and the next reads
        # overlap. 1: one batch, then the copies.
        self.load_pieces = load_pieces
        self._upload_stream = None
        self._staging = None
        self._staging_reg = None
        self._staging_lock = threading.Lock()

    def close(self):
        self.flush()
        self._pool.shutdown()
        self._drop_staging()
        self.client.close()

    def _drop_staging(self):
        if self._staging_reg is not None:
            self._staging_reg.close()
        self._staging, self._staging_reg = None, None

    def _stage(self, nbytes):
        """The staging buffer, at least nbytes long (a uint8 pinned tensor)."""
        if self._staging is None or self._staging.numel() < nbytes:
            self._drop_staging()
            # Grown in 64 MiB steps and by half again, so a conversation that grows a
            # little each turn reallocates rarely.
            step = 64 << 20
            want = max(nbytes, 0 if self._staging is None else self._staging.numel() * 3 // 2)
            want = (want + step - 1) // step * step
            self._staging = torch.empty(want, dtype=torch.uint8, pin_memory=True)
            self._staging_reg = self.client.register(self._staging.numpy())
        return self._staging

    def new_cache(self):
        from transformers import DynamicCache
        return DynamicCache(config=self.model.config)

    # --- writing ----------------------------------------------------------------------

    def save(self, cache, input_ids, background=True):
        """Writes what is new in cache since its last save: the KV (and IDX) rows of every
        full block not yet written and, when the cache stands exactly at a block boundary,
        the KDA checkpoint of that block. input_ids: at least the tokens the cache holds.
        The rows are copied to the host before save returns; the puts run on a background
        thread when background is set (flush() waits for them). Returns a SaveStats, filled
        once the puts are done."""
        tokens = _tokens(input_ids)
        pos = cache.get_seq_length()
        if len(tokens) < pos:
            raise ValueError("save: the cache holds %d tokens but input_ids only %d" %
                             (pos, len(tokens)))
        bt = self.block_tokens
        full = pos // bt
        first = min(self._saved.get(cache, 0), full)
        objects = []
        for a in self.layout.attention:
            layer = cache.layers[a.index]
            if full > first:
                rows = a.rows(layer, first * bt, full * bt).numpy()
                for b in range(first, full):
                    objects.append((b, strata.KV, a.ordinal,
                                    rows[(b - first) * bt:(b - first + 1) * bt]))
                if a.idx_dim:
                    rows = a.idx_rows(layer, first * bt, full * bt).numpy()
                    for b in range(first, full):
                        objects.append((b, strata.IDX, a.ordinal,
                                        rows[(b - first) * bt:(b - first + 1) * bt]))
        stats = SaveStats()
        if self.layout.linear and full and pos % bt == 0:
            objects.append((full - 1, strata.KDA, 0, self.layout.kda_state(cache).numpy()))
            stats.kda_block = full - 1
            self.checkpoints.add(pos)
        self._saved[cache] = full
        self.saved_positions.add(full * bt)
        if not objects:
            return stats
        chain = self.client.hash(tokens[:full * bt])
        if background:
            with self._lock:
                self._pending.append(self._pool.submit(self._put, chain, objects, stats))
        else:
            self._put(chain, objects, stats)
        return stats

    def _put(self, chain, objects, stats):
        statuses = self.client.put(chain, objects)
        for (b, kind, layer, data), st in zip(objects, statuses):
            if st == 0:
                stats.objects += 1
                stats.bytes += data.nbytes
            else:
                stats.failed.append((b, kind, layer, st))
        return stats

    def flush(self):
        """Waits for the background puts; raises the first error one of them raised."""
        with self._lock:
            pending, self._pending = self._pending, []
        for f in pending:
            f.result()

    # --- reading ----------------------------------------------------------------------

    def resume(self, input_ids):
        """The model's own cache filled from the cluster up to the resumable prefix of
        input_ids, and that prefix's length in tokens (0: a fresh cache). At least the last
        token is left to compute, so the caller's forward of input_ids[reused:] gives the
        next token's logits. The prefix ends at a KDA checkpoint when the model has
        linear-attention layers, else at the last cached block. A read that fails (a node
        died) is retried once after a new lookup, then the whole prompt is recomputed."""
        tokens = _tokens(input_ids)
        bt = self.block_tokens
        limit = (len(tokens) - 1) // bt if len(tokens) else 0
        # What the latest resume did: blocks the lookup offered, reads tried, bytes read,
        # seconds in the reads (get_s) and in the copies to the device (fill_s).
        self.last_resume = {"lookup_blocks": 0, "attempts": 0, "bytes": 0}
        if limit == 0:
            return self.new_cache(), 0
        chain = self.client.hash(tokens[:limit * bt])
        for _ in range(2):
            try:
                found = self.client.lookup(chain, layers=self.layout.idx_layers)
            except strata.Error:  # every node down: recompute
                break
            blocks = found.resumable_blocks if self.layout.linear else found.matched_blocks
            self.last_resume["lookup_blocks"] = blocks
            if blocks == 0:
                break
            self.last_resume["attempts"] += 1
            cache = self._load(chain, blocks)
            if cache is not None:
                self._saved[cache] = blocks
                return cache, blocks * bt
        return self.new_cache(), 0

    def _load(self, chain, blocks):
        """A cache of blocks blocks read from the cluster, or None when a read failed."""
        if self.device.type != "cuda" or not self.staging:
            # On the CPU the cache may keep the read buffers themselves (to() is then no
            # copy), so each resume reads into buffers of its own.
            pin = self.device.type == "cuda"
            return self._load_into(
                chain, blocks, lambda n: torch.empty(n, dtype=torch.uint8, pin_memory=pin))
        with self._staging_lock:
            stage = self._stage(self._load_bytes(blocks))
            off = [0]

            def carve(n):
                # 256-byte aligned slices of the staging buffer, in order.
                t = stage[off[0]:off[0] + n]
                off[0] += (n + 255) // 256 * 256
                return t
            return self._load_into(chain, blocks, carve)

    def _load_bytes(self, blocks):
        """The staging bytes a resume of blocks blocks needs (each slice 256-byte aligned)."""
        bt, lay = self.block_tokens, self.layout
        sizes = [blocks * bt * n for a in lay.attention for n in (a.row_bytes, a.idx_row_bytes)]
        sizes.append(lay.kda_bytes)
        return sum((n + 255) // 256 * 256 for n in sizes)

    def _load_into(self, chain, blocks, alloc):
        bt, lay = self.block_tokens, self.layout
        cuda = self.device.type == "cuda"
        ops, hosts, bufs = [], [], []  # ops: (block, kind, layer, dst, host index, offset)

        def host(n):
            hosts.append(alloc(n))
            return len(hosts) - 1
        for a in lay.attention:
            kv, idx = host(blocks * bt * a.row_bytes), host(blocks * bt * a.idx_row_bytes)
            n_kv, n_idx = bt * a.row_bytes, bt * a.idx_row_bytes
            kvn, idxn = hosts[kv].numpy(), hosts[idx].numpy()
            for b in range(blocks):
                ops.append((b, strata.KV, a.ordinal, kvn[b * n_kv:(b + 1) * n_kv], kv, b * n_kv))
                if a.idx_dim:
                    ops.append((b, strata.IDX, a.ordinal, idxn[b * n_idx:(b + 1) * n_idx], idx,
                                b * n_idx))
            bufs.append((a, kv, idx))
        kda = host(lay.kda_bytes)
        if lay.linear:
            ops.append((blocks - 1, strata.KDA, 0, hosts[kda].numpy(), kda, 0))
        pieces = _pieces(ops, self.load_pieces if cuda else 1)
        # On a GPU every host buffer has its device twin, filled piece by piece.
        devs = [torch.empty(h.numel(), dtype=torch.uint8, device=self.device) if cuda else h
                for h in hosts]
        if cuda and self._upload_stream is None:
            self._upload_stream = torch.cuda.Stream(self.device)
        self._before_get(blocks)
        t0 = time.perf_counter()
        handles, ok = [], True
        try:
            for piece in pieces:
                handles.append(self.client.get_async(chain[:blocks * 16],
                                                     [op[:4] for op in piece]))
        except strata.Error:
            ok = False
        # Every handle started is waited for, whatever happened, before the buffers (the
        # staging buffer, reused by the next resume) are given up.
        for piece, h in zip(pieces, handles):
            with h:
                try:
                    got = h.wait()
                except strata.Error:
                    ok = False
                    continue
            if not ok or any(st != 0 or length != op[3].nbytes
                             for op, (st, length) in zip(piece, got)):
                ok = False
                continue
            if cuda:
                with torch.cuda.stream(self._upload_stream):
                    for i, lo, hi in _runs(piece):
                        devs[i][lo:hi].copy_(hosts[i][lo:hi], non_blocking=True)
        t1 = time.perf_counter()
        if cuda:
            # The copies are done before the staging buffer can be read into again, and
            # before the cache is built from the device buffers on the current stream.
            self._upload_stream.synchronize()
        if not ok or len(handles) != len(pieces):
            return None
        self.last_resume["bytes"] = sum(op[3].nbytes for op in ops)
        self.last_resume["pieces"] = len(pieces)
        cache = self.new_cache()
        for a, kv, idx in bufs:
            a.fill(cache.layers[a.index], devs[kv], self.device, devs[idx])
        if lay.linear:
            lay.fill_linear(cache, devs[kda], self.device)
        if cuda:
            torch.cuda.synchronize(self.device)
        self.last_resume.update(get_s=t1 - t0, fill_s=time.perf_counter() - t1)
        return cache

    def _before_get(self, blocks):
        """Called between a lookup and the reads it plans (tests kill a node here)."""

    # --- computing --------------------------------------------------------------------

    def boundaries(self, start, end):
        """Where prefill() from start to end stops to checkpoint: every kda_interval blocks
        and the last block boundary before end (models without linear layers: nowhere)."""
        if not self.layout.linear:
            return []
        bt, step = self.block_tokens, self.block_tokens * self.kda_interval
        stops = set(range((start // step + 1) * step, end, step))
        last = end // bt * bt
        if start < last:
            stops.add(last)
        return sorted(p for p in stops if start < p <= end)

    def prefill(self, input_ids, cache=None, start=0, save=True):
        """Runs the model over input_ids[start:] into cache (a new one if None), in chunks
        that end at the checkpoint boundaries, saving after each; returns (logits of the
        last chunk, cache)."""
        ids = input_ids if torch.is_tensor(input_ids) else torch.tensor([list(input_ids)])
        ids = ids.view(1, -1).to(self.device)
        end = ids.shape[1]
        cache = cache if cache is not None else self.new_cache()
        if cache.get_seq_length() != start:
            raise ValueError("prefill: the cache holds %d tokens, not start=%d" %
                             (cache.get_seq_length(), start))
        if start >= end:
            raise ValueError("prefill: nothing to compute (start %d, %d tokens)" % (start, end))
        out = None
        with torch.no_grad():
            for stop in self.boundaries(start, end) + [end]:
                if stop <= start:
                    continue
                out = self.model(ids[:, start:stop], past_key_values=cache, use_cache=True)
                start = stop
                if save:
                    self.save(cache, ids[0, :stop])
        return out.logits, cache
