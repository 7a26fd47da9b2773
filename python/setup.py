"""Packages basalt's Python package for pip (and, with BASALT_ORT_ALIAS=1, the onnxruntime alias).

The native core is not compiled by setuptools: CMake builds it with the rest of basalt (`make build`
puts it in build/python/basalt/). This build_ext copies that file into the wheel, and runs CMake +
Ninja for the module first when no build of it exists for this interpreter. BASALT_BUILD names
another build folder (absolute, or relative to the repository root; default build/).

BASALT_ORT_ALIAS=1 also installs the package `onnxruntime` (python/onnxruntime/), which re-exports
basalt under onnxruntime's names: install it only where no real onnxruntime is installed.
"""
import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class PrebuiltExtension(build_ext):
    def build_extension(self, ext):
        # pip runs this from python/, so a relative BASALT_BUILD is taken from the repository root
        build = os.path.join(ROOT, os.environ.get("BASALT_BUILD", "build"))
        so = os.path.join(build, "python", "basalt", "_native" + sysconfig.get_config_var("EXT_SUFFIX"))
        if not os.path.exists(so):
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                                   f"-DPython3_EXECUTABLE={sys.executable}"])
            subprocess.check_call(["ninja", "-C", build, "basalt_python"])
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(so, dest)


packages = ["basalt"]
if os.environ.get("BASALT_ORT_ALIAS") == "1":
    packages += ["onnxruntime", "onnxruntime.capi"]

setup(
    name="basalt",
    version="0.1.0",
    description="basalt: an ONNX inference runtime for CPUs, with onnxruntime's Python API",
    packages=packages,
    ext_modules=[Extension("basalt._native", sources=[])],
    cmdclass={"build_ext": PrebuiltExtension},
    python_requires=">=3.9",
    install_requires=["numpy"],
    zip_safe=False,
)
