"""KV cache editing and sequence state."""
import numpy as np
import pytest

import pyllama_spec as ps

from .conftest import EXACT, close_logits


def test_seq_cp_keep_and_positions(tiny_model):
    separate = ps.Context(tiny_model, n_ctx=256, n_batch=64, n_seq_max=2)
    separate.decode([1, 2, 3])
    with pytest.raises(ps.UnsupportedError, match="kv_unified"):
        separate.memory.seq_cp(0, 1, 0, 2)
    separate.memory.seq_cp(0, 1)  # a whole sequence is fine
    assert separate.memory.pos_max(1) == 2
    c = ps.Context(tiny_model, n_ctx=512, n_batch=64, n_seq_max=2, kv_unified=True)
    toks = tiny_model.vocab.tokenize("sequences share a prefix")
    c.decode(toks, logits="all")
    ref = c.logits().copy()
    m = c.memory
    assert (m.pos_min(0), m.pos_max(0), m.pos_max(1)) == (0, len(toks) - 1, -1)
    m.seq_cp(0, 1, 0, 10)
    assert m.pos_max(1) == 9
    # sequence 1 continues from the shared prefix and reproduces sequence 0's logits
    c.decode(toks[10:], seq_id=1, logits="all")
    close_logits(c.logits(), ref[10:])
    m.seq_keep(1)
    assert m.pos_max(0) == -1 and m.pos_max(1) == len(toks) - 1
    m.clear()
    assert m.pos_max(1) == -1


def test_state_roundtrip(tiny_model):
    c = ps.Context(tiny_model, n_ctx=256, n_batch=64)
    toks = tiny_model.vocab.tokenize("save me and restore me")
    c.decode(toks[:-1])
    state = c.memory.state_get(0)
    c.decode(toks[-1:])
    ref = c.logits().copy()
    c.memory.clear()
    c.memory.state_set(state, 0)
    assert c.memory.pos_max() == len(toks) - 2
    c.decode(toks[-1:])
    if EXACT:
        np.testing.assert_array_equal(c.logits(), ref)
    else:
        close_logits(c.logits(), ref)
    with pytest.raises(ps.PyllamaSpecError):
        c.memory.state_set(b"\x00" * 16, 0)


def test_seq_add_shifts_positions(tiny_model):
    c = ps.Context(tiny_model, n_ctx=256, n_batch=64)
    c.decode(list(range(1, 11)))
    c.memory.seq_add(0, 0, -1, 5)
    assert (c.memory.pos_min(), c.memory.pos_max()) == (5, 14)
