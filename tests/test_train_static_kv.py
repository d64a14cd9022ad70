"""The ``torch`` regen engine (``train/static_kv.py``): continuous batching over a static KV cache.

In float32 on the CPU its greedy answers are transformers' own one-prompt ``generate`` answers,
token for token, whatever the number of slots, the refill point or the attention buckets (slots
refilled while others run, stale cache rows masked); sampled answers do not depend on the batch
(the Gumbel noise is a hash of seed, position and token) and follow the softmax at the temperature
(χ² on the noise's argmax)."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from pyllama_spec.errors import InvalidArgumentError, UnsupportedError  # noqa: E402
from pyllama_spec.train.static_kv import StaticKVGenerator, gumbel_noise  # noqa: E402


def _tiny(model_type: str = "llama", seed: int = 0):
    torch.manual_seed(seed)
    kw = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5)
    if model_type == "qwen2":
        cfg = transformers.Qwen2Config(**kw)
    else:
        cfg = transformers.LlamaConfig(**kw)
    m = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    # larger weights than the init's: the greedy walk then varies and ends (token 0 is the EOG) at times
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 2:
                p.mul_(6.0)
        if model_type == "qwen2":  # non-zero q/k/v biases exercise the bias path
            for lyr in m.model.layers:
                for lin in (lyr.self_attn.q_proj, lyr.self_attn.k_proj, lyr.self_attn.v_proj):
                    lin.bias.normal_(0, 0.5)
    return m


def _reference(m, p, max_tokens, eog):
    with torch.no_grad():
        g = m.generate(input_ids=torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                       max_new_tokens=max_tokens, do_sample=False, eos_token_id=eog, pad_token_id=eog[0])
    ref = g[0, len(p):].tolist()
    cut = next((j for j, t in enumerate(ref) if t in eog), None)
    return ref if cut is None else ref[:cut + 1]


PROMPTS = [[5, 9, 12], [7], [3, 4, 5, 6, 7, 8, 9, 10, 11, 40], [50, 2], [17, 18, 19, 20], [90, 1, 1, 1, 33],
           [64, 65], [8, 8, 8, 8, 8, 8, 8], [30], [44, 45, 46]]


@pytest.mark.parametrize("model_type,n_slots,refill,buckets", [
    ("llama", 3, 1, [4, 8, 16]),    # slots refilled one at a time while others run; many buckets
    ("llama", 16, None, None),      # every prompt at once
    ("qwen2", 4, 2, [8]),           # q/k/v biases
])
def test_greedy_answers_equal_transformers_generate(model_type, n_slots, refill, buckets):
    m = _tiny(model_type)
    eog = [0, 1]
    gen = StaticKVGenerator(m, n_slots=n_slots, n_ctx=40, refill=refill, buckets=buckets, prefill_tokens=64)
    got = dict(gen.generate(PROMPTS, max_tokens=20, eog=eog))
    assert sorted(got) == list(range(len(PROMPTS)))
    n_eog = 0
    for i, p in enumerate(PROMPTS):
        ref = _reference(m, p, 20, eog)
        assert got[i] == ref, f"prompt {i}"
        n_eog += ref[-1] in eog
    assert 0 < n_eog < len(PROMPTS) or n_slots == 16  # (both kinds of ending happen in the refill cases)


def test_answers_stop_where_the_slot_is_full():
    m = _tiny()
    gen = StaticKVGenerator(m, n_slots=2, n_ctx=12, prefill_tokens=32)
    long = [3, 4, 5, 6, 7, 8, 9, 10, 11, 40]
    got = dict(gen.generate([long, [5]], max_tokens=20, eog=[95]))
    ref0, ref1 = _reference(m, long, 2, [95]), _reference(m, [5], 11, [95])
    assert 95 not in ref0 + ref1  # (so both run to the end of their slot)
    # n_ctx 12: a 10-token prompt leaves room for 2 answer tokens, a 1-token prompt for 11
    assert (got[0], got[1]) == (ref0, ref1) and [len(got[0]), len(got[1])] == [2, 11]


def test_sampled_answers_do_not_depend_on_the_batch():
    m = _tiny()
    temps, seeds = [0.9] * len(PROMPTS), [1000 + i for i in range(len(PROMPTS))]
    a = dict(StaticKVGenerator(m, n_slots=2, n_ctx=40, refill=1, prefill_tokens=64).generate(
        PROMPTS, max_tokens=12, eog=[0], temperatures=temps, seeds=seeds))
    b = dict(StaticKVGenerator(m, n_slots=16, n_ctx=40, buckets=[40], prefill_tokens=64).generate(
        PROMPTS, max_tokens=12, eog=[0], temperatures=temps, seeds=seeds))
    assert a == b
    c = dict(StaticKVGenerator(m, n_slots=16, n_ctx=40, prefill_tokens=64).generate(
        PROMPTS, max_tokens=12, eog=[0], temperatures=temps, seeds=[s + 1 for s in seeds]))
    assert c != a  # other seeds, other draws
    greedy = dict(StaticKVGenerator(m, n_slots=16, n_ctx=40, prefill_tokens=64).generate(
        PROMPTS, max_tokens=12, eog=[0]))
    assert greedy != a


def test_gumbel_max_follows_the_softmax():
    """argmax(logits / T + noise) over many (seed, position) pairs is drawn from softmax(logits / T)."""
    scipy_stats = pytest.importorskip("scipy.stats")
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, 0.3])
    T = 0.7
    n = 60000
    seed = torch.arange(n, dtype=torch.int64) * 7919 + 3
    pos = torch.arange(n, dtype=torch.int64) % 97
    g = gumbel_noise(seed, pos, len(logits))
    assert g.shape == (n, len(logits)) and torch.isfinite(g).all()
    draws = (logits[None, :] / T + g).argmax(-1).numpy()
    counts = np.bincount(draws, minlength=len(logits))
    p = torch.softmax(logits / T, -1).double().numpy()
    assert scipy_stats.chisquare(counts, p * n).pvalue > 1e-3
    # the same (seed, position) gives the same noise
    assert torch.equal(gumbel_noise(seed[:5], pos[:5], 6), g[:5])


def test_bad_input_is_refused_and_the_generator_stays_usable():
    m = _tiny()
    gen = StaticKVGenerator(m, n_slots=2, n_ctx=16, prefill_tokens=32)
    with pytest.raises(InvalidArgumentError, match="n_ctx"):
        list(gen.generate([[1] * 16], max_tokens=4, eog=[0]))
    with pytest.raises(InvalidArgumentError, match="split the prompts"):
        list(gen.generate([[3], [4]], max_tokens=4, eog=[0], temperatures=[0.0, 0.8]))
    with pytest.raises(InvalidArgumentError, match="max_tokens"):
        list(gen.generate([[3]], max_tokens=0, eog=[0]))
    assert dict(gen.generate([[5, 9, 12]], max_tokens=6, eog=[0, 1]))[0] == _reference(m, [5, 9, 12], 6, [0, 1])
    g = transformers.AutoModelForCausalLM.from_config(transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2,
                                                                              vocab_size=32))
    with pytest.raises(UnsupportedError, match="llama family"):
        StaticKVGenerator(g)


def test_regen_torch_engine_writes_the_engines_answers(tmp_path):
    """regenerate(engine="torch") on a GGUF target: the answers are the generator's own, in the shard's files."""
    pytest.importorskip("accelerate")
    import pyllama_spec as ps
    from pyllama_spec.fixtures import write_tiny_target
    from pyllama_spec.train import prompts as P
    from pyllama_spec.train.online import load_hf_target
    from pyllama_spec.train.regen import regenerate

    target = tmp_path / "tiny.gguf"
    write_tiny_target(target, n_layer=2, n_embd=32, n_head=2, n_head_kv=1, n_ff=64, seed=5)
    recs = [{"id": f"p{i}", "source": "seed", "task": "t", "split": "train", "turns": [f"question {i} about {w}"]}
            for i, w in enumerate(["cats", "dogs", "the sea", "maps", "rain"])]
    P.write_prompts(tmp_path / "p.jsonl", recs)
    man = regenerate(target, tmp_path / "p.jsonl", tmp_path / "ans", engine="torch", dtype="float32", max_tokens=8,
                     sampled=0.4, batch=3, progress=False, command="test")
    assert man["engine"] == "torch" and man["n_answers"] == len(recs) and man["complete"]
    assert 0 < man["n_sampled"] < len(recs)
    lines = [json.loads(x) for x in gzip.open(tmp_path / "ans" / "answers-s0of1-00.jsonl.gz", "rt")]
    model = load_hf_target(target, dtype=torch.float32)
    vocab = ps.Model(target, vocab_only=True).vocab
    eog = [t for t in range(vocab.n_tokens) if vocab.is_eog(t)]
    for d in lines:
        if d["temperature"] == 0:
            assert d["answer_tokens"] == _reference(model, d["prompt_tokens"], 8, eog)
        else:  # the engine's draw with the record's seed
            gen = StaticKVGenerator(model, n_slots=1, n_ctx=1024 + 8, prefill_tokens=2048)
            (_, a), = gen.generate([d["prompt_tokens"]], max_tokens=8, eog=eog, temperatures=[d["temperature"]],
                                   seeds=[d["seed"]])
            assert d["answer_tokens"] == a


def test_magpie_torch_engine_yields_the_turns_that_end(tmp_path):
    """Magpie through the torch engine: the user turns it keeps are the sampled rows that end with an
    end-of-generation token, detokenised; the same seed gives the same turns."""
    pytest.importorskip("accelerate")
    import pyllama_spec as ps
    from pyllama_spec.fixtures import write_tiny_target
    from pyllama_spec.train import prompts as P
    from pyllama_spec.train.online import load_hf_target
    from pyllama_spec.train.regen import prompt_seed

    target = tmp_path / "tiny.gguf"
    write_tiny_target(target, n_layer=2, n_embd=32, n_head=2, n_head_kv=1, n_ff=64, seed=7)
    kw = dict(seed=3, max_tokens=24, n_parallel=8, systems=[None, "Be brief."], engine="torch", min_p=0.0)
    got = list(P.magpie_requests(target, 60, **kw))
    assert got == list(P.magpie_requests(target, 60, **kw))
    assert got and all(task in ("magpie", "magpie-sys1") for task, _ in got)
    # the same turns from the generator itself
    v = ps.Model(target, vocab_only=True).vocab
    eog = [t for t in range(v.n_tokens) if v.is_eog(t)]
    model = load_hf_target(target, **P.torch_engine_placement())  # where magpie_requests put it
    tmpl = ps.Model(target, vocab_only=True).chat_template
    bos = v.token_to_piece(v.bos, special=True).decode() if v.bos is not None else ""
    eos = v.token_to_piece(v.eos, special=True).decode() if v.eos is not None else ""
    pref = [v.tokenize(P.user_turn_prefix(tmpl, s, bos=bos, eos=eos), add_special=True, parse_special=True)
            for s in kw["systems"]]
    pref = [p[1:] if len(p) > 1 and v.bos is not None and p[0] == p[1] == v.bos else p for p in pref]
    import random
    rng = random.Random(3)
    which = [rng.randrange(2) for _ in range(60)]
    gen = StaticKVGenerator(model, n_slots=8, n_ctx=max(map(len, pref)) + 25)
    rows = dict(gen.generate([pref[w] for w in which], max_tokens=24, eog=eog, temperatures=[1.0] * 60,
                             seeds=[prompt_seed(f"magpie{i}", 3) for i in range(60)]))
    want = sorted(("magpie" if which[i] == 0 else "magpie-sys1", v.detokenize(r[:-1], remove_special=True).strip())
                  for i, r in rows.items() if r and r[-1] in eog)
    assert sorted(got) == want
