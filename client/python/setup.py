"""Build hook: generates the protobuf messages and gRPC stubs from kvstream.proto in the build.

The proto's home is ../../proto/kvstream.proto (outside this directory). It is copied into
kvstream/_proto/ before building or making an sdist, so that an sdist (or any build from a copy
of this directory) carries it. Nothing generated is committed.

Generation runs protoc and grpc_python_plugin (Debian: protobuf-compiler, protobuf-compiler-grpc;
or $PROTOC and $GRPC_PYTHON_PLUGIN), so building needs no network and nothing from PyPI besides
setuptools: `pip wheel --no-build-isolation ./client/python` works offline. The proto is compiled
under its package path (kvstream/_proto/kvstream.proto), so the stubs import their messages as
`kvstream._proto.kvstream_pb2` as generated, with nothing rewritten. protoc 3.21's code carries no
runtime version guards and runs on protobuf >= 4.21 and grpcio >= 1.51 (the package's floors, and
Debian 12's own python3-protobuf and python3-grpcio, on which tests/packaging/wheel_test.sh runs it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
REPO_PROTO = HERE.parent.parent / "proto" / "kvstream.proto"
PROTO_PACKAGE = ("kvstream", "_proto")
PACKAGED_PROTO = HERE.joinpath(*PROTO_PACKAGE, "kvstream.proto")
GENERATED = ("kvstream_pb2.py", "kvstream_pb2_grpc.py", "kvstream_pb2.pyi")


def sync_proto() -> Path:
    """Copies the repository's proto into the package (when building in the tree); returns the proto to use."""
    if REPO_PROTO.is_file():
        if not PACKAGED_PROTO.is_file() or PACKAGED_PROTO.read_bytes() != REPO_PROTO.read_bytes():
            shutil.copyfile(REPO_PROTO, PACKAGED_PROTO)
    if not PACKAGED_PROTO.is_file():
        raise RuntimeError(f"kvstream.proto not found at {REPO_PROTO} nor at {PACKAGED_PROTO}")
    return PACKAGED_PROTO


def tool(variable: str, name: str, package: str) -> str:
    """The path of a code generator: $variable, else `name` on PATH; a clear error naming its package."""
    path = os.environ.get(variable) or shutil.which(name)
    if not path:
        raise RuntimeError(f"building kvstream needs {name} (Debian: apt install {package}; or set {variable})")
    return path


def generate(proto: Path, out_root: Path) -> None:
    """Writes kvstream_pb2.py, kvstream_pb2_grpc.py and kvstream_pb2.pyi under out_root/kvstream/_proto."""
    protoc = tool("PROTOC", "protoc", "protobuf-compiler")
    plugin = tool("GRPC_PYTHON_PLUGIN", "grpc_python_plugin", "protobuf-compiler-grpc")
    relative = Path(*PROTO_PACKAGE, "kvstream.proto")
    with tempfile.TemporaryDirectory() as include:
        # The proto under its package path, so that protoc names the modules by it.
        (Path(include) / relative).parent.mkdir(parents=True)
        shutil.copyfile(proto, Path(include) / relative)
        out_root.joinpath(*PROTO_PACKAGE).mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [protoc, f"-I{include}", f"--plugin=protoc-gen-grpc_python={plugin}",
             f"--python_out={out_root}", f"--pyi_out={out_root}", f"--grpc_python_out={out_root}",
             str(relative)],
            check=True,
        )
    pb2 = out_root.joinpath(*PROTO_PACKAGE, "kvstream_pb2.py").read_text()
    if "ValidateProtobufRuntimeVersion" in pb2:  # protoc >= 26 pins the runtime to its own version
        version = subprocess.run([protoc, "--version"], capture_output=True, text=True).stdout.strip()
        print(f"kvstream: {version} generates code that needs a protobuf runtime of its own version or newer, "
              "above this package's floor of protobuf 4.21 (protoc 3.21, Debian 12's, does not)")


class BuildPyWithProto(build_py):
    """build_py that also generates the modules (into the build dir, or the source dir when editable)."""

    def run(self) -> None:
        proto = sync_proto()
        super().run()
        generate(proto, HERE if getattr(self, "editable_mode", False) else Path(self.build_lib))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        generated = [str(Path(self.build_lib).joinpath(*PROTO_PACKAGE, name)) for name in GENERATED]
        return super().get_outputs(include_bytecode) + generated


class SdistWithProto(sdist):
    """sdist that carries the proto inside the package (it lives outside this directory)."""

    def run(self) -> None:
        sync_proto()
        super().run()


setup(cmdclass={"build_py": BuildPyWithProto, "sdist": SdistWithProto})
