"""The generated protobuf and gRPC modules (made at build time by gen_protos.py)."""

from types import ModuleType
from typing import Optional

try:
    from ._proto.ctxguard.v1 import admin_pb2, admin_pb2_grpc  # noqa: F401
    from ._proto.ctxguard.v1 import budget_pb2, budget_pb2_grpc  # noqa: F401
    from ._proto.ctxguard.v1 import common_pb2  # noqa: F401
    from ._proto.ctxguard.v1 import context_pb2, context_pb2_grpc  # noqa: F401
except ImportError as e:  # pragma: no cover - a source tree without generated modules
    raise ImportError(
        "ctxguard: the generated protobuf modules (ctxguard/_proto) are missing: install the "
        "package (pip install ./client/python) or generate them in place with "
        "`python3 client/python/gen_protos.py`") from e

status_pb2: Optional[ModuleType]
error_details_pb2: Optional[ModuleType]
try:
    # Generated from google/rpc/*.proto under a private proto package (gen_protos.py).
    from ._rpc import error_details_pb2, status_pb2  # type: ignore[no-redef]
except ImportError:  # built without the googleapis protos
    try:
        from google.rpc import error_details_pb2, status_pb2  # type: ignore[no-redef]
    except ImportError:
        status_pb2 = None
        error_details_pb2 = None
