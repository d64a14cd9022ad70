"""Issue 12.9 / 13.3: every public argument of the wrong type raises InvalidTypeError (a TypeError
and a PyllamaSpecError), every wrong value InvalidArgumentError (a ValueError); the message names
the argument. Before, e.g. ``stop=123`` gave a bare "'int' object is not iterable" and bools
passed where ints were meant. Each case also checks that the object stays usable."""
import numpy as np
import pytest

import pyllama_spec as ps


def _raises(exc, name, fn, *a, **kw):
    with pytest.raises(exc) as ei:
        fn(*a, **kw)
    assert name in str(ei.value), (name, str(ei.value))
    assert isinstance(ei.value, ps.PyllamaSpecError)


@pytest.mark.parametrize("kwargs, name", [
    ({"stop": 123}, "stop"), ({"stop": ["ok", 5]}, "stop"), ({"stop": b"x"}, "stop"),
    ({"max_tokens": True}, "max_tokens"), ({"max_tokens": 2.0}, "max_tokens"), ({"max_tokens": "8"}, "max_tokens"),
    ({"n_max": 2.5}, "n_max"), ({"n_max": True}, "n_max"),
    ({"temperature": True}, "temperature"), ({"temperature": "hot"}, "temperature"),
    ({"top_k": 1.5}, "top_k"), ({"top_k": False}, "top_k"), ({"top_p": "1"}, "top_p"), ({"min_p": None}, "min_p"),
    ({"seed": 1.0}, "seed"), ({"seed": True}, "seed"),
    ({"drafter": 3}, "drafter"), ({"verify": 1}, "verify"), ({"sync_stages": 1}, "sync_stages"),
    ({"stream": "yes"}, "stream"), ({"special": 1}, "special"),
    ({"stop_token_ids": 5}, "stop_token_ids"), ({"stop_token_ids": [1.0]}, "stop_token_ids"),
    ({"sampling": {"temperature": 1}}, "sampling"), ({"spec": "dflash"}, "spec"),
    ({"template_kwargs": [1]}, "template_kwargs"),
])
def test_generate_argument_types(tiny_gen, kwargs, name):
    _raises(ps.InvalidTypeError, name, tiny_gen.generate, "hi", **kwargs)
    with pytest.raises(TypeError):  # also the Python convention
        tiny_gen.generate("hi", **kwargs)
    assert len(tiny_gen.generate("hi", max_tokens=2).tokens) == 2


@pytest.mark.parametrize("kwargs, name", [
    ({"stop": ""}, "stop"), ({"max_tokens": 0}, "max_tokens"), ({"stop_token_ids": [10**6]}, "stop_token_ids"),
    ({"top_p": 0.0}, "top_p"), ({"temperature": float("nan")}, "temperature"), ({"seed": -1}, "seed"),
    ({"verify": "maybe"}, "verify"),
])
def test_generate_argument_values(tiny_gen, kwargs, name):
    _raises(ps.InvalidArgumentError, name, tiny_gen.generate, "hi", **kwargs)


def test_prompt_arguments(tiny_gen):
    _raises(ps.InvalidTypeError, "prompt", tiny_gen.generate, 42)
    _raises(ps.InvalidTypeError, "prompt_tokens", tiny_gen.generate, prompt_tokens="abc")
    _raises(ps.InvalidTypeError, "prompt_tokens", tiny_gen.generate, prompt_tokens=[1, 2.5])
    _raises(ps.InvalidTypeError, "prompt_tokens", tiny_gen.generate, prompt_tokens=[1, True])
    _raises(ps.InvalidArgumentError, "prompt_tokens", tiny_gen.generate, prompt_tokens=[1, 9999])
    _raises(ps.InvalidArgumentError, "messages", tiny_gen.generate, messages=[{"text": "hi"}])
    r = tiny_gen.generate(prompt_tokens=np.array([65, 66], dtype=np.int64), max_tokens=2)
    assert r.prompt_tokens == [65, 66]


def test_generator_and_drafter_arguments(tiny):
    _raises(ps.InvalidTypeError, "path", ps.Generator, 123)
    _raises(ps.InvalidTypeError, "drafters", ps.Generator, tiny["target"], drafters=["ngram"])
    _raises(ps.InvalidTypeError, "n_ctx", ps.Generator, tiny["target"], n_ctx=256.0)
    _raises(ps.InvalidTypeError, "repack", ps.Generator, tiny["target"], repack="no")
    gen = ps.Generator(tiny["target"], n_ctx=256)
    _raises(ps.InvalidTypeError, "name", gen.add_drafter, 1, "ngram")
    _raises(ps.InvalidTypeError, "spec", gen.add_drafter, "x", 3.5)
    _raises(ps.InvalidTypeError, "(kind, kwargs)", gen.add_drafter, "x", ("ngram",))
    _raises(ps.InvalidArgumentError, "unknown drafter kind", ps.create_drafter, "eagle9", gen.ctx)
    gen.close()


@pytest.mark.parametrize("kwargs, exc, name", [
    ({"n_ctx": "4096"}, ps.InvalidTypeError, "n_ctx"), ({"n_ctx": -1}, ps.InvalidArgumentError, "n_ctx"),
    ({"n_batch": True}, ps.InvalidTypeError, "n_batch"), ({"n_seq_max": 0}, ps.InvalidArgumentError, "n_seq_max"),
    ({"flash_attn": 1}, ps.InvalidTypeError, "flash_attn"),
    ({"flash_attn": "yes"}, ps.InvalidArgumentError, "flash_attn"),
    ({"type_k": None}, ps.InvalidTypeError, "type_k"), ({"type_k": "q3"}, ps.InvalidArgumentError, "type_k"),
    ({"n_threads": 0}, ps.InvalidArgumentError, "n_threads"),
    ({"embeddings": "yes"}, ps.InvalidTypeError, "embeddings"),
    ({"causal_attn": 0}, ps.InvalidTypeError, "causal_attn"), ({"kv_unified": None}, ps.InvalidTypeError, "kv_unified"),
])
def test_context_argument_errors(tiny_model, kwargs, exc, name):
    _raises(exc, name, ps.Context, tiny_model, **kwargs)


def test_context_call_arguments(tiny_model):
    c = ps.Context(tiny_model, n_ctx=256, n_batch=32)
    _raises(ps.InvalidTypeError, "tokens", c.decode, [1.5, 2.0])
    _raises(ps.InvalidTypeError, "tokens", c.decode, ["a"])
    _raises(ps.InvalidTypeError, "pos", c.decode, [1, 2], [0.0, 1.0])
    _raises(ps.InvalidTypeError, "seq_id", c.decode, [1], seq_id=0.0)
    _raises(ps.InvalidTypeError, "logits", c.decode, [1, 2], logits=[0.5, 1.0])
    _raises(ps.InvalidTypeError, "layer_ids", c.enable_layer_inputs, 1)
    _raises(ps.InvalidTypeError, "layer id", c.enable_layer_inputs, [True])
    _raises(ps.InvalidTypeError, "seq_id", c.memory.seq_rm, "0")
    _raises(ps.InvalidArgumentError, "p0", c.memory.seq_rm, 0, -5)
    _raises(ps.InvalidTypeError, "data", c.memory.state_set, "state")
    _raises(ps.InvalidTypeError, "n_threads", c.set_threads, 2.0)
    assert c.decode([1, 2, 3]) == 1  # still usable
    c.close()


def test_model_and_vocab_arguments(tiny, tiny_model):
    _raises(ps.InvalidTypeError, "n_gpu_layers", ps.Model, tiny["target"], n_gpu_layers="all")
    _raises(ps.InvalidTypeError, "n_gpu_layers", ps.Model, tiny["target"], n_gpu_layers=True)
    _raises(ps.InvalidArgumentError, "main_gpu", ps.Model, tiny["target"], main_gpu=7)
    _raises(ps.InvalidTypeError, "use_mmap", ps.Model, tiny["target"], use_mmap=None)
    v = tiny_model.vocab
    _raises(ps.InvalidTypeError, "text", v.tokenize, b"bytes")
    _raises(ps.InvalidTypeError, "add_special", v.tokenize, "x", add_special=None)
    _raises(ps.InvalidTypeError, "tokens", v.detokenize, "abc")
    _raises(ps.InvalidTypeError, "token", v.token_to_piece, 1.0)
    _raises(ps.InvalidArgumentError, "token", v.text, 264)
    _raises(ps.InvalidTypeError, "key", tiny_model.meta, 3)
    assert v.detokenize(v.tokenize("ok")) == "ok"


@pytest.mark.parametrize("bad, name", [({"n_max": 1.0}, "n_max"), ({"drafter": ["a"]}, "drafter")])
def test_spec_config_types(bad, name):
    _raises(ps.InvalidTypeError, name, ps.SpecConfig, **bad)


@pytest.mark.parametrize("bad, name", [({"temperature": True}, "temperature"), ({"top_k": 2.0}, "top_k"),
                                       ({"top_p": 1.5}, "top_p"), ({"min_p": 1.0}, "min_p")])
def test_sampling_params_checks(bad, name):
    with pytest.raises(ps.InvalidArgumentError, match=name):
        ps.SamplingParams(**bad)
