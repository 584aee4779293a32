"""Other hosts' memory and compute through llama.cpp's RPC backend: `rpc-server` on each host, its devices added here,
a model's layers split over them by llama.cpp (by free memory, or a tensor split). Each server is checked (reached,
same protocol) before llama.cpp is given it, since llama.cpp aborts the process on a server it cannot talk to.

The protocol is not secured: loopback or a trusted network only. A server that goes away in the middle of a decode
still ends the process (llama.cpp aborts there); the abort callback set here turns that into one line on stderr and
exit code EXIT_LOST, after flushing what was printed."""
from __future__ import annotations

import atexit
import ctypes
import functools
import math
import os
import socket
import struct
import sys
import weakref
from typing import Sequence

from ..errors import EdgespecError, InvalidArgument
from .llama import ll

PROTOCOL = (7, 0)  # RPC_PROTO_MAJOR_VERSION, RPC_PROTO_MINOR_VERSION of the vendored llama.cpp (ggml-rpc.h)
HELLO = 14  # RPC_CMD_HELLO, fixed by the protocol for every version
CAPS = 24  # RPC_CONN_CAPS_SIZE: the transport capabilities a HELLO carries (none asked for here)
EXIT_LOST = 75  # a host of --rpc went away mid-decode (EX_TEMPFAIL: try again once it is back)
DEFAULT_PORT = 50052  # rpc-server's


class RpcError(EdgespecError):
    """An rpc-server cannot be used: not reachable, another protocol, or this build has no RPC backend."""


def parse(spec: str | Sequence[str]) -> list[str]:
    """"HOST:PORT[,HOST:PORT...]" (or a list of them) -> endpoints; a missing port is rpc-server's default."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out = []
    for item in (i.strip() for i in items):
        host, sep, port = item.rpartition(":") if ":" in item else (item, "", str(DEFAULT_PORT))
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidArgument(f"rpc-servers are HOST:PORT[,HOST:PORT...], got {item!r}")
        out.append(f"{host}:{int(port)}")
    if not out:
        raise InvalidArgument("rpc-servers are HOST:PORT[,HOST:PORT...], got nothing")
    if len(set(out)) != len(out):
        raise InvalidArgument(f"an rpc-server is named twice: {','.join(out)}")
    return out


def check(endpoint: str, timeout: float = 5.0) -> tuple[int, int, int]:
    """Connect and say HELLO as llama.cpp does; the server's protocol version, or RpcError saying why not."""
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as s:
            s.sendall(struct.pack("<BQ", HELLO, CAPS) + bytes(CAPS))
            size = struct.unpack("<Q", _recv(s, 8))[0]
            if size < 3 or size > 4096:
                raise RpcError(f"{endpoint} is not an rpc-server this build can talk to (a HELLO answered with "
                               f"{size} bytes)")
            major, minor, patch = _recv(s, size)[:3]
    except RpcError:
        raise
    except socket.timeout:
        raise RpcError(f"rpc-server at {endpoint} did not answer within {timeout:g} s") from None
    except OSError as e:
        raise RpcError(f"cannot reach rpc-server at {endpoint}: {e.strerror or e}") from None
    if major != PROTOCOL[0] or minor > PROTOCOL[1]:
        raise RpcError(f"rpc-server at {endpoint} speaks RPC protocol {major}.{minor}.{patch}, this build "
                       f"{PROTOCOL[0]}.{PROTOCOL[1]}: run the rpc-server built with it (scripts/build-rpc-server.sh)")
    return major, minor, patch


def _recv(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise RpcError(f"the rpc-server at {s.getpeername()[0]} closed the connection during HELLO (another "
                           "protocol version?)")
        data += chunk
    return data


@functools.cache
def _ggml():
    """libggml with the prototypes of the backend-registry calls used here (declared once)."""
    from llama_cpp import _ggml

    lib = _ggml.libggml
    for name, res, args in (("ggml_backend_reg_by_name", ctypes.c_void_p, [ctypes.c_char_p]),
                            ("ggml_backend_reg_get_proc_address", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]),
                            ("ggml_backend_register", None, [ctypes.c_void_p]),
                            ("ggml_backend_reg_dev_count", ctypes.c_size_t, [ctypes.c_void_p]),
                            ("ggml_backend_reg_dev_get", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t]),
                            ("ggml_backend_dev_count", ctypes.c_size_t, []),
                            ("ggml_backend_dev_get", ctypes.c_void_p, [ctypes.c_size_t]),
                            ("ggml_backend_dev_type", ctypes.c_int, [ctypes.c_void_p]),
                            ("ggml_backend_dev_by_type", ctypes.c_void_p, [ctypes.c_int]),
                            ("ggml_backend_dev_buffer_type", ctypes.c_void_p, [ctypes.c_void_p]),
                            ("ggml_set_abort_callback", ctypes.c_void_p, [ctypes.c_void_p])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


_servers: dict[str, list[int]] = {}  # endpoint -> its devices, added once per process
_ADD_SERVER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)
GPU_TYPES = (1, 2)  # GGML_BACKEND_DEVICE_TYPE_GPU, _IGPU


def devices(endpoints: Sequence[str]) -> list[int]:
    """The devices of these servers (each checked first, then added to llama.cpp once per process), in order."""
    lib = _ggml()
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        raise RpcError("this llama-cpp-python was built without the RPC backend: run scripts/setup.sh again "
                       "(it builds it in), or add -DGGML_RPC=ON to your CMAKE_ARGS")
    out = []
    for endpoint in endpoints:
        if endpoint not in _servers:
            check(endpoint)
            add = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_add_server")
            server = _ADD_SERVER(add)(endpoint.encode())
            if not server:
                raise RpcError(f"llama.cpp could not add the rpc-server at {endpoint}")
            lib.ggml_backend_register(server)
            _servers[endpoint] = [lib.ggml_backend_reg_dev_get(server, i)
                                  for i in range(lib.ggml_backend_reg_dev_count(server))]
            _on_abort()
        out += _servers[endpoint]
    return out


def local_devices() -> list[int]:
    """This machine's GPUs (none on a CPU build): where a model not given --rpc goes once servers are added."""
    lib = _ggml()
    remote = {d for ds in _servers.values() for d in ds}
    found = [lib.ggml_backend_dev_get(i) for i in range(lib.ggml_backend_dev_count())]
    return [d for d in found if d not in remote and lib.ggml_backend_dev_type(d) in GPU_TYPES]


class _Override(ctypes.Structure):  # llama_model_tensor_buft_override
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


# The output layer's weights: its norm and its matrix, or the token embedding where the model ties it to the output
# (llama.cpp then gives the output its own copy, named as the embedding; the embedding proper stays here anyway).
OUTPUT_TENSORS = rb"^(output_norm|output|token_embd)\.weight$"


def output_here() -> ctypes.Array:
    """A NULL-terminated llama_model_params.tensor_buft_overrides (kept alive by the caller during the load) that
    keeps the output layer on this machine, on its first GPU or else its CPU. Each decode then brings back
    n_embd floats a row, not the n_vocab logits (bench/rpc_rows.py --output-here: Qwen2.5 6 KB a row instead of 594
    KB; over 1 Gbit/s, a five-row decode as cheap as here), and this machine computes the output matmul."""
    lib = _ggml()
    here = local_devices()
    buft = lib.ggml_backend_dev_buffer_type(here[0] if here else lib.ggml_backend_dev_by_type(0))  # 0: the CPU
    return (_Override * 2)(_Override(OUTPUT_TENSORS, buft), _Override(None, None))


def uses_servers() -> bool:
    return bool(_servers)


def device_list(devs: Sequence[int]) -> ctypes.Array:
    """A NULL-terminated array for llama_model_params.devices (kept alive by the caller during the load)."""
    return (ctypes.c_void_p * (len(devs) + 1))(*devs, None)


def proportions(parts: Sequence[float]) -> list[float]:
    """A tensor split checked: finite, non-negative numbers, not all zero, at most one per device of this build."""
    try:
        values = [float(p) for p in parts]
    except (TypeError, ValueError):
        raise InvalidArgument(f"--tensor-split takes numbers such as 3,1, got {list(parts)!r}") from None
    n = ll.llama_max_devices()
    if len(values) > n:
        raise InvalidArgument(f"--tensor-split has {len(values)} parts, this build splits over at most {n} devices")
    if any(not math.isfinite(p) or p < 0 for p in values) or not sum(values) > 0:
        raise InvalidArgument("--tensor-split takes non-negative proportions, not all zero, e.g. 3,1")
    return values


def tensor_split(values: Sequence[float]) -> ctypes.Array:
    """proportions() as llama_model_params.tensor_split wants them (one float per possible device)."""
    return (ctypes.c_float * ll.llama_max_devices())(*values)


_ABORT = ctypes.CFUNCTYPE(None, ctypes.c_char_p)


@_ABORT
def _aborting(message: bytes) -> None:
    """llama.cpp is about to abort (a server went away mid-decode): flush what was printed, say why in one line,
    and exit with EXIT_LOST rather than dump core."""
    try:
        sys.stdout.flush()
    except Exception:
        pass
    text = (message or b"").decode("utf-8", "replace").strip().splitlines()
    why = text[-1] if text else "llama.cpp aborted"
    where, sep, rest = why.partition(": ")
    if sep and ".c" in where:  # "…/ggml-rpc.cpp:123: what": the what
        why = rest
    lost = "RPC" in why or "rpc" in why
    sys.stderr.write(f"edgespec: {why}" + (" (an rpc-server went away; start it again and rerun)" if lost else "")
                     + "\n")
    sys.stderr.flush()
    os._exit(EXIT_LOST if lost else 70)


def _on_abort() -> None:
    _ggml().ggml_set_abort_callback(ctypes.cast(_aborting, ctypes.c_void_p))


_held: list[weakref.WeakSet] = [weakref.WeakSet(), weakref.WeakSet()]  # contexts, models with memory on servers


def track(thing, model: bool = False) -> None:
    """A context or model holding memory on rpc-servers: freed at exit while Python still runs (freed later, during
    interpreter shutdown, llama.cpp's call to a server that has gone would hang the process)."""
    if not any(_held):
        atexit.register(_free_all)
    _held[model].add(thing)


def _free_all() -> None:
    for group in _held:  # contexts before the models they use
        for thing in list(group):
            thing.close()
