"""Validation of an `azure-credential` Secret: `AZURE_STORAGE_ACCOUNT` and exactly one way in:

- a shared key: `AZURE_STORAGE_KEY` (base64, as the portal's "Access keys" page shows it);
- a SAS token: `AZURE_STORAGE_SAS_TOKEN` (the query string after `?`, signed: it has `sig=`);
- keyless (Azure workload identity): `AZURE_CLIENT_ID` and `AZURE_TENANT_ID`; pods get a
  projected ServiceAccount token that Azure's SDKs exchange with Entra ID for the identity's
  access token.

The names are the Azure CLI's for a storage account and azidentity's for workload identity.
A Secret with two ways in is refused: which one a tool would use depends on its credential
chain, not on what the user meant. Problems name the key and what is expected, never the value.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import re
import urllib.parse
from collections.abc import Mapping

from gpu_admission.names import (
    AZURE_CLIENT_ID,
    AZURE_KEYS,
    AZURE_STORAGE_ACCOUNT,
    AZURE_STORAGE_KEY,
    AZURE_STORAGE_SAS_TOKEN,
    AZURE_TENANT_ID,
)
from webhooks.credentials.problems import Problem
from webhooks.credentials.secret_data import text_values

KEYLESS_FORM = (AZURE_CLIENT_ID, AZURE_TENANT_ID)
# Storage account names: 3 to 24 lowercase letters and digits (Azure's naming rules).
_ACCOUNT = re.compile(r"[a-z0-9]{3,24}")
_GUID = re.compile(r"[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")
# A tenant is named by its id or by one of its domains (contoso.onmicrosoft.com).
_TENANT_DOMAIN = re.compile(r"([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}")


def is_keyless(keys: frozenset[str] | set[str]) -> bool:
    """The keyless form: an identity to act as with the pod's token, and neither key nor SAS."""
    return (
        AZURE_CLIENT_ID in keys
        and AZURE_STORAGE_KEY not in keys
        and AZURE_STORAGE_SAS_TOKEN not in keys
    )


def _unknown_key(key: str) -> Problem:
    matches = difflib.get_close_matches(key.upper(), AZURE_KEYS, n=1, cutoff=0.6)
    hint = f"did you mean {matches[0]}? " if matches else ""
    return Problem(
        key, "", f"is not an azure-credential key; {hint}allowed keys: {', '.join(AZURE_KEYS)}"
    )


def validate_azure(data: Mapping[str, bytes]) -> list[Problem]:
    """Problems with an azure-credential Secret's decoded data; empty when it is well formed."""
    problems = [_unknown_key(key) for key in sorted(data) if key not in AZURE_KEYS]
    problems += _form_problems(set(data))
    text, unreadable = text_values(data, AZURE_KEYS)
    return problems + unreadable + _format_problems(text)


def _form_problems(keys: set[str]) -> list[Problem]:
    """Which way in the Secret uses, and what it lacks (or has twice)."""
    problems = []
    if AZURE_STORAGE_ACCOUNT not in keys:
        problems.append(
            Problem(AZURE_STORAGE_ACCOUNT, "", "is required: the storage account to read from")
        )
    ways = [
        name
        for name, present in (
            (AZURE_STORAGE_KEY, AZURE_STORAGE_KEY in keys),
            (AZURE_STORAGE_SAS_TOKEN, AZURE_STORAGE_SAS_TOKEN in keys),
            (f"{AZURE_CLIENT_ID} with {AZURE_TENANT_ID}", bool(keys & set(KEYLESS_FORM))),
        )
        if present
    ]
    if len(ways) > 1:
        problems.append(
            Problem(
                "",
                "",
                f"the Secret holds more than one way in ({' and '.join(ways)}); keep exactly "
                f"one: {AZURE_STORAGE_KEY}, {AZURE_STORAGE_SAS_TOKEN}, or {AZURE_CLIENT_ID} with "
                f"{AZURE_TENANT_ID} (keyless)",
            )
        )
    elif not ways:
        problems.append(
            Problem(
                "",
                "",
                f"the Secret holds no way in; add {AZURE_STORAGE_KEY} (the account key), "
                f"{AZURE_STORAGE_SAS_TOKEN} (a SAS token), or {AZURE_CLIENT_ID} with "
                f"{AZURE_TENANT_ID} (keyless, Azure workload identity)",
            )
        )
    elif keys & set(KEYLESS_FORM) and not set(KEYLESS_FORM) <= keys:
        missing = AZURE_TENANT_ID if AZURE_CLIENT_ID in keys else AZURE_CLIENT_ID
        problems.append(
            Problem(
                missing, "", f"is required: keyless access names both {' and '.join(KEYLESS_FORM)}"
            )
        )
    return problems


def _format_problems(text: Mapping[str, str]) -> list[Problem]:
    problems = []
    account = text.get(AZURE_STORAGE_ACCOUNT)
    if account is not None and not _ACCOUNT.fullmatch(account):
        problems.append(
            Problem(
                AZURE_STORAGE_ACCOUNT,
                "",
                "must be a storage account name: 3 to 24 lowercase letters and digits "
                "(the account's name, not its URL)",
            )
        )
    key = text.get(AZURE_STORAGE_KEY)
    if key is not None and not _is_base64(key):
        problems.append(
            Problem(
                AZURE_STORAGE_KEY,
                "",
                "must be base64, as the storage account's Access keys page shows it (key1 or "
                "key2, not the connection string)",
            )
        )
    sas = text.get(AZURE_STORAGE_SAS_TOKEN)
    if sas is not None:
        problem = sas_problem(sas)
        if problem:
            problems.append(Problem(AZURE_STORAGE_SAS_TOKEN, "", problem))
    client = text.get(AZURE_CLIENT_ID)
    if client is not None and not _GUID.fullmatch(client):
        problems.append(
            Problem(
                AZURE_CLIENT_ID,
                "",
                "must be the managed identity's or app registration's client id, a GUID like "
                "00000000-0000-0000-0000-000000000000",
            )
        )
    tenant = text.get(AZURE_TENANT_ID)
    if tenant is not None and not (_GUID.fullmatch(tenant) or _TENANT_DOMAIN.fullmatch(tenant)):
        problems.append(
            Problem(
                AZURE_TENANT_ID,
                "",
                "must be the Entra ID tenant's id (a GUID) or one of its domains, like "
                "contoso.onmicrosoft.com",
            )
        )
    return problems


def _is_base64(value: str) -> bool:
    try:
        return bool(base64.b64decode(value, validate=True))
    except (binascii.Error, ValueError):
        return False


def sas_problem(token: str) -> str | None:
    """Why a SAS token cannot work (None when it looks right); never quotes the token."""
    if "://" in token:
        return "must be the SAS token alone (the part after ? in a SAS URL), not the whole URL"
    fields = urllib.parse.parse_qs(token.removeprefix("?"), keep_blank_values=True)
    if not fields.get("sig", [""])[0]:
        return (
            "is not a signed SAS token: it has no sig= field; copy the whole token as the "
            "portal or `az storage container generate-sas` gives it"
        )
    if not fields.get("sv", [""])[0]:
        return "has no sv= field (the signed version); copy the whole token"
    return None
