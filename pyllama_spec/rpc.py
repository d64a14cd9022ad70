"""llama.cpp's RPC backend: layers of a model on other machines.

A machine lends its CPU or GPUs by running ``ggml-rpc-server`` (built with the package,
``PYLLAMA_SPEC_RPC=ON``; ``python -m pyllama_spec.rpc serve --host 0.0.0.0 --port 50052``);
a process that loads a model adds the servers (:func:`add_server`, or
``Generator(..., rpc_servers=["host:port"])``), each of which then appears as a device
(``"RPC0"``, … with the endpoint as description) that layers can be offloaded to like a GPU
(:mod:`pyllama_spec.placement`). Every decode then sends the activations over TCP to each
server holding layers and back (llama.cpp's ``ggml-rpc.cpp``: the graph is computed remotely,
weights stay there once loaded).

Two facts of the pinned llama.cpp that this module guards against:

* ggml-rpc *aborts the process* when it cannot connect or the handshake fails, so
  :func:`add_server` first connects from Python and checks the server's protocol version;
* a server serves one client at a time (the next waits until the first disconnects).

The RPC server has no authentication and runs what it is sent: never expose it beyond a trusted
network (bind it to a private interface; llama.cpp prints the same warning).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

from . import backend
from ._bin import find_program
from ._ffi import lib
from .errors import InvalidArgumentError, UnsupportedError

#: the protocol ggml-rpc of the pinned llama.cpp speaks (ggml/include/ggml-rpc.h)
PROTO_MAJOR, PROTO_MINOR = 7, 0
_HELLO = 14          # RPC_CMD_HELLO
_CAPS = 24           # RPC_CONN_CAPS_SIZE: transport capabilities (zeros: plain TCP)
_lock = threading.Lock()
_added: dict[str, list[str]] = {}  # endpoint -> device names (llama.cpp registers each endpoint once)


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """``"host:port"`` → ``(host, port)``.

    Raises:
        InvalidArgumentError: not ``host:port`` with a port in 1..65535.
    """
    if not isinstance(endpoint, str) or ":" not in endpoint:
        raise InvalidArgumentError(f"an RPC server is given as 'host:port', got {endpoint!r}")
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidArgumentError(f"an RPC server is given as 'host:port' with a port in 1..65535, got {endpoint!r}")
    return host, int(port)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        buf += chunk
    return buf


def probe(endpoint: str, timeout: float = 5.0) -> tuple[int, int, int]:
    """Connect to an RPC server and do its handshake (``RPC_CMD_HELLO``); returns its protocol
    version ``(major, minor, patch)``.

    Raises:
        InvalidArgumentError: a malformed endpoint.
        ConnectionError: nothing answers, or not an RPC server (the message says which).
    """
    host, port = parse_endpoint(endpoint)
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(bytes([_HELLO]) + struct.pack("<Q", _CAPS) + bytes(_CAPS))
            size = struct.unpack("<Q", _recv_exact(s, 8))[0]
            if size != 4 + _CAPS:
                raise ConnectionError(f"{endpoint} answered the RPC handshake with {size} bytes, expected "
                                      f"{4 + _CAPS}: not a ggml RPC server of protocol {PROTO_MAJOR}.x")
            rsp = _recv_exact(s, size)
    except TimeoutError as exc:
        raise ConnectionError(f"{endpoint} accepted the connection but did not answer the RPC handshake within "
                              f"{timeout} s: it may be serving another client (one at a time)") from exc
    except OSError as exc:
        if isinstance(exc, ConnectionError) and "RPC" in str(exc):
            raise
        raise ConnectionError(f"no RPC server answers at {endpoint}: {exc}") from exc
    return rsp[0], rsp[1], rsp[2]


def reachable(endpoint: str, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections at ``endpoint`` (no handshake)."""
    try:
        host, port = parse_endpoint(endpoint)
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except (OSError, InvalidArgumentError):
        return False


def available() -> bool:
    """Whether this build has llama.cpp's RPC backend."""
    backend.ensure_init()
    return bool(lib.llama_supports_rpc())


def add_server(endpoint: str, timeout: float = 5.0) -> list[str]:
    """Make the devices of the RPC server at ``endpoint`` available to models of this process;
    returns their names (``["RPC0"]``), to pass as ``devices=`` (a Generator's ``rpc_servers=``
    does both). Adding an endpoint again returns the same names.

    Raises:
        UnsupportedError: the build has no RPC backend (rebuild with ``PYLLAMA_SPEC_RPC=ON``).
        InvalidArgumentError: a malformed endpoint.
        ConnectionError: the server does not answer, speaks another protocol version, or lends no device.
    """
    parse_endpoint(endpoint)
    with _lock:
        if endpoint in _added:
            return list(_added[endpoint])
        if not available():
            raise UnsupportedError("this build of pyllama_spec has no RPC backend: reinstall with "
                                   "`pip install . -C cmake.define.PYLLAMA_SPEC_RPC=ON`")
        major, minor, patch = probe(endpoint, timeout)
        if major != PROTO_MAJOR or minor > PROTO_MINOR:
            raise ConnectionError(f"the RPC server at {endpoint} speaks protocol {major}.{minor}.{patch}; this "
                                  f"build speaks {PROTO_MAJOR}.{PROTO_MINOR}: run the ggml-rpc-server of the same "
                                  "pyllama_spec/llama.cpp version there")
        before = lib.ggml_backend_dev_count()
        rc = lib.pyls_rpc_add_server(endpoint.encode())
        if rc == -1:
            raise UnsupportedError("this build of pyllama_spec has no RPC backend")
        if rc <= 0:
            raise ConnectionError(f"the RPC server at {endpoint} lends no device (rc {rc})")
        names = [d["name"] for d in backend.device_table()[before:]]
        _added[endpoint] = names
        return list(names)


def server_program():
    """Path of the bundled ``ggml-rpc-server``.

    Raises:
        UnsupportedError: not built (``PYLLAMA_SPEC_RPC=OFF``).
    """
    try:
        return find_program("ggml-rpc-server")
    except UnsupportedError:
        raise UnsupportedError("ggml-rpc-server is not installed: reinstall with "
                               "`pip install . -C cmake.define.PYLLAMA_SPEC_RPC=ON`") from None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def local_server(port: int | None = None, *, host: str = "127.0.0.1", threads: int = 1,
                 devices: list[str] | None = None, lifetime: float = 600.0,
                 start_timeout: float = 30.0) -> Iterator[str]:
    """Run a ``ggml-rpc-server`` on this machine for the duration of a ``with`` block; yields its
    endpoint ``"host:port"``. It is killed on exit, and also ends by itself after ``lifetime``
    seconds (``timeout``), so a crashed caller leaves nothing running.

    Args:
        port: the port (default: a free one).
        host: the address to bind (loopback by default; see the module docstring before changing it).
        threads: CPU threads of its CPU device.
        devices: names of its devices to lend (``-d``; default: all of them).

    Raises:
        UnsupportedError: the server program is not built.
        RuntimeError: it exits before listening (its stderr is in the message).
        TimeoutError: it does not listen within ``start_timeout`` seconds.
    """
    prog = server_program()
    port = free_port(host) if port is None else port
    cmd = [str(prog), "-H", host, "-p", str(port), "-t", str(threads)]
    if devices:
        cmd += ["-d", ",".join(devices)]
    if shutil.which("timeout"):  # coreutils: the server ends by itself after `lifetime` seconds
        cmd = ["timeout", "-s", "KILL", str(int(lifetime)), *cmd]
    # its own process group: the exit below ends `timeout` and the server together
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    endpoint = f"{host}:{port}"
    try:
        deadline = time.monotonic() + start_timeout
        while not reachable(endpoint, 0.2):
            if proc.poll() is not None:
                err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
                raise RuntimeError(f"ggml-rpc-server exited with {proc.returncode}: {err[-1000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"ggml-rpc-server did not listen on {endpoint} within {start_timeout} s")
            time.sleep(0.05)
        yield endpoint
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stderr:
            proc.stderr.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyllama_spec.rpc",
                                 description="llama.cpp's RPC server: lend this machine's CPU/GPUs to a model "
                                             "loaded elsewhere (no authentication: trusted networks only)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sv = sub.add_parser("serve", help="run ggml-rpc-server (arguments after -- go to it unchanged)")
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0: every interface)")
    sv.add_argument("--port", type=int, default=50052)
    sv.add_argument("--threads", type=int, default=None, help="CPU threads of the CPU device")
    sv.add_argument("--device", action="append", default=None, help="a device to lend (repeatable; default all)")
    pr = sub.add_parser("probe", help="check that an RPC server answers, print its protocol version")
    pr.add_argument("endpoint", help="host:port")
    a, rest = ap.parse_known_args(argv)
    if a.cmd == "probe":
        print(".".join(str(v) for v in probe(a.endpoint)))
        return 0
    cmd = [str(server_program()), "-H", a.host, "-p", str(a.port)]
    if a.threads:
        cmd += ["-t", str(a.threads)]
    if a.device:
        cmd += ["-d", ",".join(a.device)]
    cmd += [x for x in rest if x != "--"]
    os.execv(cmd[0], cmd)
    return 0  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
