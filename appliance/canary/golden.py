"""The golden probes (healthchecks/canary.yaml), loaded strictly into typed values."""

from __future__ import annotations

import random
import re
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Endpoint = Literal["chat", "completions"]


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KnownAnswer(_Data):
    id: str = Field(pattern=r"^[a-z0-9-]+$")
    endpoint: Endpoint
    prompt: str = Field(min_length=1)
    accept: str
    max_tokens: int = Field(ge=1, le=256)

    @field_validator("accept")
    @classmethod
    def _compiles(cls, value: str) -> str:
        re.compile(value)
        return value

    def right(self, text: str) -> bool:
        return re.search(self.accept, text, re.IGNORECASE) is not None


class Message(_Data):
    role: Literal["system", "user", "assistant"]
    content: str


class Needle(_Data):
    completions: str
    chat: list[Message] = Field(min_length=1)
    max_tokens: int = Field(ge=4, le=256)

    def chat_messages(self, **values: str) -> list[dict[str, str]]:
        return [{"role": m.role, "content": m.content.format(**values)} for m in self.chat]


class SharedPrefix(_Data):
    template: str
    max_tokens: int = Field(ge=4, le=256)


class LongDecode(_Data):
    completions: str
    chat: str


class Golden(_Data):
    schema_: Literal[1] = Field(alias="schema")
    known_answers: list[KnownAnswer] = Field(min_length=1)
    needle: Needle
    shared_prefix: SharedPrefix
    long_decode: LongDecode
    code_words: list[str] = Field(min_length=8)
    filler: str = Field(min_length=100)

    def code(self, rng: random.Random) -> str:
        """A fresh code word for a needle: word-word-NN."""
        return "-".join(rng.sample(self.code_words, 2)) + f"-{rng.randint(10, 99)}"


def golden_path() -> Path:
    from appliance.paths import healthchecks_dir

    return healthchecks_dir() / "canary.yaml"


@cache
def load_golden(path: Path | None = None) -> Golden:
    from appliance.yamlstrict import load_data_table

    return load_data_table(path or golden_path(), Golden, "golden-probe table")
