#!/usr/bin/env python3
"""Run the C kernel's tests under AddressSanitizer: ``python3 .ci/kernel_asan.py [pytest args]``.

Copies the tracked files to a temporary directory, builds ``streamdp/river/_kernel.c`` there with
``-fsanitize=address`` (gcc or clang; the checkout's own build is left alone), and runs
tests/river/test_kernel.py and tests/river/test_kernel_safety.py (their subprocesses too) with the
sanitizer's runtime preloaded into the stock interpreter. Any out-of-bounds read or write, use after free
or double free in the kernel aborts the process and fails the run. Leak checking is off: the interpreter
itself keeps memory until exit. Exit status: pytest's (0 when every test passed).

Needs a C compiler with libasan (``gcc -print-file-name=libasan.so`` must name a file).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ["tests/river/test_kernel.py", "tests/river/test_kernel_safety.py"]


def build(work: Path, cc: str) -> None:
    """Compile the kernel into ``work``'s package with AddressSanitizer (the flags of setup.py plus ASan's)."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    src = work / "streamdp/river/_kernel.c"
    out = src.with_name("_kernel" + suffix)
    cmd = [cc, "-shared", "-fPIC", "-O1", "-g", "-ffp-contract=off", "-fsanitize=address", "-fno-omit-frame-pointer"]
    subprocess.run([*cmd, "-I" + sysconfig.get_paths()["include"], str(src), "-o", str(out)], check=True)


def libasan(cc: str) -> str:
    path = subprocess.run(
        [cc, "-print-file-name=libasan.so"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not os.path.isabs(path) or not os.path.exists(path):
        raise SystemExit(f"{cc} has no libasan.so (got {path!r}): install the compiler's sanitizer runtime")
    return path


def main(argv: list[str]) -> int:
    cc = os.environ.get("CC", "gcc")
    if shutil.which(cc) is None:
        raise SystemExit(f"no C compiler {cc!r} (set CC)")
    with tempfile.TemporaryDirectory(prefix="streamdp-asan-") as tmp:
        work = Path(tmp)
        files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        for name in filter(None, files.decode().split("\0")):
            if (ROOT / name).is_file():
                (work / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, work / name)
        build(work, cc)
        env = {
            **os.environ,
            "LD_PRELOAD": libasan(cc),
            "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:allocator_may_return_null=1",
            "PYTHONPATH": str(work),
            "STREAMDP_NO_KERNEL": "",
        }
        env.pop("STREAMDP_NO_KERNEL")
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q", *TESTS, *argv]
        check = (
            "from streamdp.river import kernel; assert kernel.available(), 'kernel not built'; print(kernel.__file__)"
        )
        subprocess.run([sys.executable, "-c", check], cwd=work, env=env, check=True)
        return subprocess.run(cmd, cwd=work, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
