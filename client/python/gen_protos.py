"""Generates the ctxguard package's protobuf and gRPC modules (used by hatch_build.py and
the tests; never committed).

    python3 gen_protos.py [OUT_PACKAGE_DIR]   (default: ./ctxguard, next to this file)

Writes, under OUT_PACKAGE_DIR:
- _proto/ctxguard/v1/{admin,budget,common,context}_pb2.py (+ .pyi) and *_pb2_grpc.py: messages from
  the system `protoc` (matching the installed protobuf runtime), service stubs from
  grpc_tools (used for --grpc_python_out only: Debian's bundles an old protoc); their
  `from ctxguard.v1 import` lines are rewritten to `from ctxguard._proto.ctxguard.v1 import`
  so that they work inside the package;
- _rpc/{status,error_details}_pb2.py: google.rpc.Status, ErrorInfo, BadRequest, RetryInfo,
  ... from the googleapis protos (Debian: golang-github-gogo-googleapis-dev), renamed to
  the private proto package `ctxguard_python_sdk.rpc` (file names ctxguard/_rpc/*.proto) so
  that they never clash with googleapis-common-protos in the same process. The wire format
  does not depend on the package name. Optional: without them the client maps errors by
  status code only.

Where the .proto files come from, first found wins:
- ctxguard: $CTXGUARD_PROTO_DIR, ./proto (an sdist), ../../proto (the repository);
- google/rpc: $CTXGUARD_GOOGLEAPIS_DIR, ./proto (an sdist), the Debian package's folder.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEBIAN_GOOGLEAPIS = "/usr/share/gocode/src/github.com/gogo/googleapis"
RPC_FILES = ("status.proto", "error_details.proto")
RPC_PACKAGE = "ctxguard_python_sdk.rpc"


class GenerateError(RuntimeError):
    pass


def find_proto_dir(root=HERE):
    """The folder holding ctxguard/v1/*.proto."""
    candidates = [os.environ.get("CTXGUARD_PROTO_DIR", ""), os.path.join(root, "proto"),
                  os.path.join(root, "..", "..", "proto")]
    for c in candidates:
        if c and os.path.isfile(os.path.join(c, "ctxguard", "v1", "budget.proto")):
            return os.path.normpath(c)
    raise GenerateError(
        "ctxguard's .proto files were not found (looked for ctxguard/v1/budget.proto under "
        + ", ".join(os.path.normpath(c) for c in candidates if c)
        + "): build from the repository's client/python (protos at ../../proto), from an "
        "sdist made by `python3 -m build` (protos copied in), or set CTXGUARD_PROTO_DIR")


def find_googleapis_dir(root=HERE):
    """The folder holding google/rpc/status.proto and error_details.proto, or None."""
    for c in (os.environ.get("CTXGUARD_GOOGLEAPIS_DIR", ""), os.path.join(root, "proto"),
              DEBIAN_GOOGLEAPIS):
        if c and all(os.path.isfile(os.path.join(c, "google", "rpc", f)) for f in RPC_FILES):
            return os.path.normpath(c)
    return None


def _run(argv, what):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise GenerateError(f"{what} failed (exit {r.returncode}): {' '.join(argv)}\n{r.stderr}")


def _protoc():
    protoc = shutil.which("protoc")
    if protoc is None:
        raise GenerateError("`protoc` not found: install protobuf-compiler (Debian) "
                            "to build the ctxguard package")
    return protoc


def _write_init(path, doc):
    with open(path, "w") as f:
        f.write(f'"""{doc}"""\n')


def generate(out_pkg=os.path.join(HERE, "ctxguard"), root=HERE, python=sys.executable):
    """Generates the modules into out_pkg (the `ctxguard` package folder). Returns the list
    of files written, relative to out_pkg. Raises GenerateError with what is missing."""
    proto_dir = find_proto_dir(root)
    protos = sorted(os.path.join("ctxguard", "v1", f)
                    for f in os.listdir(os.path.join(proto_dir, "ctxguard", "v1"))
                    if f.endswith(".proto"))
    protoc = _protoc()
    written = []
    with tempfile.TemporaryDirectory(prefix="ctxguard_gen_") as tmp:
        gen = os.path.join(tmp, "out")
        os.makedirs(gen)
        # .pyi stubs too (protoc >= 3.20), so that type checkers see the message classes.
        _run([protoc, "-I", proto_dir, f"--python_out={gen}", f"--pyi_out={gen}"] + protos,
             "protoc --python_out --pyi_out")
        try:
            _run([python, "-m", "grpc_tools.protoc", "-I", proto_dir,
                  f"--grpc_python_out={gen}"] + protos, "grpc_tools.protoc --grpc_python_out")
        except GenerateError as e:
            if "No module named grpc_tools" in str(e):
                raise GenerateError(f"grpc_tools is not importable by {python}: install "
                                    "python3-grpc-tools (Debian) or grpcio-tools") from None
            raise

        dest = os.path.join(out_pkg, "_proto", "ctxguard", "v1")
        if os.path.isdir(os.path.join(out_pkg, "_proto")):
            shutil.rmtree(os.path.join(out_pkg, "_proto"))
        os.makedirs(dest)
        _write_init(os.path.join(out_pkg, "_proto", "__init__.py"), "Generated; do not edit.")
        _write_init(os.path.join(out_pkg, "_proto", "ctxguard", "__init__.py"), "Generated.")
        _write_init(os.path.join(dest, "__init__.py"), "Generated.")
        written += ["_proto/__init__.py", "_proto/ctxguard/__init__.py",
                    "_proto/ctxguard/v1/__init__.py"]
        src = os.path.join(gen, "ctxguard", "v1")
        for name in sorted(os.listdir(src)):
            if not name.endswith((".py", ".pyi")):
                continue
            with open(os.path.join(src, name)) as f:
                text = f.read()
            text = re.sub(r"^from ctxguard\.v1 import ", "from ctxguard._proto.ctxguard.v1 import ",
                          text, flags=re.M)
            if re.search(r"^(from|import) ctxguard\.v1\b", text, flags=re.M):
                raise GenerateError(f"{name}: an import of ctxguard.v1 was left unrewritten")
            with open(os.path.join(dest, name), "w") as f:
                f.write(text)
            written.append(f"_proto/ctxguard/v1/{name}")

        rpc_dest = os.path.join(out_pkg, "_rpc")
        if os.path.isdir(rpc_dest):
            shutil.rmtree(rpc_dest)
        gapis = find_googleapis_dir(root)
        if gapis is None:
            print("ctxguard: google/rpc/status.proto not found (install "
                  "golang-github-gogo-googleapis-dev or set CTXGUARD_GOOGLEAPIS_DIR): error "
                  "details will not be decoded, errors are mapped by status code",
                  file=sys.stderr)
            return written
        inc = os.path.join(tmp, "rpc_in")
        os.makedirs(os.path.join(inc, "ctxguard", "_rpc"))
        for f in RPC_FILES:
            with open(os.path.join(gapis, "google", "rpc", f)) as fh:
                text = fh.read()
            text, n = re.subn(r"^package google\.rpc;", f"package {RPC_PACKAGE};", text,
                              flags=re.M)
            if n != 1:
                raise GenerateError(f"{gapis}/google/rpc/{f}: no `package google.rpc;` line")
            # Only the Go/Java/ObjC options refer to the original package; drop them.
            text = re.sub(r"^option (go_package|java_\w+|objc_class_prefix) = .*$", "", text,
                          flags=re.M)
            with open(os.path.join(inc, "ctxguard", "_rpc", f), "w") as fh:
                fh.write(text)
        rgen = os.path.join(tmp, "rpc_out")
        os.makedirs(rgen)
        _run([protoc, "-I", inc] + [os.path.join("ctxguard", "_rpc", f) for f in RPC_FILES]
             + [f"--python_out={rgen}", f"--pyi_out={rgen}"], "protoc --python_out (google/rpc)")
        os.makedirs(rpc_dest)
        _write_init(os.path.join(rpc_dest, "__init__.py"),
                    "Generated: google.rpc error details under a private proto package.")
        written.append("_rpc/__init__.py")
        for name in sorted(os.listdir(os.path.join(rgen, "ctxguard", "_rpc"))):
            if name.endswith((".py", ".pyi")):
                shutil.copy(os.path.join(rgen, "ctxguard", "_rpc", name),
                            os.path.join(rpc_dest, name))
                written.append(f"_rpc/{name}")
    return written


if __name__ == "__main__":
    try:
        out = generate(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "ctxguard"))
    except GenerateError as e:
        sys.exit(f"gen_protos: {e}")
    print("\n".join(out))
