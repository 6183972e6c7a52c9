"""Facts a checkpoint owns, read from its own files (K3, K8, K20, M1): pure functions over parsed JSON.

MTP heads come from the weight index, which is the seed's evidence: "The new checkpoint ships no MTP heads —
enorm, hnorm, e_proj, h_proj and shared_head are absent from the weight index, and mtp.{0,1,2}.* now carries
the DSpark-style main_norm/main_proj structure". `num_nextn_predict_layers` in config.json says how many draft
layers there are, not whether they are MTP heads.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

MTP_HEAD_PARTS = ("enorm", "hnorm", "e_proj", "h_proj", "shared_head")
_MTP_LAYER = re.compile(r"(?:^|\.)mtp\.(\d+)\.(?:.*\.)?(" + "|".join(MTP_HEAD_PARTS) + r")(?:\.|$)")

Quantization = Literal["mxfp4", "nvfp4", "none"]


def mtp_heads_from_index(weight_names: Iterable[str]) -> int:
    """MTP layers whose head weights (enorm/hnorm/e_proj/h_proj/shared_head) are in the weight index."""
    return len({m[1] for name in weight_names if (m := _MTP_LAYER.search(name))})


def quantization_from_config(config: Mapping[str, Any]) -> Quantization | None:
    """NVFP4 / MXFP4 where config.json's quantization_config says so; None where it does not (keep the catalogue's)."""
    q = config.get("quantization_config")
    if not isinstance(q, Mapping):
        return None
    said = " ".join(str(q.get(k, "")) for k in ("quant_algo", "quant_method", "expert_dtype", "moe_quant_algo"))
    said = said.lower()
    if "nvfp4" in said or "modelopt_fp4" in said:
        return "nvfp4"
    if "mxfp4" in said or "fp4" in str(q.get("expert_dtype", "")).lower():
        return "mxfp4"
    return None
