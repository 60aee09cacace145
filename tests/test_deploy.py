"""The deploy files hold what they promise: the worker image installs the package with its C kernels.

The image is not built here (no Docker engine needed): the test lays out exactly the files the Dockerfile's
COPY lines copy (after ``.dockerignore``), builds a wheel from them as its ``pip install .`` does, and looks
for the compiled kernels in it.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
KERNELS = ("streamdp/river/_kernel", "streamdp/forest/_route")


def _instructions(text: str) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of a Dockerfile, continuation lines joined and comments dropped."""
    out = []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _ignored(rel: str, patterns: list[str]) -> bool:
    """Whether ``.dockerignore`` leaves out the context path ``rel`` (a path is out when it or a parent matches)."""

    def regex(p: str) -> str:
        out = ""
        for part in re.split(r"(\*\*/|\*|\?)", p.strip("/")):
            out += {"**/": "(.*/)?", "*": "[^/]*", "?": "[^/]"}.get(part, re.escape(part))
        return out

    parts = PurePosixPath(rel).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(re.fullmatch(regex(p), q) for p in patterns for q in prefixes)


def _context_files(src: Path, patterns: list[str]) -> list[Path]:
    if src.is_file():
        return [src]
    return [p for p in sorted(src.rglob("*")) if p.is_file() and not _ignored(p.relative_to(ROOT).as_posix(), patterns)]


def lay_out(dockerfile: Path, into: Path) -> tuple[Path, str]:
    """Copy into ``into`` (standing for the image's /) exactly what the Dockerfile's COPY lines copy from the
    repository (the build context), after ``.dockerignore``. Returns the directory of its ``pip install .``
    and that RUN line."""
    ignore = ROOT / ".dockerignore"
    patterns = [line.strip() for line in (ignore.read_text().splitlines() if ignore.exists() else []) if line.strip()]
    patterns = [p for p in patterns if not p.startswith("#")]
    workdir, install = PurePosixPath("/"), None
    for word, rest in _instructions(dockerfile.read_text()):
        if word == "WORKDIR":
            workdir = workdir / rest
        elif word == "COPY":
            args = shlex.split(rest)
            assert not any(a.startswith("--from") for a in args), "a multi-stage COPY: extend this test"
            args = [a for a in args if not a.startswith("--")]
            sources, dest = args[:-1], workdir / args[-1]
            into_dir = len(sources) > 1 or args[-1].endswith("/")
            for s in sources:
                src = ROOT / s
                assert src.exists(), f"the Dockerfile copies {s}, which the repository does not hold"
                for f in _context_files(src, patterns):
                    if src.is_dir():
                        target = dest / f.relative_to(src).as_posix()
                    else:
                        target = dest / f.name if into_dir else dest
                    out = into / str(target).lstrip("/")
                    out.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(f, out)
        elif word == "RUN" and re.search(r"pip install [^&;]*\s\.(\s|$)", rest):
            install = (workdir, rest)
    assert install is not None, "the Dockerfile runs no `pip install .`"
    return into / str(install[0]).lstrip("/"), install[1]


@pytest.mark.slow
def test_the_image_installs_the_c_kernels_from_exactly_what_the_dockerfile_copies(tmp_path):
    """The Dockerfile did not copy setup.py, so the image had no C kernels (and python:3.11-slim has no compiler):
    a wheel built from exactly the copied files holds both compiled kernels, and the install line fails the
    image's build unless they import."""
    build, run = lay_out(DOCKERFILE, tmp_path / "image")
    copied = {p.relative_to(build).as_posix() for p in build.rglob("*") if p.is_file()}
    assert "setup.py" in copied and "streamdp/river/_kernel.c" in copied and "streamdp/forest/_route.c" in copied
    assert not [p for p in copied if p.endswith(".so")], "compiled in place: .dockerignore must keep them out"
    assert "gcc" in run and "import streamdp.river._kernel, streamdp.forest._route" in run
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "wheels"), str(build)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode and "No matching distribution found for setuptools" in done.stdout + done.stderr:
        pytest.skip("pip cannot fetch the build requirements (setuptools>=77) here")
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (tmp_path / "wheels").glob("streamdp-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for kernel in KERNELS:
        assert any(n.startswith(kernel) and n.endswith((".so", ".pyd")) for n in names), (kernel, names)
    assert "streamdp/data/schemas/congressional-voting.json" in names  # (the package data too)


def test_dockerignore_keeps_build_output_out():
    patterns = ["**/__pycache__", "**/*.so", "build"]
    assert _ignored("streamdp/river/_kernel.cpython-311-x86_64-linux-gnu.so", patterns)
    assert _ignored("streamdp/__pycache__/x.pyc", patterns)
    assert _ignored("build/lib/streamdp/x.py", patterns)
    assert not _ignored("streamdp/river/_kernel.c", patterns)
    assert not _ignored("streamdp/builder.py", patterns)


DEPLOY_DOCS = [
    ROOT / "deploy" / n for n in ("README.md", "streamdp-worker@.service", "compose.yaml", "compose.cluster.yaml")
]


def test_every_acl_user_that_logs_in_has_a_password_in_env_example_and_the_compose_files():
    """env.example had no job-worker password: acl_passwords.py then generated one only its log showed."""
    users = [
        line.split()[1]
        for line in (ROOT / "deploy" / "users.acl").read_text().splitlines()
        if line.startswith("user ") and " on " in line
    ]
    assert "jobworker" in users
    env = (ROOT / "deploy" / "env.example").read_text()
    for user in users:
        var = f"STREAMDP_{user.upper()}_PASSWORD"
        assert re.search(rf"^{var}=\S", env, re.M), f"env.example has no {var}"
        for compose in ("compose.yaml", "compose.cluster.yaml"):
            assert f"{var}: ${{{var}:?" in (ROOT / "deploy" / compose).read_text(), (compose, var)


def test_deploy_docs_install_from_the_checkout_and_name_files_that_ship():
    """They said `pip install streamdp` (no index has it) and `--schema votes.json` (not in the repository)."""
    for doc in [*DEPLOY_DOCS, ROOT / "docs" / "service.md"]:
        text = doc.read_text()
        assert not re.search(r"pip install streamdp(\s|$)", text), f"{doc.name}: streamdp is on no package index"
        for schema in re.findall(r"--schema (\S+\.json)", text):
            assert (ROOT / schema).is_file(), f"{doc.name}: --schema {schema} is not in the repository"


def test_the_service_docs_make_the_csv_they_push(tmp_path):
    """docs/service.md pushed votes.csv, which nothing made: its own command writes it from the bundled data."""
    (line,) = [ln for ln in (ROOT / "docs" / "service.md").read_text().splitlines() if "to_csv('votes.csv')" in ln]
    assert "streamdp push votes votes.csv --label party" in (ROOT / "docs" / "service.md").read_text()
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    subprocess.run(
        line.replace("python3", shlex.quote(sys.executable), 1), shell=True, cwd=tmp_path, env=env, check=True
    )
    rows = (tmp_path / "votes.csv").read_text().splitlines()
    assert len(rows) == 436 and rows[0].endswith(",party")


def test_compose_files_are_valid_yaml_with_the_monitoring_profile():
    """A plain `file: ${VAR:?make one: ...}` (a colon and a space inside an unquoted value) made compose.yaml
    invalid YAML; every compose file parses, and the monitoring services are opt-in (a profile)."""
    yaml = pytest.importorskip("yaml")
    for name in ("compose.yaml", "compose.cluster.yaml"):
        services = yaml.safe_load((ROOT / "deploy" / name).read_text())["services"]
        for monitoring in ("exporter", "prometheus", "grafana"):
            assert services[monitoring]["profiles"] == ["monitoring"], (name, monitoring)
        assert "worker" in services and "profiles" not in services["worker"]
    env = (ROOT / "deploy" / "env.example").read_text()
    assert re.search(r"^GRAFANA_ADMIN_PASSWORD=\S", env, re.M)


def test_every_streamdp_service_in_compose_names_its_redis_by_the_variable_the_cli_reads():
    """The exporter's variable was spelt `redis_URL` (`redis-1_URL` in the cluster file): it fell back to
    localhost inside its container and never reached Redis as the worker user."""
    yaml = pytest.importorskip("yaml")
    for name in ("compose.yaml", "compose.cluster.yaml"):
        services = yaml.safe_load((ROOT / "deploy" / name).read_text())["services"]
        for svc, spec in services.items():
            command = spec.get("command") or spec.get("entrypoint") or []
            if "streamdp" not in " ".join(map(str, command)) and not svc.startswith("worker"):
                continue
            env = spec.get("environment") or {}
            keys = set(env) if isinstance(env, dict) else {e.split("=", 1)[0] for e in env}
            assert "REDIS_URL" in keys and not {k for k in keys if k.lower().endswith("_url") and k != "REDIS_URL"}, (
                name,
                svc,
                keys,
            )
