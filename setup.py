"""The optional C kernel of the river loop's one-record path (metadata: pyproject.toml).

``streamdp/river/_kernel.c`` uses the CPython C API only. ``optional=True``: a
machine without a C compiler still installs streamdp, and
:mod:`streamdp.river.kernel` falls back to the plain-Python path (same
predictions). ``-ffp-contract=off``: no fused multiply-add, so the kernel's
floats are the Python path's.
"""

import sys

from setuptools import Extension, setup

args = [] if sys.platform == "win32" else ["-O2", "-ffp-contract=off"]
setup(ext_modules=[Extension("streamdp.river._kernel", ["streamdp/river/_kernel.c"],
                             extra_compile_args=args, optional=True)])
