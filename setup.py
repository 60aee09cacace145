"""The optional C kernels (metadata: pyproject.toml): the river loop's one-record path and the forest's router.

``streamdp/river/_kernel.c`` and ``streamdp/forest/_route.c`` use the CPython C API only. ``optional=True``: a
machine without a C compiler still installs streamdp, and :mod:`streamdp.river.kernel` falls back to the
plain-Python path, :class:`streamdp.forest.routing.ForestRouter` to numpy (same predictions, same leaves).
``-ffp-contract=off``: no fused multiply-add, so the river kernel's floats are the Python path's.
"""

import sys

from setuptools import Extension, setup

args = [] if sys.platform == "win32" else ["-O2", "-ffp-contract=off"]
setup(
    ext_modules=[
        Extension("streamdp.river._kernel", ["streamdp/river/_kernel.c"], extra_compile_args=args, optional=True),
        Extension(
            "streamdp.forest._route",
            ["streamdp/forest/_route.c"],
            extra_compile_args=[] if sys.platform == "win32" else ["-O3"],
            optional=True,
        ),
    ]
)
