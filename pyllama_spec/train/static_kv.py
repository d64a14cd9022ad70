"""Answer generation at scale in torch: continuous batching over a static KV cache, one CUDA graph
per decode step (issue 20, item 2: the ``torch`` engine of :mod:`.regen`).

Why our own: transformers' ``generate`` runs a static batch until its longest answer ends and
launches every kernel from Python (a real regen shard: 673 tok/s on the H200), ``generate_batch``
pages its cache (1.2 k tok/s there), and our batched llama.cpp path reached 1.0 k tok/s. A
135 M-parameter target at 512 streams is bound by reading its KV cache (SmolLM2: 23 KB a position),
so the step is a few ms if nothing else is in the way. Here the weights are the transformers model's
(:func:`.online.load_hf_target`, dequantized from the GGUF); the forward is written out for the
llama family (llama, qwen2, mistral: RMSNorm, rotary embeddings in transformers' ``rotate_half``
layout, grouped-query attention, SwiGLU MLP; q/k/v biases where the checkpoint has them):

* the cache is ``(n_layer, n_slots, n_kv_head, n_ctx, head_dim)`` per K and V; a slot holds one
  answer; its rows past the slot's position are stale and masked;
* a decode step feeds every slot's last token at its own position (idle slots at position 0,
  their output ignored), attends over the first ``C`` cache positions — ``C`` the smallest of
  ``buckets`` above every running slot's position — and draws the next token in the graph
  (argmax, or Gumbel-max at the slot's temperature); one CUDA graph per (bucket, greedy/sampled),
  captured on first use (on a GPU), so a step is one ``cudaGraphLaunch`` and one copy of
  ``n_slots`` token ids back;
* finished slots are refilled when at least ``refill`` of them are free (or nothing runs): their
  prompts go through one causal forward (right-padded, at most ``prefill_tokens`` tokens a call),
  which writes their cache rows and draws their first answer token.

Sampled tokens are reproducible per prompt whatever the batch: the Gumbel noise of vocabulary entry
``v`` at position ``p`` of a prompt with seed ``s`` is a hash of ``(s, p, v)`` (splitmix64's
finaliser), not a generator's state. Greedy answers equal transformers' ``generate`` up to the
floating-point order of the kernels (exactly, in float32 on the CPU: ``tests/test_train_static_kv.py``).
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError, UnsupportedError


def prompt_seed(pid: str, seed: int) -> int:
    """A prompt's 63-bit seed: sha256 of ``"{seed}:{id}"`` (regen's and Magpie's per-prompt seeds)."""
    return int(hashlib.sha256(f"{seed}:{pid}".encode()).hexdigest()[:16], 16) >> 1


# transformers model types whose decoder layer is the llama layer (with optional q/k/v biases)
LLAMA_FAMILY = ("llama", "qwen2", "mistral")
_M1, _M2, _GOLD = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB, 0x9E3779B97F4A7C15


def _signed(x: int) -> int:
    """A 64-bit constant as torch's int64 (two's complement)."""
    return x - (1 << 64) if x >= 1 << 63 else x


def _lsr(x: Any, k: int) -> Any:
    """Logical shift right of int64 values (torch shifts arithmetically)."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def gumbel_noise(seed: Any, pos: Any, n_vocab: int) -> Any:
    """Gumbel(0, 1) noise ``(rows, n_vocab)`` float32 from int64 tensors ``seed`` and ``pos``
    ``(rows,)``: ``-log(-log(u))`` with ``u`` the top 24 bits of splitmix64's finaliser of
    ``seed·φ + pos·2³² + v`` (Steele et al. 2014), in (0, 1)."""
    import torch

    v = torch.arange(n_vocab, device=seed.device, dtype=torch.int64)
    x = (seed * _signed(_GOLD) + (pos << 32))[:, None] + v[None, :]
    x = (x ^ _lsr(x, 30)) * _signed(_M1)
    x = (x ^ _lsr(x, 27)) * _signed(_M2)
    x = x ^ _lsr(x, 31)
    u = (_lsr(x, 40).to(torch.float32) + 0.5) * (1.0 / (1 << 24))
    return -torch.log(-torch.log(u))


class StaticKVGenerator:
    """Continuous-batching generation for a llama-family transformers model (module docstring).

    Args:
        model: a transformers causal LM of type ``llama``, ``qwen2`` or ``mistral`` (default rotary
            embeddings), on the device and in the dtype to run in.
        n_slots: answers generated at once (rows of a decode step).
        n_ctx: cache positions per slot: the longest prompt + answer.
        buckets: attention lengths of the decode graphs (ascending; ``n_ctx`` is added); default
            powers of two from 128.
        refill: refill finished slots when at least this many are free (default ``n_slots // 8``).
        prefill_tokens: most (padded) prompt tokens in one prefill forward.
        cuda_graphs: capture decode steps as CUDA graphs (default: on a CUDA device).

    Raises:
        UnsupportedError: another model type, or rotary scaling other than the default.
        InvalidArgumentError: sizes out of range.
    """

    def __init__(self, model: Any, *, n_slots: int = 512, n_ctx: int = 1536, buckets: Sequence[int] | None = None,
                 refill: int | None = None, prefill_tokens: int = 16384, cuda_graphs: bool | None = None) -> None:
        import torch

        cfg = model.config
        if getattr(cfg, "model_type", None) not in LLAMA_FAMILY:
            raise UnsupportedError(f"the torch engine runs the llama family ({', '.join(LLAMA_FAMILY)}), not "
                                   f"{getattr(cfg, 'model_type', None)!r}: use --engine hf-cb or llama")
        rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
        if rope.get("rope_type", rope.get("type", "default")) not in ("default", None):
            raise UnsupportedError(f"rotary scaling {rope.get('rope_type')!r} is not implemented in the torch "
                                   "engine: use --engine hf-cb or llama")
        if n_slots < 1 or n_ctx < 2 or prefill_tokens < n_ctx:
            raise InvalidArgumentError(f"need n_slots ≥ 1, n_ctx ≥ 2 and prefill_tokens ≥ n_ctx, got {n_slots}, "
                                       f"{n_ctx}, {prefill_tokens}")
        self.model = model
        m = model.model
        self.dev = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.n_slots, self.n_ctx, self.prefill_tokens = n_slots, n_ctx, prefill_tokens
        self.refill = max(1, refill if refill is not None else n_slots // 8)
        self.n_head = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.n_vocab = model.lm_head.weight.shape[0]
        self.eps = cfg.rms_norm_eps
        self.layers = []
        for lyr in m.layers:
            a, f = lyr.self_attn, lyr.mlp
            self.layers.append((lyr.input_layernorm.weight, a.q_proj, a.k_proj, a.v_proj, a.o_proj,
                                lyr.post_attention_layernorm.weight, f.gate_proj, f.up_proj, f.down_proj))
        self.embed, self.norm, self.head = m.embed_tokens.weight, m.norm.weight, model.lm_head.weight
        # cos / sin of every position, as transformers' rotary module computes them (float32, then the dtype)
        inv = m.rotary_emb.inv_freq.to(self.dev, torch.float32)
        scale = float(getattr(m.rotary_emb, "attention_scaling", 1.0))
        freqs = torch.arange(n_ctx, device=self.dev, dtype=torch.float32)[:, None] * inv[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos, self.sin = (emb.cos() * scale).to(self.dtype), (emb.sin() * scale).to(self.dtype)
        shape = (len(self.layers), n_slots, self.n_kv, n_ctx, self.d)
        self.k = torch.zeros(shape, device=self.dev, dtype=self.dtype)
        self.v = torch.zeros(shape, device=self.dev, dtype=self.dtype)
        b = sorted({int(x) for x in (buckets or [1 << k for k in range(7, 16)]) if 0 < int(x) < n_ctx} | {n_ctx})
        self.buckets = b
        # the decode step's inputs and output (static: a graph reads and writes these same tensors)
        self.tok = torch.zeros(n_slots, device=self.dev, dtype=torch.long)
        self.pos = torch.zeros(n_slots, device=self.dev, dtype=torch.long)
        self.live = torch.zeros(n_slots, device=self.dev, dtype=torch.long)  # 1: the slot runs an answer
        self.temp = torch.ones(n_slots, device=self.dev, dtype=torch.float32)
        self.seed = torch.zeros(n_slots, device=self.dev, dtype=torch.long)
        self.log_min_p = torch.full((), float("-inf"), device=self.dev)  # min-p cut of sampled draws (log)
        self.next = torch.zeros(n_slots, device=self.dev, dtype=torch.long)
        self.slots = torch.arange(n_slots, device=self.dev)
        self.cuda_graphs = self.dev.type == "cuda" if cuda_graphs is None else cuda_graphs
        self._graphs: dict[tuple[int, bool], Any] = {}
        self._pool: Any = None

    # -- the forward, written out -----------------------------------------------------------------

    def _rms(self, x: Any, w: Any) -> Any:
        import torch

        xf = x.to(torch.float32)
        return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    def _mlp(self, x: Any, w_post: Any, gate: Any, up: Any, down: Any) -> Any:
        """The residual stream after a layer's feed-forward half (post-attention norm, SwiGLU): one
        code path for the decode step and the prefill."""
        import torch

        h = self._rms(x, w_post)
        return x + down(torch.nn.functional.silu(gate(h)) * up(h))

    @staticmethod
    def _rope(x: Any, cos: Any, sin: Any) -> Any:
        import torch

        h = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., h:], x[..., :h]), dim=-1) * sin

    def _draw(self, logits: Any, pos: Any, seed: Any, temp: Any, sampled: bool) -> Any:
        """Next tokens of rows ``logits (rows, n_vocab)``: argmax, or Gumbel-max at ``temp`` over the
        tokens whose probability is at least ``min_p`` times the row's largest (min-p sampling)."""
        import torch

        lf = logits.to(torch.float32)
        if not sampled:
            return lf.argmax(-1)
        z = lf / temp[:, None]
        z = z.masked_fill(z < z.amax(-1, keepdim=True) + self.log_min_p, float("-inf"))
        return (z + gumbel_noise(seed, pos, lf.shape[-1])).argmax(-1)

    def _decode(self, C: int, sampled: bool) -> None:
        """One decode step over the slots, attending over cache positions ``[0, C)``: reads
        ``tok``/``pos``/``live``, writes the cache rows at ``pos``, ``next``, then advances ``pos`` of live
        slots and sets ``tok = next`` (so steps can follow each other without the host)."""
        import torch

        S, g = self.n_slots, self.n_head // self.n_kv
        pos = self.pos
        cos, sin = self.cos[pos][:, None, :], self.sin[pos][:, None, :]
        mask = torch.arange(C, device=self.dev)[None, :] <= pos[:, None]  # (S, C)
        neg = torch.zeros((S, C), device=self.dev, dtype=torch.float32).masked_fill_(~mask, float("-inf"))
        x = self.embed[self.tok]  # (S, H)
        for li, (w_in, q_p, k_p, v_p, o_p, w_post, gate, up, down) in enumerate(self.layers):
            h = self._rms(x, w_in)
            q = self._rope(q_p(h).view(S, self.n_head, self.d), cos, sin)
            k = self._rope(k_p(h).view(S, self.n_kv, self.d), cos, sin)
            self.k[li][self.slots, :, pos] = k
            self.v[li][self.slots, :, pos] = v_p(h).view(S, self.n_kv, self.d)
            K = self.k[li, :, :, :C].reshape(S * self.n_kv, C, self.d)
            V = self.v[li, :, :, :C].reshape(S * self.n_kv, C, self.d)
            qg = q.view(S * self.n_kv, g, self.d)
            sc = torch.bmm(qg, K.transpose(1, 2)).to(torch.float32) * (self.d ** -0.5)
            sc = sc.view(S, self.n_kv * g, C) + neg[:, None, :]
            p = torch.softmax(sc, dim=-1).to(self.dtype).view(S * self.n_kv, g, C)
            o = torch.bmm(p, V).reshape(S, self.n_head * self.d)
            x = x + o_p(o)
            x = self._mlp(x, w_post, gate, up, down)
        logits = torch.nn.functional.linear(self._rms(x, self.norm), self.head)
        self.next.copy_(self._draw(logits, pos, self.seed, self.temp, sampled))
        self.tok.copy_(self.next)
        self.pos.add_(self.live)

    def _step(self, C: int, sampled: bool) -> None:
        """Run one decode step, through its CUDA graph where graphs are on (captured on first use)."""
        import torch

        if not self.cuda_graphs:
            self._decode(C, sampled)
            return
        key = (C, sampled)
        graph = self._graphs.get(key)
        if graph is None:
            saved = [t.clone() for t in (self.tok, self.pos, self.next)]
            kv_saved = None  # a warm-up step writes cache rows at pos: keep and restore them
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                kv_saved = (self.k[:, self.slots, :, self.pos].clone(), self.v[:, self.slots, :, self.pos].clone())
                self._decode(C, sampled)  # warm-up (cuBLAS handles, kernels' first launch)
                for t, v in zip((self.tok, self.pos, self.next), saved):
                    t.copy_(v)
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            with torch.cuda.graph(graph, pool=self._pool):
                self._decode(C, sampled)
            self._graphs[key] = graph
            # capture recorded the kernels without running them: the state is as before
            self.k[:, self.slots, :, saved[1]] = kv_saved[0]
            self.v[:, self.slots, :, saved[1]] = kv_saved[1]
            for t, v in zip((self.tok, self.pos, self.next), saved):
                t.copy_(v)
        graph.replay()

    def _prefill(self, slots: list[int], prompts: list[list[int]], temps: list[float], seeds: list[int],
                 sampled: bool) -> np.ndarray:
        """Prompts into ``slots``: their cache rows written, their first answer tokens drawn (returned)."""
        import torch

        n, L = len(slots), max(len(p) for p in prompts)
        ids = torch.zeros((n, L), dtype=torch.long)
        for r, p in enumerate(prompts):
            ids[r, :len(p)] = torch.tensor(p, dtype=torch.long)
        ids = ids.to(self.dev)
        sl = torch.tensor(slots, device=self.dev)
        last = torch.tensor([len(p) - 1 for p in prompts], device=self.dev)
        cos, sin = self.cos[:L][None, None], self.sin[:L][None, None]
        x = self.embed[ids]  # (n, L, H)
        for li, (w_in, q_p, k_p, v_p, o_p, w_post, gate, up, down) in enumerate(self.layers):
            h = self._rms(x, w_in)
            q = self._rope(q_p(h).view(n, L, self.n_head, self.d).transpose(1, 2), cos, sin)
            k = self._rope(k_p(h).view(n, L, self.n_kv, self.d).transpose(1, 2), cos, sin)
            v = v_p(h).view(n, L, self.n_kv, self.d).transpose(1, 2)
            self.k[li][sl, :, :L] = k
            self.v[li][sl, :, :L] = v
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            x = x + o_p(o.transpose(1, 2).reshape(n, L, self.n_head * self.d))
            x = self._mlp(x, w_post, gate, up, down)
        xl = x[torch.arange(n, device=self.dev), last]
        logits = torch.nn.functional.linear(self._rms(xl, self.norm), self.head)
        first = self._draw(logits, last, torch.tensor(seeds, device=self.dev, dtype=torch.long),
                           torch.tensor([t if t > 0 else 1.0 for t in temps], device=self.dev), sampled)
        return first.cpu().numpy()

    # -- the host loop -----------------------------------------------------------------------------

    def generate(self, prompts: Sequence[Sequence[int]], *, max_tokens: int, eog: Sequence[int],
                 temperatures: Sequence[float] | None = None, seeds: Sequence[int] | None = None,
                 min_p: float = 0.0, stop: Any = None,
                 timing: dict[str, float] | None = None) -> Iterator[tuple[int, list[int]]]:
        """Answers, in completion order: ``(index, answer_tokens)``, the answer ending with its
        end-of-generation token when the model stopped by itself (else ``max_tokens`` long, or cut
        where the slot's ``n_ctx`` ran out).

        Args:
            prompts: token ids, each ``1 … n_ctx - 1`` long.
            temperatures: per prompt; all 0 (greedy, the default) or all > 0 (one call samples or
                not: the step's graph is specialised).
            seeds: per prompt (sampled answers; default the index).
            min_p: sampled answers draw only among tokens of probability ≥ ``min_p`` × the top one's.
            stop: a callable; when it returns True no more prompts start (running ones finish).
            timing: a dict this adds ``steps``, ``rows`` (live rows over steps), ``prefill_s``,
                ``decode_s`` (launch to tokens on the host) and ``host_s`` to.

        Raises:
            InvalidArgumentError: a prompt empty or too long, mixed temperatures, lengths that differ.
        """
        import time

        import torch

        n = len(prompts)
        temps = [0.0] * n if temperatures is None else [float(t) for t in temperatures]
        sds = list(range(n)) if seeds is None else [int(s) for s in seeds]
        if len(temps) != n or len(sds) != n:
            raise InvalidArgumentError(f"temperatures and seeds need one value per prompt ({n})")
        sampled = any(t > 0 for t in temps)
        if sampled and not all(t > 0 for t in temps):
            raise InvalidArgumentError("one generate call is greedy or sampled: split the prompts by temperature")
        for i, p in enumerate(prompts):
            if not 0 < len(p) < self.n_ctx:
                raise InvalidArgumentError(f"prompt {i} has {len(p)} tokens: need 1 … {self.n_ctx - 1} (n_ctx)")
        if max_tokens < 1:
            raise InvalidArgumentError(f"max_tokens must be ≥ 1, got {max_tokens}")
        if not 0 <= min_p < 1:
            raise InvalidArgumentError(f"min_p must be in [0, 1), got {min_p}")
        self.log_min_p.fill_(float(np.log(min_p)) if min_p > 0 else float("-inf"))
        tm = timing if timing is not None else {}
        eog_a = np.asarray(sorted(set(int(t) for t in eog)), dtype=np.int64)
        S = self.n_slots
        owner = np.full(S, -1, dtype=np.int64)  # prompt index a slot answers, -1: free
        pos_h = np.zeros(S, dtype=np.int64)  # position of the slot's next input token
        ans = np.zeros((S, max_tokens), dtype=np.int64)
        n_gen = np.zeros(S, dtype=np.int64)
        todo = list(range(n - 1, -1, -1))  # a stack: pop() gives prompts in order
        cap = np.zeros(S, dtype=np.int64)  # answer length at which the slot must stop

        def finish(slot: int) -> tuple[int, list[int]]:
            i = int(owner[slot])
            owner[slot] = -1
            return i, ans[slot, :n_gen[slot]].tolist()

        with torch.inference_mode():
            while True:
                t0 = time.perf_counter()
                free = np.flatnonzero(owner < 0)
                running = S - len(free)
                stopped = stop is not None and stop()
                if todo and not stopped and len(free) and (len(free) >= self.refill or running == 0):
                    take: list[int] = []
                    longest = 0
                    while todo and len(take) < len(free):
                        ln = len(prompts[todo[-1]])
                        if take and max(longest, ln) * (len(take) + 1) > self.prefill_tokens:
                            break
                        longest = max(longest, ln)
                        take.append(todo.pop())
                    slots = [int(s) for s in free[:len(take)]]
                    first = self._prefill(slots, [list(prompts[i]) for i in take], [temps[i] for i in take],
                                          [sds[i] for i in take], sampled)
                    for s, i, t in zip(slots, take, first):
                        owner[s], pos_h[s], n_gen[s] = i, len(prompts[i]), 1
                        ans[s, 0] = t
                        cap[s] = min(max_tokens, self.n_ctx - len(prompts[i]))
                    done = [s for s in slots if n_gen[s] >= cap[s] or np.isin(ans[s, 0], eog_a)]
                    for s in done:
                        yield finish(s)
                    sl = torch.tensor(slots, device=self.dev)
                    self.tok[sl] = torch.as_tensor(first, device=self.dev)
                    self.pos[sl] = torch.tensor([len(prompts[i]) for i in take], device=self.dev)
                    self.temp[sl] = torch.tensor([temps[i] if temps[i] > 0 else 1.0 for i in take], device=self.dev)
                    self.seed[sl] = torch.tensor([sds[i] for i in take], device=self.dev, dtype=torch.long)
                    live = owner >= 0
                    pos_h[~live] = 0
                    self.live.copy_(torch.as_tensor(live.astype(np.int64)))
                    self.pos.copy_(torch.as_tensor(pos_h))
                    tm["prefill_s"] = tm.get("prefill_s", 0.0) + time.perf_counter() - t0
                    continue
                live = owner >= 0
                if not live.any():
                    return
                C = next(b for b in self.buckets if b > pos_h[live].max())
                t1 = time.perf_counter()
                self._step(C, sampled)
                nxt = self.next.cpu().numpy()
                t2 = time.perf_counter()
                act = np.flatnonzero(live)
                ans[act, n_gen[act]] = nxt[act]
                n_gen[act] += 1
                pos_h[act] += 1
                ended = act[(n_gen[act] >= cap[act]) | np.isin(nxt[act], eog_a)]
                for s in ended:
                    yield finish(int(s))
                if len(ended):  # ended slots idle at position 0 until refilled
                    pos_h[ended] = 0
                    e = torch.as_tensor(ended, device=self.dev)
                    self.live[e] = 0
                    self.pos[e] = 0
                tm["steps"] = tm.get("steps", 0) + 1
                tm["rows"] = tm.get("rows", 0) + len(act)
                tm["decode_s"] = tm.get("decode_s", 0.0) + t2 - t1
                tm["host_s"] = tm.get("host_s", 0.0) + (t1 - t0) + time.perf_counter() - t2


__all__ = ["StaticKVGenerator", "gumbel_noise", "prompt_seed", "LLAMA_FAMILY"]
