"""Build hooks: generate the gRPC stubs from kvstream.proto when the package is built.

The proto's home is ../../proto/kvstream.proto (outside this directory). It is copied into
kvstream/_proto/ before building or making an sdist, so that an sdist (or any build from a copy
of this directory) carries it. Nothing generated is committed.

The generated modules are rewritten so that they work inside the package and with older
runtimes than the generator:
  * `import kvstream_pb2` in the _grpc module becomes a relative import;
  * the protobuf gencode's `ValidateProtobufRuntimeVersion` guard and the gRPC gencode's
    `GRPC_GENERATED_VERSION` guard are removed (they pin the runtime to >= the generator,
    which would defeat the loose `grpcio>=1.51, protobuf>=4.21` bounds);
  * `_registered_method=True` and `add_registered_method_handlers` (grpcio >= 1.63 only) are
    used only where grpcio has them.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
REPO_PROTO = HERE.parent.parent / "proto" / "kvstream.proto"
PACKAGED_PROTO = HERE / "kvstream" / "_proto" / "kvstream.proto"
PROTO_PACKAGE = ("kvstream", "_proto")


def sync_proto() -> Path:
    """Copies the repository's proto into the package (when building in the tree); returns the proto to use."""
    if REPO_PROTO.is_file():
        if not PACKAGED_PROTO.is_file() or PACKAGED_PROTO.read_bytes() != REPO_PROTO.read_bytes():
            shutil.copyfile(REPO_PROTO, PACKAGED_PROTO)
    if not PACKAGED_PROTO.is_file():
        raise RuntimeError(f"kvstream.proto not found at {REPO_PROTO} nor at {PACKAGED_PROTO}")
    return PACKAGED_PROTO


_GRPC_GUARD = re.compile(r"\nGRPC_GENERATED_VERSION = .*?\n\s*\)\n", re.S)
_PB_GUARD = re.compile(r"_runtime_version\.ValidateProtobufRuntimeVersion\(.*?\n\)\n", re.S)
_REGISTERED_SHIM = '''
def _registered() -> dict:
    """Registered methods where grpcio has them (>= 1.63), nothing before."""
    try:
        version = tuple(int(p) for p in grpc.__version__.split(".")[:2])
    except ValueError:
        return {}
    return {"_registered_method": True} if version >= (1, 63) else {}


_REGISTERED = _registered()
'''


def rewrite_pb2(text: str) -> str:
    """Drops the protobuf runtime version guard."""
    text = text.replace("from google.protobuf import runtime_version as _runtime_version\n", "")
    return _PB_GUARD.sub("", text)


def rewrite_pb2_grpc(text: str) -> str:
    """Makes the _grpc module import its messages relatively and accept older grpcio."""
    text = text.replace("import kvstream_pb2 as kvstream__pb2", "from . import kvstream_pb2 as kvstream__pb2")
    text = _GRPC_GUARD.sub(_REGISTERED_SHIM, text, count=1)
    text = text.replace("_registered_method=True)", "**_REGISTERED)")
    # The experimental static helpers pass it by keyword as well.
    text = text.replace("_registered_method=True,", "**_REGISTERED,")
    text = text.replace(
        "    server.add_registered_method_handlers(",
        "    if hasattr(server, \"add_registered_method_handlers\"):\n        server.add_registered_method_handlers(",
    )
    return text


def generate(proto: Path, out_dir: Path) -> None:
    """Runs grpc_tools.protoc on `proto` into `out_dir` (kvstream_pb2.py, kvstream_pb2_grpc.py, .pyi)."""
    from grpc_tools import protoc  # a build requirement (pyproject.toml)
    import importlib.resources as resources

    out_dir.mkdir(parents=True, exist_ok=True)
    include = str(resources.files("grpc_tools") / "_proto")  # well-known types
    args = [
        "grpc_tools.protoc",
        f"-I{proto.parent}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        proto.name,
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {proto}")
    pb2 = out_dir / "kvstream_pb2.py"
    pb2_grpc = out_dir / "kvstream_pb2_grpc.py"
    pb2.write_text(rewrite_pb2(pb2.read_text()))
    pb2_grpc.write_text(rewrite_pb2_grpc(pb2_grpc.read_text()))
    grpc_text, pb2_text = pb2_grpc.read_text(), pb2.read_text()
    leftover = [g for g in ("_registered_method=True", "GRPC_GENERATED_VERSION") if g in grpc_text]
    leftover += ["absolute import of kvstream_pb2"] if re.search(r"^import kvstream_pb2", grpc_text, re.M) else []
    leftover += [g for g in ("ValidateProtobufRuntimeVersion",) if g in pb2_text]
    if leftover:
        raise RuntimeError(f"the generated code changed shape ({leftover} left); update the rewrites in setup.py")


class BuildPyWithProto(build_py):
    """build_py that also generates the stubs (into the build dir, or the source dir when editable)."""

    def run(self) -> None:
        proto = sync_proto()
        super().run()
        if getattr(self, "editable_mode", False):
            generate(proto, HERE.joinpath(*PROTO_PACKAGE))
        else:
            generate(proto, Path(self.build_lib).joinpath(*PROTO_PACKAGE))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        generated = [
            str(Path(self.build_lib).joinpath(*PROTO_PACKAGE, name))
            for name in ("kvstream_pb2.py", "kvstream_pb2_grpc.py", "kvstream_pb2.pyi")
        ]
        return super().get_outputs(include_bytecode) + generated


class SdistWithProto(sdist):
    """sdist that carries the proto inside the package (it lives outside this directory)."""

    def run(self) -> None:
        sync_proto()
        super().run()


setup(cmdclass={"build_py": BuildPyWithProto, "sdist": SdistWithProto})
