"""llama.cpp's RPC backend on loopback (issue 14): target layers served by ggml-rpc-server
processes this test starts on 127.0.0.1 (killed at the end, and ending by themselves after a few
minutes whatever happens), with the same tokens as the local run.

The runs that use the servers happen in a child process: ggml-rpc aborts the process that loses
its server, and RPC devices stay registered for the life of a process."""
import socket
import threading
import time

import pytest

import pyllama_spec as ps
from pyllama_spec import rpc

from .conftest import assert_same_tokens, child_result

PROMPT = "the layers of this model live in another process"


def _server_or_skip():
    if not rpc.available():
        pytest.skip("built without the RPC backend (PYLLAMA_SPEC_RPC=OFF)")
    try:
        rpc.server_program()
    except ps.UnsupportedError as exc:
        pytest.skip(str(exc))


def test_endpoints_are_checked_before_llama_cpp_sees_them():
    for bad in ("localhost", ":50052", "host:0", "host:99999", "host:port", 50052):
        with pytest.raises(ps.InvalidArgumentError, match="host:port"):
            rpc.parse_endpoint(bad)
    closed = f"127.0.0.1:{rpc.free_port()}"
    with pytest.raises(ConnectionError, match="no RPC server answers"):
        rpc.add_server(closed)
    assert not rpc.reachable(closed)
    # something that listens but is not an RPC server: refused, not an abort
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def answer_nonsense():
        conn, _ = srv.accept()
        conn.recv(64)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        conn.close()
    t = threading.Thread(target=answer_nonsense, daemon=True)
    t.start()
    with pytest.raises(ConnectionError, match="not a ggml RPC server"):
        rpc.probe(f"127.0.0.1:{srv.getsockname()[1]}", timeout=5)
    t.join(5)
    srv.close()


def test_local_server_leaves_nothing_running():
    # `timeout` runs the server as its child: ending only `timeout` would leave the server listening
    # until its lifetime ran out (its own process group, killed as a whole, is what ends both)
    _server_or_skip()
    with rpc.local_server(threads=1, devices=["CPU"], lifetime=120) as ep:
        assert rpc.probe(ep)[0] == rpc.PROTO_MAJOR
    deadline = time.monotonic() + 10
    while rpc.reachable(ep, 0.2) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not rpc.reachable(ep, 0.2)


CHILD = r"""
import json, sys, time
import pyllama_spec as ps
from pyllama_spec import rpc
target, dflash, prompt = sys.argv[1:4]
out = {}
lend = dict(threads=1, lifetime=240, devices=["CPU"])  # the servers lend their CPU (also in a GPU build)
with rpc.local_server(**lend) as ep1, rpc.local_server(**lend) as ep2:
    assert rpc.probe(ep1)[0] == rpc.PROTO_MAJOR
    kw = dict(n_ctx=1024, n_batch=64, n_ubatch=32, devices=[])  # devices=[]: no local GPU, the servers only
    # the last layer and the output head served through one server; the DFlash drafter's layers on
    # this machine's CPU (its logits use the head, on the server)
    g = ps.Generator(target, drafters={"dflash": dflash}, rpc_servers=[ep1], n_gpu_layers=2, drafter_device="CPU", **kw)
    out["devices"] = g.model.devices
    out["head"] = g.model.output_device
    out["drafter_devices"] = g.drafters["dflash"].model.devices
    out["listed"] = [d["name"] for d in ps.devices() if d["backend"] == "RPC"]
    out["plain"] = g.generate(prompt, max_tokens=24).tokens
    r = g.generate(prompt, drafter="dflash", n_max=5, max_tokens=24, reuse_prefix=False)
    out["dflash"] = r.tokens
    out["verify_ms_per_step"] = 1e3 * r.timings["verify"]["seconds"] / r.stats.n_steps
    g.close()
    # every layer and the head on two servers, split 1:3; the drafter on the server without the head
    g = ps.Generator(target, drafters={"dflash": dflash}, rpc_servers=[ep1, ep2], tensor_split=[3, 1],
                     drafter_device="RPC0", **kw)
    out["split_devices"] = g.model.devices
    out["split_head"] = g.model.output_device
    out["split_drafter_devices"] = g.drafters["dflash"].model.devices
    out["split"] = g.generate(prompt, max_tokens=24).tokens
    out["split_dflash"] = g.generate(prompt, drafter="dflash", n_max=5, max_tokens=24, reuse_prefix=False).tokens
    g.close()
print("RESULT " + json.dumps(out))
"""


def test_target_layers_served_over_loopback(tiny, tiny_gen, tmp_path):
    _server_or_skip()
    ref_plain = tiny_gen.generate(PROMPT, max_tokens=24, reuse_prefix=False)
    ref = tiny_gen.generate(PROMPT, drafter="dflash", n_max=5, max_tokens=24, reuse_prefix=False)
    out = child_result(CHILD, tiny["target"], tiny["dflash"], PROMPT, cwd=tmp_path)
    assert out["devices"] == ["RPC0"] and out["listed"] == ["RPC0"] and out["head"] == "RPC0"
    assert out["drafter_devices"] == []  # its layers on the CPU (the head's device is still in its list)
    assert out["split_devices"] == ["RPC0", "RPC1"] and out["split_head"] == "RPC1"
    assert out["split_drafter_devices"] == ["RPC0", "RPC1"]  # its layers on RPC0, the head on RPC1
    assert out["plain"] == out["split"] and out["dflash"] == out["split_dflash"]  # CPU on both servers
    assert_same_tokens(out["plain"], ref_plain.tokens)  # (exact unless the local run was on a GPU)
    assert_same_tokens(out["dflash"], ref.tokens)
    print(f"loopback RPC: verify {out['verify_ms_per_step']:.2f} ms/step (local: "
          f"{1e3 * ref.timings['verify']['seconds'] / ref.stats.n_steps:.2f})")


TAPS_CHILD = r"""
import json, sys
import numpy as np
import pyllama_spec as ps
from pyllama_spec import rpc
target, prompt = sys.argv[1:3]
with rpc.local_server(threads=1, lifetime=240, devices=["CPU"]) as ep:
    # the last two layers and the head on the server: the graph has splits, and the server's split reads copies of
    # this machine's tensors (ggml_backend_sched_split_graph points the nodes' sources at those copies)
    g = ps.Generator(target, rpc_servers=[ep], n_gpu_layers=2, devices=[], n_ctx=256, n_batch=64, n_ubatch=32)
    ctx, emb = g.ctx, g.model.token_embeddings()
    toks = g.model.vocab.tokenize(prompt)[:10]
    ctx.set_layer_inputs([0, 3])
    ref, ref3 = [], []
    for i, t in enumerate(toks):
        ctx.decode([t], [i])
        ref.append(ctx.logits()[0].copy())
        ref3.append(ctx.layer_input(3).copy())
    # the batches of the last check below, with the taps on throughout: a row computed in a batch of 4 is compared with
    # a row of such a batch (the CPU kernels need not give a row the same bits in a batch as alone: on an AMD EPYC the
    # 4-row batch's layer-3 input differs from the rows decoded one by one by 7e-4)
    ctx.memory.clear()
    ctx.decode(toks[:1], [0])
    ctx.decode(toks[1:5], [1, 2, 3, 4], logits="all")
    ctx.decode(toks[5:9], [5, 6, 7, 8], logits="all")
    refb3, refbl = ctx.layer_input(3).copy(), ctx.logits().copy()
    batch_rows = float(np.abs(refb3 - np.concatenate(ref3[5:9])).max())  # (the batch against the rows, loosely)
    ctx.memory.clear()
    ctx.set_layer_inputs([])
    dl, d0, d3 = [], [], []
    for i, t in enumerate(toks):
        ctx.set_layer_inputs([0, 3] if i in (2, 3, 6, 7, 9) else [])
        ctx.decode([t], [i])
        dl.append(float(np.abs(ctx.logits()[0] - ref[i]).max()))
        if i in (2, 3, 6, 7, 9):
            d0.append(float(np.abs(ctx.layer_input(0) - emb[[t]]).max()))
            d3.append(float(np.abs(ctx.layer_input(3) - ref3[i]).max()))
    # a plan made without the taps for a larger graph, then the taps on for that shape (the reviewer's case)
    ctx.memory.clear()
    ctx.set_layer_inputs([0, 3])
    ctx.decode(toks[:1], [0])
    ctx.set_layer_inputs([])
    ctx.decode(toks[1:5], [1, 2, 3, 4], logits="all")
    ctx.set_layer_inputs([0, 3])
    ctx.decode(toks[5:9], [5, 6, 7, 8], logits="all")
    d0.append(float(np.abs(ctx.layer_input(0) - emb[toks[5:9]]).max()))
    d3.append(float(np.abs(ctx.layer_input(3) - refb3).max()))
    dl.append(float(np.abs(ctx.logits() - refbl).max()))
    g.close()
print("RESULT " + json.dumps({"logits": dl, "tap0": d0, "tap3": d3, "batch_rows": batch_rows}))
"""


def test_taps_switched_with_the_graph_split_over_two_backends(tiny, tmp_path):
    """Patch 0016 plans a graph's allocation when a tap goes on; with a split graph (here: layers on an RPC server;
    on a GPU: the host's inputs) planning and allocating one graph object faulted on CUDA. The taps and logits of
    decodes with switches equal those of decodes without."""
    _server_or_skip()
    out = child_result(TAPS_CHILD, tiny["target"], PROMPT, cwd=tmp_path)
    assert len(out["tap0"]) == len(out["tap3"]) == 6 and len(out["logits"]) == 11
    assert max(out["tap0"]) < 1e-6 and max(out["tap3"]) < 1e-5 and max(out["logits"]) < 1e-4, out
    assert out["batch_rows"] < 1e-2, out  # (7e-4 on an AMD EPYC, 0 on the Intel Xeon with AMX)


SAMPLER_CHILD = r"""
import json, sys
import numpy as np
import pyllama_spec as ps
from pyllama_spec import rpc
from pyllama_spec.sampler import SamplerChain
target, prompt = sys.argv[1:3]
with rpc.local_server(threads=1, lifetime=240, devices=["CPU"]) as ep:
    g = ps.Generator(target, rpc_servers=[ep], n_gpu_layers=2, devices=[], n_ctx=256, n_batch=64, n_ubatch=32)
    ctx = g.ctx
    toks = g.model.vocab.tokenize(prompt)[:13]
    ref = []
    for i, t in enumerate(toks[:9]):
        ctx.decode([t], [i])
        ref.append(ctx.logits()[0].copy())
    ctx.decode(toks[9:13], [9, 10, 11, 12], logits="all")
    ref4 = ctx.logits().copy()
    ctx.memory.clear()
    dl, drawn, want = [], [], []
    on = (1, 2, 5, 6, 8)
    for i, t in enumerate(toks[:9]):
        if (i in on) != bool(ctx._samplers) or i == 6:
            ctx.set_sampler(SamplerChain() if i in on else None)
        ctx.decode([t], [i])
        if i in on:
            drawn += ctx.sampled_tokens(1)
            want.append(int(np.argmax(ref[i])))
        else:
            dl.append(float(np.abs(ctx.logits()[0] - ref[i]).max()))
    for _ in range(2):  # a plan made without the chain for a larger graph, then the chain on for that shape
        ctx.memory.seq_rm(0, 9)
        ctx.set_sampler(None)
        ctx.decode(toks[9:13], [9, 10, 11, 12], logits="all")
        dl.append(float(np.abs(ctx.logits() - ref4).max()))
        ctx.memory.seq_rm(0, 9)
        ctx.set_sampler(SamplerChain())
        ctx.decode(toks[9:13], [9, 10, 11, 12], logits="all")
        drawn += ctx.sampled_tokens(4)
        want += np.argmax(ref4, axis=1).tolist()
    ctx.set_sampler(None)
    g.close()
print("RESULT " + json.dumps({"logits": dl, "drawn": drawn, "want": want}))
"""


def test_a_sampler_switched_with_the_graph_split_over_two_backends(tiny, tmp_path):
    """Patch 0017 drops the graph on a sampler switch and lets the allocator plan the new one; with a split graph (the
    last layers on an RPC server) the draws of a greedy chain and the logits without one equal those of decodes
    without switches."""
    _server_or_skip()
    out = child_result(SAMPLER_CHILD, tiny["target"], PROMPT, cwd=tmp_path)
    assert len(out["logits"]) == 6 and len(out["drawn"]) == 5 + 8
    assert out["drawn"] == out["want"] and max(out["logits"]) < 1e-4, out
