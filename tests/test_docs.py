"""The docs site's examples run as written, and its build hooks place links and includes right."""

import contextlib
import importlib.util
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(encoding="utf-8"), re.S | re.M)


def test_getting_started_example_runs():
    (block,) = python_blocks(ROOT / "docs/getting-started.md")
    assert len([line for line in block.splitlines() if line.strip()]) <= 10
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "getting-started.md", "exec"), {})
    accuracy = float(re.match(r"accuracy (\S+),", out.getvalue()).group(1))
    assert accuracy > 0.7  # above the majority class's share of the test rows (about 0.6)


@pytest.mark.slow
def test_river_tutorial_example_runs():
    river = pytest.importorskip("river")
    (block,) = python_blocks(ROOT / "docs/tutorials/river.md")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "river.md", "exec"), {})
    accuracy = float(re.match(r"Accuracy: (\S+)%", out.getvalue()).group(1)) / 100
    labels = [y for _, y in river.datasets.synth.SEA(seed=1).take(20_000)]
    majority = max(labels.count(True), labels.count(False)) / len(labels)
    assert accuracy > majority + 0.05


@pytest.fixture(scope="module")
def hooks():
    pytest.importorskip("mkdocs")
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "tools/mkdocs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_links_resolve_as_repository_paths(hooks):
    text = (
        "[a](../benchmarks/results/tally.md) [b](decisions/001-pruning-bar.md#why) [c](#exactly-once) "
        "[d](../streamdp/forest/model.py) [e](https://x.org/y)\n```\n[f](g.md)\n```\n"
    )
    # docs/service.md's text, included in the page docs/howto/operate.md
    got = hooks.rewrite_links(text, "docs/service.md", "howto/operate.md")
    assert got == (
        "[a](../benchmarks/results/tally.md) [b](../decisions/001-pruning-bar.md#why) [c](../service.md#exactly-once) "
        "d [e](https://x.org/y)\n```\n[f](g.md)\n```\n"
    )
    # the same text on its own page keeps its in-page anchor
    assert "[c](#exactly-once)" in hooks.rewrite_links(text, "docs/service.md", "service.md")


def test_include_takes_one_section_with_its_subsections(hooks):
    text = "# T\n## A\na\n### A1\nb\n## B\nc\n"
    assert hooks._section(text, "a", "x.md") == "## A\na\n### A1\nb\n"
    assert hooks._shift_headings("# T\n## A\n", 2) == "## T\n### A\n"
    with pytest.raises(ValueError, match="no section #z"):
        hooks._section(text, "z", "x.md")


def test_docstring_markup_becomes_markdown():
    pytest.importorskip("griffe")
    spec = importlib.util.spec_from_file_location("griffe_roles", ROOT / "tools/griffe_roles.py")
    roles = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(roles)
    text = "Intro.\n\n>>> f([1, 2])\n[2, 3]\n\nAfter.\n\n```\n>>> kept\n```"
    assert roles.fence_doctests(text) == (
        "Intro.\n\n```pycon\n>>> f([1, 2])\n[2, 3]\n```\n\nAfter.\n\n```\n>>> kept\n```"
    )
    import griffe

    module = griffe.visit("m", Path("m.py"), 'class C:\n    """See :meth:`fit` and :func:`~streamdp.a.b`."""\n')
    roles.RolesToMarkdown().on_instance(obj=module["C"])
    assert module["C"].docstring.value == (
        'See <autoref identifier="m.C.fit" optional><code>fit</code></autoref> and '
        '<autoref identifier="streamdp.a.b" optional><code>b</code></autoref>.'
    )


def test_learners_per_person_example_runs():
    """The library's per-person path is where the README points (a new user looked for it on PrivateForest)."""
    (block,) = [b for b in python_blocks(ROOT / "docs/learners.md") if "privacy_id" in b]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "learners.md", "exec"), {})
    assert out.getvalue().count("'yes'") + out.getvalue().count("'no'") == 2
