"""Hatchling build hook: generates the protobuf/gRPC modules (gen_protos.py) at build time.

Editable wheel (pip install -e): generates in place, into ctxguard/ (git-ignored).
Wheel: generates into a temporary copy of the layout and force-includes the files under
ctxguard/_proto/ and ctxguard/_rpc/ (they are never committed, and .gitignore'd in-tree).
Sdist: copies the .proto files in under proto/ so that a wheel built from the sdist finds
them without the repository around it.
"""

import importlib.util
import os
import shutil
import sys
import tempfile

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


def _load_gen(root):
    spec = importlib.util.spec_from_file_location("ctxguard_gen_protos",
                                                  os.path.join(root, "gen_protos.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class CustomBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version, build_data):
        self._version = version
        gen = _load_gen(self.root)
        self._tmp = tempfile.mkdtemp(prefix="ctxguard_build_")
        try:
            if self.target_name == "sdist":
                self._sdist(gen, build_data)
            else:
                self._wheel(gen, build_data)
        except gen.GenerateError as e:
            raise RuntimeError(f"ctxguard build: {e}") from None

    def _sdist(self, gen, build_data):
        proto_dir = gen.find_proto_dir(self.root)
        for name in sorted(os.listdir(os.path.join(proto_dir, "ctxguard", "v1"))):
            if name.endswith(".proto"):
                build_data["force_include"][os.path.join(proto_dir, "ctxguard", "v1", name)] = \
                    f"proto/ctxguard/v1/{name}"
        gapis = gen.find_googleapis_dir(self.root)
        if gapis is not None:
            for name in gen.RPC_FILES:
                build_data["force_include"][os.path.join(gapis, "google", "rpc", name)] = \
                    f"proto/google/rpc/{name}"

    def _wheel(self, gen, build_data):
        if self.target_name == "wheel" and self.version_is_editable():
            # An editable install imports the source folder: generate in place there
            # (git-ignored), where `import ctxguard` will find the modules.
            gen.generate(os.path.join(self.root, "ctxguard"), root=self.root,
                         python=sys.executable)
            return
        out_pkg = os.path.join(self._tmp, "ctxguard")
        os.makedirs(out_pkg)
        for rel in gen.generate(out_pkg, root=self.root, python=sys.executable):
            build_data["force_include"][os.path.join(out_pkg, rel)] = f"ctxguard/{rel}"

    def version_is_editable(self):
        return getattr(self, "_version", "") == "editable"

    def finalize(self, version, build_data, artifact_path):
        shutil.rmtree(getattr(self, "_tmp", ""), ignore_errors=True)
