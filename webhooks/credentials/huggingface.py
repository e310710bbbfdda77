"""Validation of a `huggingface-credential` Secret: `HF_TOKEN`, the access token huggingface_hub
reads from the environment. The Hub's user access tokens are `hf_` and 34 letters and digits
(older ones `api_...`); an on-premises hub may issue other shapes, so only what cannot be a token
is refused: no `hf_`/`api_` start, whitespace, or a value too short or too long to be one. The
problems never quote the token.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gpu_admission.names import HF_TOKEN
from webhooks.credentials.problems import Problem
from webhooks.credentials.secret_data import text_values

_TOKEN = re.compile(r"(hf_|api_)[A-Za-z0-9]{20,200}")


def validate_huggingface(data: Mapping[str, bytes]) -> list[Problem]:
    problems = [
        Problem(key, "", f"is not a huggingface-credential key; the only key is {HF_TOKEN}")
        for key in sorted(data)
        if key != HF_TOKEN
    ]
    if HF_TOKEN not in data:
        return [
            *problems,
            Problem(HF_TOKEN, "", "is required: a Hugging Face access token (hf_...)"),
        ]
    text, unreadable = text_values(data, (HF_TOKEN,))
    problems += unreadable
    token = text.get(HF_TOKEN)
    if token is not None and not _TOKEN.fullmatch(token):
        problems.append(
            Problem(
                HF_TOKEN,
                "",
                "must be a Hugging Face access token: hf_ followed by letters and digits, as "
                "huggingface.co/settings/tokens shows it (not the user name or password)",
            )
        )
    return problems
