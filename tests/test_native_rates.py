"""How the native programs' speeds are read: ``llama-completion``'s own ``eval time`` rate leaves
out sampling and the host's work between decodes, so the rate we compare with ours is taken by
the wall clock after the prompt (``NativeRun.decode_tokens_per_s``)."""
import pytest

from pyllama_spec.native import _completion_wall_rate, run_completion

from .conftest import native_or_skip

# llama-completion's perf lines for SmolLM2 Q4_1, 128 tokens, 2-core Intel Xeon (2026-12-01)
LOG = """\
I common_perf_print:    sampling time =      12.55 ms
I common_perf_print: prompt eval time =      36.69 ms /     8 tokens (    4.59 ms per token,   218.04 tokens per second)
I common_perf_print:        eval time =    1111.50 ms /   127 runs   (    8.75 ms per token,   114.26 tokens per second)
I common_perf_print:       total time =    1169.66 ms /   135 tokens
"""


def test_wall_rate_counts_what_eval_time_leaves_out():
    # 127 decodes over the 1132.97 ms after the prompt, sampling and the loop's own work included
    assert _completion_wall_rate(LOG) == pytest.approx(127 / 1.13297, rel=1e-9)
    assert _completion_wall_rate(LOG) < 114.26  # below llama.cpp's eval-only figure
    assert _completion_wall_rate("no perf lines") is None


@pytest.mark.native
def test_llama_completion_reports_both_rates(tiny):
    native_or_skip("llama-completion")
    nat = run_completion(tiny["target"], "hello there", n_predict=32, n_ctx=512, n_gpu_layers=0)
    assert nat.decode_tokens_per_s is not None and nat.eval_tokens_per_s is not None
    assert 0 < nat.decode_tokens_per_s <= nat.eval_tokens_per_s
