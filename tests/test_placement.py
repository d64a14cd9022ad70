"""Device placement arguments (issue 14): checked in Python with messages that name the problem,
before llama.cpp sees them; valid ones load and generate as the default does."""
import pytest

import pyllama_spec as ps
from pyllama_spec.placement import Placement

from .conftest import assert_same_tokens


@pytest.mark.parametrize("kwargs, match", [
    ({"split_mode": "diagonal"}, "split_mode must be one of"),
    ({"n_gpu_layers": -2}, "n_gpu_layers"),
    ({"main_gpu": -1}, "main_gpu"),
    ({"tensor_split": [1, -1]}, "shares ≥ 0"),
    ({"tensor_split": [0, 0]}, "positive share"),
    ({"tensor_split": []}, "positive share"),
    ({"tensor_split": "3,1"}, "list of numbers"),
    ({"tensor_split": [1, float("nan")]}, "shares ≥ 0"),
    ({"devices": "CUDA0"}, "list of device names"),
    ({"devices": [""]}, "list of device names"),
])
def test_bad_values_are_refused(kwargs, match):
    with pytest.raises(ps.InvalidArgumentError, match=match):
        Placement(**kwargs)


def test_checks_against_this_machines_devices():
    names = [d["name"] for d in ps.devices()]
    assert "CPU" in names and all("backend" in d for d in ps.devices())
    with pytest.raises(ps.InvalidArgumentError, match=r"unknown device\(s\) \['CUDA7'\]; this machine has: .*CPU"):
        Placement(devices=["CUDA7"]).resolve()
    local = [d["name"] for d in ps.devices() if d["type"] == "gpu" and d["backend"] != "RPC"]
    n = len(local)
    with pytest.raises(ps.InvalidArgumentError, match="tensor_split has 3 shares|no device to split over"):
        Placement(tensor_split=[1, 1, 1] + [1] * max(0, n - 2)).resolve()
    with pytest.raises(ps.InvalidArgumentError, match=f"main_gpu={max(1, n)} but the device list has {n}"):
        Placement(main_gpu=max(1, n)).resolve()
    if not any(d["backend"] == "CUDA" for d in ps.devices()):
        with pytest.raises(ps.UnsupportedError, match="row"):
            Placement(split_mode="row").resolve()
    assert Placement(devices=["CPU"]).resolve() == ([], [])


def test_cpu_device_list_generates_as_the_default(tiny, tiny_gen):
    ref = tiny_gen.generate("where do layers go", drafter="dflash", max_tokens=12, reuse_prefix=False)
    gen = ps.Generator(tiny["target"], drafters={"dflash": tiny["dflash"]}, n_ctx=1024, n_batch=64, n_ubatch=32,
                       devices=["CPU"], split_mode="none", drafter_device="CPU")
    try:
        assert gen.model.devices == [] and gen.drafters["dflash"].model.devices == []
        r = gen.generate("where do layers go", drafter="dflash", max_tokens=12)
        assert_same_tokens(r.tokens, ref.tokens)
    finally:
        gen.close()


def test_generator_and_drafter_devices_are_checked(tiny):
    with pytest.raises(ps.InvalidArgumentError, match="unknown device"):
        ps.Generator(tiny["target"], n_ctx=256, devices=["GPU9"])
    with pytest.raises(ps.InvalidArgumentError, match="unknown device"):
        ps.Generator(tiny["target"], drafters={"dflash": tiny["dflash"]}, n_ctx=256, drafter_device={"dflash": "X1"})
    with pytest.raises(ps.InvalidArgumentError, match="drafter_device"):
        ps.Generator(tiny["target"], n_ctx=256, drafter_device=3)
    with pytest.raises(ps.InvalidArgumentError, match="rpc_servers"):
        ps.Generator(tiny["target"], n_ctx=256, rpc_servers="127.0.0.1:1")
    with pytest.raises(ps.InvalidArgumentError, match="host:port"):
        ps.Generator(tiny["target"], n_ctx=256, rpc_servers=["no-port"])
    with pytest.raises(ps.InvalidArgumentError, match="main_gpu"):
        ps.Model(tiny["target"], main_gpu=7)
