"""The README is a page a newcomer reads in two minutes, every relative link of the docs resolves, every project file
the docs name exists, and every config they show loads as Hydra reads it."""

import re
import textwrap

import pytest

from tests.conftest import ROOT

FENCE = re.compile(r"^\s*```[\w-]*\s*$")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "dataset/README.md",
    ROOT / "tests/practice/corpora/README.md",
]


def anchors(page) -> set[str]:
    """GitHub's anchors of a page's headings (code blocks left out)."""
    found, fence, seen = set(), False, {}
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fence = not fence
        heading = re.match(r"^#{1,6} (.*)$", line)
        if heading and not fence:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).replace("`", "").strip().lower()).replace(" ", "-")
            found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
            seen[slug] = seen.get(slug, 0) + 1
    return found


def test_the_readme_is_short_and_starts_with_the_two_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text) <= 15_000, len(text)
    first = "\n".join(text.splitlines()[:30])
    assert "make demo" in first and "make test" in first
    assert len(re.findall(r"\b20\d\d-\d\d-\d\d\b", text)) <= 3


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif fragment and destination.suffix == ".md" and fragment not in anchors(destination):
            broken.append(f"{target}: no such heading")
    assert not broken, broken


# A path into the project's own code, named in a page, a config's comment or a docstring (never one a user or a run
# writes: those live under configs/ and runs/, and Youtu-Agent's guide puts verifiers in utu/practice/verify/).
OWN_PATH = re.compile(r"(?<![\w/.-])((?:benchmarks|scripts|tests)/[\w./-]*\.(?:py|yaml|json|jsonl|sh|md))")
NAMING = [*PAGES, *ROOT.glob("configs/**/*.yaml"), *ROOT.glob("scripts/**/*.py"), *ROOT.glob("benchmarks/**/*.py")]


def test_every_file_of_the_project_named_in_its_pages_and_comments_exists():
    missing = []
    for page in NAMING:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            missing += [
                f"{page.relative_to(ROOT)}:{number}: {path}"
                for path in OWN_PATH.findall(line)
                if not (ROOT / path).exists()
            ]
    assert not missing, missing


# A config shown in a page: a ```yaml block, or a shell heredoc (how the guide writes its configs; the data files it
# writes so pass the check as they hold no package line).
SHOWN_CONFIG = re.compile(r"^( *)```yaml\n(.*?)^\1```$|<<'EOF'\n(.*?)^EOF$", re.DOTALL | re.MULTILINE)


def test_a_config_shown_in_the_docs_has_its_package_line_where_hydra_reads_it(tmp_path):
    """Hydra reads `# @package` only in a config's header: the loader's own check passes every config shown."""
    from utu.config.loader import check_package_line

    shown = 0
    for page in PAGES:
        for block in SHOWN_CONFIG.finditer(page.read_text(encoding="utf-8")):
            path = tmp_path / f"shown{shown}.yaml"
            path.write_text(textwrap.dedent(block.group(2) or block.group(3)), encoding="utf-8")
            check_package_line(path)  # raises ConfigError, naming the line
            shown += 1
    assert shown >= 3
