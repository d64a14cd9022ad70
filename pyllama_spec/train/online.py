"""Online training: the target's features are computed inside each training step, on the GPU, by
the target itself — loaded in transformers from its GGUF — instead of being stored first
(:mod:`.features`). Data are then bounded by generation speed, not by disk or transfer size
(SpecForge's "online" mode; issue 20, item 3).

Which hidden state: llama.cpp's layer-input tap of layer ``i`` (``Context.layer_input(i)``, what a
DFlash drafter reads at inference and what :func:`.features.extract` stores) is the input of
decoder layer ``i``; in transformers that is ``hidden_states[i]`` of a forward with
``output_hidden_states=True`` (``hidden_states[0]`` = the token embeddings). :class:`TargetFeatures`
takes it with a forward pre-hook on decoder layer ``i`` (the same tensor, whatever a transformers
version does to its last hidden state) and stops the forward after the last layer it needs
(no later layers, no output head). ``tests/test_train_online.py`` checks both equalities.

    python -m pyllama_spec.train.online TARGET.gguf OUT_DIR --data 'answers-*.jsonl.gz' \\
        [--layers 2,15,28] [--drafter-layers 3] [--block-size 8] [--seconds 500] [--batch 32] [--seed 0]

Needs ``transformers`` and ``accelerate`` (imported lazily: the package itself does not depend
on them) and ``gguf``. Kinds: ``dflash`` (the default), ``eagle3`` (its features from the same hooks:
the inputs of its three tapped layers) and ``draft`` (a small causal LM distilled from the answers: no
features; the target is loaded for its token matrices only).
"""
from __future__ import annotations

import glob
import json
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

    from .objectives import Batch, Leads


def load_hf_target(path: str | os.PathLike, *, dtype: Any = None, device: Any = "cpu") -> Any:
    """The target as a transformers causal LM, from its GGUF (dequantized by transformers through
    gguf-py: ``from_pretrained(folder, gguf_file=name)``), in eval mode on ``device``.

    Args:
        dtype: torch dtype of the weights (default float32).

    Raises:
        UnsupportedError: transformers (or accelerate, which its GGUF loader needs) is not installed.
    """
    import torch

    from ..errors import UnsupportedError

    try:
        from transformers import AutoModelForCausalLM
    except ImportError as exc:
        raise UnsupportedError(f"online training loads the target with transformers: pip install transformers "
                               f"accelerate ({exc})") from None
    p = Path(path)
    try:
        m = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=dtype or torch.float32)
    except ImportError as exc:  # accelerate or gguf missing: transformers says which
        raise UnsupportedError(f"transformers cannot load {p.name}: {exc}") from None
    return m.to(device).eval()


class _Stop(Exception):
    """Raised by the last needed layer's hook: the rest of the forward is not computed."""


class TargetFeatures:
    """llama.cpp-equivalent layer-input features of a transformers target.

    ``features(tokens)`` with ``tokens`` ``(B, L)`` int64 returns ``(B, L, len(layer_ids) · n_embd)``:
    the inputs of decoder layers ``layer_ids`` (llama.cpp ids), concatenated in that order (as
    :func:`.features.extract` does). Rows are causal: right padding does not change earlier rows.

    One instance per model at a time (:meth:`close` removes its hooks). ``final``: the forward runs to the end
    and a call returns ``(features, final)``, ``final`` ``(B, L, n_embd)`` the target's last hidden state after
    its output norm (its logits are ``final @ head.T``); else the forward stops at the last tapped layer.

    Raises:
        InvalidArgumentError: a layer id outside ``0 .. n_layer − 1``; a model that already has one.
    """

    def __init__(self, model: Any, layer_ids: Sequence[int], *, final: bool = False) -> None:  # a PreTrainedModel
        from ..errors import InvalidArgumentError

        self.model = model
        self.final = bool(final)
        base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
        self.base = base
        layers = base.layers
        self.layer_ids = [int(i) for i in layer_ids]
        bad = [i for i in self.layer_ids if not 0 <= i < len(layers)]
        if bad or not self.layer_ids:
            raise InvalidArgumentError(f"layer ids {bad or '[]'} out of range: the target has {len(layers)} layers "
                                       f"(0..{len(layers) - 1})")
        self._last = max(self.layer_ids)
        self._got: dict[int, torch.Tensor] = {}
        if getattr(model, "_pyllama_spec_taps", None) is not None:
            raise InvalidArgumentError("this model already has a TargetFeatures: close() that one first (the "
                                       "hooks of both would run and the first would stop the forward)")
        setattr(model, "_pyllama_spec_taps", self)  # noqa: B010
        self._handles = [layers[i].register_forward_pre_hook(self._hook(i), with_kwargs=True)
                         for i in sorted(set(self.layer_ids))]

    def close(self) -> None:
        """Remove the hooks (the model computes as before)."""
        for h in self._handles:
            h.remove()
        self._handles = []
        if getattr(self.model, "_pyllama_spec_taps", None) is self:
            setattr(self.model, "_pyllama_spec_taps", None)  # noqa: B010

    def _hook(self, i: int) -> Any:
        def hook(module: Any, args: tuple, kwargs: dict) -> None:
            self._got[i] = args[0] if args else kwargs["hidden_states"]
            if i == self._last and not self.final:
                raise _Stop
        return hook

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def __call__(self, tokens: torch.Tensor) -> Any:
        import torch

        self._got = {}
        res = None
        with torch.no_grad():
            try:
                res = self.base(input_ids=tokens.to(self.device), use_cache=False)
            except _Stop:
                pass
        out = torch.cat([self._got[i] for i in self.layer_ids], dim=-1)
        self._got = {}
        if self.final:
            assert res is not None
            return out, res.last_hidden_state
        return out


def token_matrices(model: Any) -> tuple[np.ndarray, np.ndarray]:
    """The target's token embedding and output head, ``(n_vocab, n_embd)`` float32 each (the same
    array twice when they are tied)."""
    emb = model.get_input_embeddings().weight.detach().float().cpu().numpy()
    out = model.get_output_embeddings()
    head = emb if out is None else out.weight.detach().float().cpu().numpy()
    return emb, head


class _OnlineFeatures:
    """Mixin for an objective whose batches carry token ids ``(B, L)`` in the features' place: :meth:`loss`
    and :meth:`leads` run the target (``self.target``, a :class:`TargetFeatures`) on them first, then the
    stored-features objective it is mixed into."""
    target: TargetFeatures

    def with_features(self, b: Batch) -> Batch:
        """The batch with the target's features in place of the token ids."""
        return (self.target(b[0]).to(b[0].device), *b[1:])

    def loss(self, model: Any, b: Batch, dtype: torch.dtype) -> torch.Tensor:
        return super().loss(model, self.with_features(b), dtype)  # type: ignore[misc]

    def leads(self, model: Any, b: Batch, seqs: Sequence[dict[str, Any]], idx: Sequence[int],
              dtype: torch.dtype) -> Leads:
        return super().leads(model, self.with_features(b), seqs, idx, dtype)  # type: ignore[misc]


def _dflash_objective() -> type:
    """:class:`OnlineDFlashObjective`, defined on first use (it subclasses the torch-importing
    :class:`.objectives.DFlashObjective`)."""
    from .objectives import DFlashObjective, _as_t, make_blocks

    class OnlineDFlashObjective(_OnlineFeatures, DFlashObjective):
        """DFlash's objective with features from :class:`TargetFeatures` inside each step: batches
        carry the padded token ids ``(B, Lc)`` in the features' place; :meth:`loss` and
        :meth:`leads` run the target first."""

        def __init__(self, c: Any, tok_embd: np.ndarray, head: np.ndarray, target: TargetFeatures, *,
                     n_blocks: int = 32, pad_multiple: int = 1, soft_weight: float = 0.0) -> None:
            super().__init__(c, tok_embd, head, n_blocks=n_blocks, pad_multiple=pad_multiple,
                             soft_weight=soft_weight)
            self.target = target
            if soft_weight > 0 and not target.final:
                from ..errors import InvalidArgumentError

                raise InvalidArgumentError("soft_weight > 0 reads the target's final hidden state: make its "
                                           "TargetFeatures with final=True")

        def with_features(self, b: Batch) -> Batch:
            """The batch with the target's features in place of the token ids; with ``soft_weight`` also the
            target's final hidden state at each block row's position − 1 (the row that predicts its token)."""
            if not self.target.final:
                return super().with_features(b)
            import torch

            feats, final = self.target(b[0])
            pos = b[3]  # (block positions, (n, Lq)): row k of a block at anchor a sits at a + k, predicts t[a + k]
            rows = (pos - 1).clamp(0, final.shape[1] - 1).to(final.device)
            th = torch.gather(final, 1, rows[..., None].expand(-1, -1, final.shape[-1]))
            return (feats.to(b[0].device), *b[1:], th.to(b[0].device))

        def batch(self, seqs: Sequence[dict[str, Any]], feats: Any, idx: Sequence[int], rng: np.random.Generator,
                  device: torch.device, *, evaluate: bool = False) -> Batch:
            n = self.max_eval_anchors if evaluate else self.n_blocks
            blocks = make_blocks(seqs, idx, self.config, n, rng, all_anchors=evaluate, pad_multiple=self.pad_multiple)
            toks = np.zeros(blocks[0].shape, dtype=np.int64)
            for r, i in enumerate(idx):
                toks[r, :len(seqs[i]["tokens"])] = seqs[i]["tokens"]
            return (_as_t(toks, device), *(_as_t(x, device) for x in blocks))

    return OnlineDFlashObjective


def _eagle3_objective() -> type:
    """:class:`OnlineEagle3Objective`, defined on first use (it subclasses the torch-importing
    :class:`.objectives.Eagle3Objective`)."""
    from .objectives import Eagle3Objective, _as_t

    class OnlineEagle3Objective(_OnlineFeatures, Eagle3Objective):
        """EAGLE-3's objective with features from :class:`TargetFeatures` inside each step: the batch's
        features ``(B, T, F)`` are replaced by the token ids ``(B, T)`` they are computed from."""

        def __init__(self, base: Eagle3Objective, target: TargetFeatures) -> None:
            super().__init__(base.config, base._embd, base._head, attention=base.attention,
                             pad_multiple=base.pad_multiple)
            self.target = target

        def batch(self, seqs: Sequence[dict[str, Any]], feats: Any, idx: Sequence[int], rng: np.random.Generator,
                  device: torch.device, *, evaluate: bool = False) -> Batch:
            tok, tgt = self.labels(seqs, idx)
            # the ids of the T rows whose features the target computes in the step, in the features' place
            return _as_t(np.ascontiguousarray(tok[:, :tgt.shape[2]]), device), _as_t(tok, device), _as_t(tgt, device)

    return OnlineEagle3Objective


def online_objective(c: Any, tok_embd: np.ndarray, head: np.ndarray, target: TargetFeatures, *,
                     n_blocks: int = 32, pad_multiple: int = 1, soft_weight: float = 0.0) -> Any:
    """An online DFlash objective (a :class:`.objectives.DFlashObjective` whose batches hold token
    ids and whose steps run ``target`` first) for :func:`.trainer.train` with ``feats=None``; ``soft_weight`` > 0
    (``target`` made with ``final=True``): part of the loss against the target's distribution
    (:attr:`.config.TrainConfig.soft_weight`)."""
    return _dflash_objective()(c, tok_embd, head, target, n_blocks=n_blocks, pad_multiple=pad_multiple,
                               soft_weight=soft_weight)


def data_files(spec: Sequence[str]) -> list[str]:
    """Paths of ``spec`` (paths or glob patterns), sorted, each once.

    Raises:
        FileNotFoundError: a pattern that matches nothing.
    """
    out: list[str] = []
    for s in spec:
        hits = sorted(glob.glob(s))
        if not hits:
            raise FileNotFoundError(f"no data file matches {s!r}")
        out += [h for h in hits if h not in out]
    return out


def _gguf_checkpoint(path: str | os.PathLike, kind: str) -> dict[str, Any]:
    """A drafter GGUF of ``kind`` as a ``drafter.pt``-like checkpoint: ``{"kind", "config", "state_dict"}`` with the
    config fields the file holds (compared with the run's) and float32 tensors (q8_0 / f16 dequantized; an
    EAGLE-3 head's ``d2t`` as int64 in the state dict, where :func:`run` takes the head's vocabulary from).

    Raises:
        InvalidArgumentError: a GGUF of another kind, or not a GGUF.
        FileNotFoundError: no such file.
    """
    import torch

    from .export import read_dflash_gguf, read_draft_gguf, read_eagle3_gguf

    reader = {"dflash": read_dflash_gguf, "eagle3": read_eagle3_gguf, "draft": read_draft_gguf}[kind]
    shape, arrays = reader(path)
    shape.pop("d2t", None)  # (the config says "N ids"; the ids themselves are the state dict's d2t)
    return {"kind": kind, "config": shape, "state_dict": {k: torch.from_numpy(v) for k, v in arrays.items()}}


def run(target: str | os.PathLike, out_dir: str | os.PathLike, files: Sequence[str], tc: Any, *,
        target_dtype: str = "bfloat16", progress: bool = True, command: str | None = None,
        init: str | os.PathLike | None = None, grow: bool = False) -> dict[str, Any]:
    """Train a drafter of ``tc.kind`` (dflash, eagle3 or draft) online on the answer files ``files``
    (:mod:`.data` / :mod:`.regen` JSON lines); export it (``drafter-{q8_0,f16}.gguf``, ``drafter.pt``;
    DFlash also ``hf/``) and write
    ``report.json`` (config, command, data hashes, history of held-out τ, seconds). Returns the report.

    ``init``: the ``drafter.pt`` of an earlier run, or a drafter GGUF of the same kind and shape (e.g. the
    shipped DFlash drafter, or the ``drafter-f16.gguf`` an earlier session brought back; q8_0 / f16 matrices
    dequantized: :func:`.export.read_dflash_gguf`, :func:`.export.read_eagle3_gguf`,
    :func:`.export.read_draft_gguf`), to continue from (a warm restart: fresh optimizer and schedule; a DFlash
    drafter's mask token and an EAGLE-3 head's vocabulary are kept), so training can go on across device calls
    of ≤ 10 min and across sessions. ``grow``: an ``init`` of fewer layers than
    ``tc.drafter_layers`` is deepened to that many first (:func:`.model.grow_layers`: the new layers
    start as no-ops, so training starts from the old drafter's τ); without it a layer count that differs
    is refused like any other shape.

    Raises:
        InvalidArgumentError: ``tc.kind`` none of those, or no training sequences; an ``init``
            checkpoint or GGUF of another kind or shape (block size, layers, target taps, widths), or
            a file that is neither.
        FileNotFoundError: ``init`` does not exist.
    """
    from ..errors import InvalidArgumentError
    from ..gguf_file import read_gguf
    from .features import load_sequences
    from .pipeline import file_sha256, pick_mask_token

    if tc.kind not in ("dflash", "eagle3", "draft"):
        raise InvalidArgumentError(f"online training takes kind dflash, eagle3 or draft, got kind={tc.kind!r}")
    if grow and (tc.kind != "dflash" or init is None):
        raise InvalidArgumentError("grow deepens the DFlash drafter given as init: pass --init with kind dflash, or "
                                   "drop --grow")
    t0 = time.time()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    seqs: list[dict[str, Any]] = []
    for f in files:
        seqs += load_sequences(f, max_len=tc.max_len)
    if not any(s["split"] == "train" for s in seqs):
        raise InvalidArgumentError(f"no training sequences in {list(files)}")
    info = read_gguf(target)
    n_layer = int(info.get(f"{info.arch}.block_count"))
    # llama.cpp (vocab only) before torch: see benchmarks/h200.sh
    mask = pick_mask_token(target, seqs) if init is None and tc.kind == "dflash" else None
    import torch

    ckpt: dict[str, Any] | None = None
    if init is not None and Path(init).suffix == ".gguf":
        # an exported drafter (a shipped one, or one an earlier session brought back: only GGUFs fit through a
        # device call's 16 MiB files, in parts): its matrices dequantized, its shape checked below against this
        # run's configuration
        ckpt = _gguf_checkpoint(init, tc.kind)
        if tc.kind == "dflash":
            mask = int(ckpt["config"]["mask_token_id"])
    elif init is not None:
        try:
            ckpt = torch.load(Path(init), map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise
        except Exception as exc:  # a pickle error of torch's own: not a checkpoint
            raise InvalidArgumentError(f"{init} cannot be read as a torch checkpoint ({exc})") from exc
        if not isinstance(ckpt, dict) or ckpt.get("kind") != tc.kind or "state_dict" not in ckpt:
            raise InvalidArgumentError(f"{init} is not a {tc.kind} drafter.pt of pyllama_spec.train.online")
        if tc.kind == "dflash":
            mask = int(ckpt["config"]["mask_token_id"])

    from .export import export_gguf, export_hf
    from .model import DFlashConfig
    from .objectives import build_objective, target_layers
    from .trainer import train

    dev = torch.device(tc.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    hf = load_hf_target(target, dtype=getattr(torch, target_dtype), device=dev)
    layers = target_layers(tc, n_layer)
    emb, head = token_matrices(hf)
    feats = None
    if tc.kind == "draft":  # a draft model reads tokens only: the target gave its matrices, and is let go
        obj: Any = build_objective(tc, info, seqs, emb, head, target=target)
        c = obj.config
        del hf
    else:
        feats = TargetFeatures(hf, layers, final=tc.soft_weight > 0)
    if tc.kind == "eagle3":
        obj = _eagle3_objective()(build_objective(tc, info, seqs, emb, head, target=target), feats)
        c = obj.config
        if ckpt is not None and "d2t" in ckpt["state_dict"] and c.draft_vocab:
            # a warm restart keeps the checkpoint's own vocabulary (its lm_head rows belong to those ids), not
            # the one this run's data would pick
            c.d2t = [int(t) for t in ckpt["state_dict"]["d2t"].tolist()]
    elif tc.kind == "dflash":
        c = DFlashConfig.for_target(info, emb.shape[0], n_layer=tc.drafter_layers or 2, target_layer_ids=layers,
                                    block_size=tc.block_size, mask_token_id=mask)
    # a drafter.pt holds the whole configuration, a GGUF the shape fields it stores: those must agree
    # (but the layer count, where grow deepens a shallower one)
    grown_from = None
    if ckpt is not None and grow and tc.kind == "dflash" and int(ckpt["config"]["n_layer"]) < c.n_layer:
        from .model import grow_layers

        grown_from = int(ckpt["config"]["n_layer"])
        ckpt["state_dict"] = grow_layers(ckpt["state_dict"], grown_from, c.n_layer)
        ckpt["config"] = {**ckpt["config"], "n_layer": c.n_layer}
    diff = {} if ckpt is None else {k: (ckpt["config"][k], v) for k, v in c.to_dict().items()
                                    if k in ckpt["config"] and ckpt["config"][k] != v}
    if diff:
        if feats is not None:
            feats.close()
        raise InvalidArgumentError(f"{init} was trained with another configuration: (checkpoint, now) {diff}; "
                                   "pass the same --block-size, --drafter-layers, --layers, --draft-vocab and "
                                   "--draft-embd as that run")
    if tc.kind == "dflash":
        assert feats is not None
        obj = online_objective(c, emb, head, feats, n_blocks=tc.n_blocks, pad_multiple=tc.pad_multiple,
                               soft_weight=tc.soft_weight)
    t_load = time.time() - t0
    t1 = time.time()
    model, history = train(seqs, None, obj, tc, progress=progress,
                           init_state=ckpt["state_dict"] if ckpt is not None else None)
    t_train = time.time() - t1
    if tc.kind == "dflash":
        export_hf(model, out / "hf")
    torch.save({"kind": tc.kind, "config": c.to_dict(), "train_config": tc.to_dict(),
                "state_dict": model.state_dict()}, out / "drafter.pt")
    ggufs = {}
    for q in sorted({tc.quant, "f16"}):
        ggufs[q] = out / f"drafter-{q}.gguf"
        export_gguf(model, ggufs[q], target=target, quant=q,
                    name=f"{tc.kind} drafter for {Path(target).name} (online)")
    n_train = sum(s["split"] == "train" for s in seqs)
    steps = history[-1]["step"] if history else 0
    best = max(history, key=lambda h: h["tau"]) if history else {}
    report = {
        "kind": tc.kind, "mode": "online", "target": str(target), "target_dtype": target_dtype,
        "command": command if command is not None else shlex.join([sys.executable, *sys.argv]),
        "seed": tc.seed, "init": str(init) if init is not None else None, "grown_from_layers": grown_from,
        "data": list(files),
        "data_sha256": {Path(f).name: file_sha256(f) for f in files},
        "train_config": tc.to_dict(), "config": c.to_dict(), "n_sequences": len(seqs), "n_train": n_train,
        "n_heldout": len(seqs) - n_train,
        "n_train_answer_tokens": sum(len(s["tokens"]) - s["n_prompt"] for s in seqs if s["split"] == "train"),
        "steps": steps, "epochs": steps * tc.batch / max(n_train, 1), "history": history,
        "best_step": best.get("step"), "best_tau": best.get("tau"), "best_per_position": best.get("per_position"),
        "seconds": {"load": t_load, "train": t_train, "total": time.time() - t0},
        "device": str(dev), "gpu": torch.cuda.get_device_name(0) if dev.type == "cuda" else None,
        "gguf": {q: {"path": p.name, "bytes": p.stat().st_size} for q, p in ggufs.items()},
    }
    (out / "report.json").write_text(json.dumps(report, indent=2))
    return report


def main(argv: Sequence[str] | None = None) -> int:
    from ..errors import PyllamaSpecError
    from .pipeline import config_from_args, parser

    args = sys.argv[1:] if argv is None else list(argv)
    ap = parser()
    ap.prog = "python -m pyllama_spec.train.online"
    ap.description = __doc__.split("\n\n")[0]
    for act in ap._actions:  # --data: one or more files or glob patterns here
        if act.dest == "data":
            act.nargs, act.required = "+", True
            act.help = "answer files (JSON lines, .gz) or glob patterns, e.g. 'answers-*.jsonl.gz'"
    ap.add_argument("--target-dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"],
                    help="the target's weights on the device (features are computed in this type)")
    ap.add_argument("--init", help="drafter.pt of an earlier run, or a drafter .gguf of the same --kind (e.g. the "
                                   "shipped DFlash drafter, or an earlier run's drafter-f16.gguf), with the same "
                                   "configuration: continue from its weights (fresh optimizer and cosine schedule)")
    ap.add_argument("--grow", action="store_true",
                    help="with --init of fewer layers than --drafter-layers: add the missing layers as no-ops "
                         "(copies of its last layer with zero output projections) and train them from there")
    a = ap.parse_args(args)
    try:
        files = data_files(a.data)
        a.data = ",".join(files)
        tc = config_from_args(a)
        rep = run(a.target, a.out_dir, files, tc, target_dtype=a.target_dtype,
                  command=shlex.join(["python", "-m", "pyllama_spec.train.online", *args]), init=a.init,
                  grow=a.grow)
    except (PyllamaSpecError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({k: rep[k] for k in ("best_tau", "best_step", "steps", "epochs", "seconds", "gguf")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["load_hf_target", "TargetFeatures", "token_matrices", "online_objective", "data_files", "run", "main"]
