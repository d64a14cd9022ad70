"""DFlash2 (selector) and DSpark (Markov head) drafters (issue 9) against llama.cpp's
``--spec-type draft-dflash`` / ``draft-dspark``."""
import numpy as np
import pytest

import pyllama_spec as ps
from pyllama_spec import drafter_fixtures, fixtures
from pyllama_spec.speculative.drafters import drafter_kind_of_file
from pyllama_spec.speculative.drafters.dflash2 import DFlash2Drafter, walk_lattice
from pyllama_spec.speculative.drafters.dspark import DSparkDrafter

from .drafter_helpers import compare_with_native

PROMPT = "hello there, how are you"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("dflash2")
    t = d / "target.gguf"
    fixtures.write_tiny_target(t, arch="llama", n_layer=4, n_embd=64, seed=41, layer_scale=0.1)
    drafter_fixtures.write_dflash2_drafter(d / "dflash2.gguf", target=t, seed=1)
    drafter_fixtures.write_dspark_drafter(d / "dspark_echo.gguf", target=t, echo=True)
    drafter_fixtures.write_dspark_drafter(d / "dspark_random.gguf", target=t, seed=3)
    drafter_fixtures.write_dspark_drafter(d / "dspark_bonus.gguf", target=t, echo=True, sample_from_anchor=False)
    drafter_fixtures.write_dspark_drafter(d / "dspark_noconf.gguf", target=t, seed=4, confidence=False)
    return {"target": t, "dir": d} | {k: d / f"{k}.gguf" for k in
                                      ("dflash2", "dspark_echo", "dspark_random", "dspark_bonus", "dspark_noconf")}


@pytest.fixture(scope="module")
def gen(files):
    names = ("dflash2", "dspark_echo", "dspark_random", "dspark_bonus")
    g = ps.Generator(files["target"], drafters={k: files[k] for k in names}, n_ctx=1024, n_batch=64, n_ubatch=32)
    yield g
    g.close()


def test_kinds_from_files(gen, files):
    assert drafter_kind_of_file(files["dflash2"]) == "draft-dflash"
    assert drafter_kind_of_file(files["dspark_echo"]) == "draft-dspark"
    assert type(gen.drafters["dflash2"]) is DFlash2Drafter and gen.drafters["dflash2"].kind == "draft-dflash"
    assert type(gen.drafters["dspark_echo"]) is DSparkDrafter
    # the anchor row drafts too: a block of 8 gives 8 drafts; a bonus-anchor block 7
    assert gen.drafters["dspark_echo"].n_max_limit == 8 and gen.drafters["dspark_bonus"].n_max_limit == 7
    assert gen.drafters["dflash2"].n_max_limit == 7


@pytest.mark.parametrize("name,spec_type,n_max", [
    ("dflash2", "draft-dflash", 4), ("dflash2", "draft-dflash", 7),
    ("dspark_echo", "draft-dspark", 4), ("dspark_echo", "draft-dspark", 8),
    ("dspark_random", "draft-dspark", 3), ("dspark_bonus", "draft-dspark", 3)])
def test_matches_native(gen, files, name, spec_type, n_max):
    ours, nat, steps = compare_with_native(gen, name, target=files["target"], drafter_file=files[name],
                                           spec_type=spec_type, prompt=PROMPT, n_max=n_max, block=True)
    assert ours.tokens == gen.generate(PROMPT, max_tokens=40).tokens
    if name in ("dspark_echo", "dspark_bonus"):
        assert 0.2 < ours.stats.acceptance_rate < 1.0


def test_confidence_head_cuts_drafts_like_native(gen, files):
    ours, nat, steps = compare_with_native(gen, "dspark_random", target=files["target"],
                                           drafter_file=files["dspark_random"], spec_type="draft-dspark",
                                           prompt=PROMPT, n_max=6, p_min=0.5, block=True)
    assert any(d < 6 for _, d in steps[:-2])


def test_p_min_needs_a_confidence_head(gen, files):
    with pytest.raises(ps.InvalidArgumentError, match="no confidence head"):
        DSparkDrafter(gen.ctx, files["dspark_noconf"], p_min=0.5)
    DSparkDrafter(gen.ctx, files["dspark_noconf"]).close()
    with pytest.raises(ps.DrafterMismatchError, match="no Markov head"):
        DSparkDrafter(gen.ctx, files["dflash2"])


def test_memory_report_has_its_own_kv_cache(gen):
    mem = gen.memory_report()["drafters"]
    assert mem["dflash2"]["kv_cache_mib"] > 0 and mem["dspark_echo"]["kv_cache_mib"] > 0


def test_walk_lattice_follows_the_best_successor():
    k = 3
    rows = np.zeros((3, 16), np.float32)
    rows[:, :k] = [[10, 11, 12], [20, 21, 22], [30, 31, 32]]
    rows[0, k:k + k] = [0.0, 5.0, 1.0]                         # after the anchor: candidate 1
    rows[1, k + 1 * k: k + 2 * k] = [3.0, 0.0, 0.0]            # after candidate 1: candidate 0
    rows[2, k + 0 * k: k + 1 * k] = [0.0, 0.1, 0.2]            # after candidate 0: 2, but unsure
    assert walk_lattice(rows, k) == [11, 20, 32]
    assert walk_lattice(rows, k, p_min=0.5) == [11, 20]        # softmax([0, .1, .2]) max 0.37 < 0.5
