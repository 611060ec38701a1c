"""Builds tlpd-client: the stubs of tlp.v1 (from the repository's proto/) and of the standard
gRPC health service are generated at build time, so they always match the daemon's API."""
import os
import pathlib
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
# The API's proto directory: the repository's proto/ unless TLP_PROTO_DIR says otherwise.
PROTO_ROOT = pathlib.Path(os.environ.get("TLP_PROTO_DIR", HERE.parent.parent / "proto"))


class BuildWithStubs(build_py):
    """build_py, then protoc: Debian's protoc and grpc_python_plugin (grpcio-tools' bundled
    protoc is too old for proto3 `optional`)."""

    def run(self):
        super().run()
        out = pathlib.Path(self.build_lib)
        for root, proto in ((PROTO_ROOT, "tlp/v1/tlp.proto"),
                            (HERE, "tlpd_client/health/v1/health.proto")):
            subprocess.run(
                ["protoc", f"--proto_path={root}", f"--python_out={out}",
                 f"--grpc_python_out={out}",
                 "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin",
                 str(root / proto)],
                check=True)
        for package in ("tlp", "tlp/v1", "tlpd_client/health", "tlpd_client/health/v1"):
            (out / package / "__init__.py").touch()


# Only tlpd_client is a source package; the generated tlp/ and tlpd_client/health/ are written
# into the build directory above and installed with it.
setup(cmdclass={"build_py": BuildWithStubs})
