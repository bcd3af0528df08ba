"""The gRPC stubs generated from kvstream.proto at build time (setup.py); never committed."""

try:
    from . import kvstream_pb2 as pb  # noqa: F401
    from . import kvstream_pb2_grpc as pb_grpc  # noqa: F401
except ImportError as e:  # pragma: no cover - only in a source checkout that was never built
    raise ImportError(
        "kvstream's generated stubs are missing: install the package (pip install ./client/python) "
        "instead of importing it from the source tree"
    ) from e

__all__ = ["pb", "pb_grpc"]
