"""draft-mtp: a target's own next-token-prediction layers and a Gemma-4 assistant sharing the
target's KV cache (issue 9), against llama.cpp's ``--spec-type draft-mtp``."""
import logging

import pytest

import pyllama_spec as ps
from pyllama_spec import drafter_fixtures
from pyllama_spec.speculative.drafters.mtp import MTPDrafter

from .drafter_helpers import assert_rests_defer_rows, compare_with_native

PROMPT = "hello there, how are you"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Tiny GLM-4.5-style targets with one MTP layer (echo and random), a tiny Gemma-4 target with
    an echo and a random assistant."""
    d = tmp_path_factory.mktemp("mtp")
    drafter_fixtures.write_mtp_target(d / "mtp_echo.gguf", layer_scale=0.1, echo_mtp=True, seed=31)
    drafter_fixtures.write_mtp_target(d / "mtp_random.gguf", layer_scale=0.1, seed=31)
    drafter_fixtures.write_gemma4_target(d / "gemma4.gguf", layer_scale=0.1, seed=32)
    drafter_fixtures.write_gemma4_assistant(d / "asst_echo.gguf", target=d / "gemma4.gguf", echo=True)
    drafter_fixtures.write_gemma4_assistant(d / "asst_random.gguf", target=d / "gemma4.gguf", seed=33)
    return {k: d / f"{k}.gguf" for k in ("mtp_echo", "mtp_random", "gemma4", "asst_echo", "asst_random")} | {"dir": d}


@pytest.fixture(scope="module")
def gemma(files):
    g = ps.Generator(files["gemma4"], drafters={"echo": files["asst_echo"], "random": files["asst_random"]},
                     n_ctx=1024, n_batch=64, n_ubatch=32)
    yield g
    g.close()


@pytest.mark.parametrize("name,n_max", [("mtp_echo", 3), ("mtp_random", 2)])
def test_own_mtp_layers_match_native(files, name, n_max, caplog):
    with caplog.at_level(logging.WARNING, logger="pyllama_spec"):
        g = ps.Generator(files[name], drafters={"mtp": None}, n_ctx=1024, n_batch=64, n_ubatch=32)
    with g:
        d = g.drafters["mtp"]
        assert d.kind == "draft-mtp" and not d.shared_kv
        assert "without its MTP layers" in caplog.text  # the Generator loads the target without them
        ours, nat, steps = compare_with_native(g, "mtp", target=files[name], drafter_file=None,
                                               spec_type="draft-mtp", prompt=PROMPT, n_max=n_max)
        assert ours.tokens == g.generate(PROMPT, max_tokens=40).tokens
        if name == "mtp_echo":
            assert 0.5 < ours.stats.acceptance_rate <= 1.0
        mem = d.memory_report()
        assert mem["kv_cache_mib"] > 0  # its own cache for the MTP layer


@pytest.mark.parametrize("name,n_max", [("echo", 3), ("random", 2)])
def test_gemma4_assistant_matches_native(gemma, files, name, n_max):
    ours, nat, steps = compare_with_native(gemma, name, target=files["gemma4"], drafter_file=files[f"asst_{name}"],
                                           spec_type="draft-mtp", prompt=PROMPT, n_max=n_max)
    assert ours.tokens == gemma.generate(PROMPT, max_tokens=40).tokens
    if name == "echo":
        assert ours.stats.acceptance_rate > 0.3


def test_assistant_shares_the_target_kv_cache(gemma):
    d = gemma.drafters["echo"]
    assert d.kind == "draft-mtp" and d.shared_kv
    mem = gemma.memory_report()
    assert mem["drafters"]["echo"]["kv_cache_mib"] == 0.0 and mem["drafters"]["echo"]["shares_target_kv"]
    assert mem["target"]["kv_cache_mib"] > 0
    # the assistant never writes the target's cache: after a run it holds the committed tokens only
    r = gemma.generate(PROMPT, drafter="echo", n_max=3, max_tokens=20)
    assert gemma.ctx.memory.pos_max() == len(r.prompt_tokens) + len(r.tokens) - 2


def test_bad_pairings_raise(gemma, files, tiny):
    with pytest.raises(ps.DrafterMismatchError, match="no next-token-prediction layers"):
        with ps.Generator(tiny["target"], drafters={"mtp": None}, n_ctx=256):
            pass
    d = files["dir"]
    drafter_fixtures.write_gemma4_target(d / "gemma4_wide.gguf", n_embd=96, seed=5)
    drafter_fixtures.write_gemma4_assistant(d / "asst_wide.gguf", target=d / "gemma4_wide.gguf")
    with pytest.raises(ps.DrafterMismatchError, match="width 96.*hidden size 64"):
        MTPDrafter(gemma.ctx, d / "asst_wide.gguf")
    with pytest.raises(ps.DrafterMismatchError, match="assistant for 'gemma4' models"):
        with ps.Generator(files["mtp_echo"], n_ctx=256) as g:
            MTPDrafter(g.ctx, files["asst_echo"])
    assert gemma.generate(PROMPT, drafter="echo", max_tokens=4).stats.n_steps > 0


@pytest.mark.parametrize("max_rest", [3, 12])
def test_auto_rests_defer_the_mtp_layers_rows_to_the_probe(files, max_rest):
    """n_max="auto" resting with the target's own MTP layers: the resting steps' (token, hidden state) pairs go
    into the MTP layers' cache in one decode before the probe's draft — the drafts are those of decoding each
    row as it came, the output is plain decoding's, fewer decodes."""
    with ps.Generator(files["mtp_echo"], drafters={"mtp": None}, n_ctx=1024, n_batch=64, n_ubatch=32) as g:
        assert_rests_defer_rows(g, "mtp", PROMPT, max_rest)


def test_a_rest_longer_than_a_batch_goes_into_the_mtp_layers_in_batches(files):
    """Rests of up to 40 steps with n_batch 16: the rows go in whenever 16 wait, and each keeps its own hidden state
    (a resting step's on_accept used to pair the row after a flush with the flushed batch's first one)."""
    with ps.Generator(files["mtp_echo"], drafters={"mtp": None}, n_ctx=1024, n_batch=16, n_ubatch=16) as g:
        assert_rests_defer_rows(g, "mtp", PROMPT, 40, max_tokens=120)
