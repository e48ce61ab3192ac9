"""The webhook signing key, shared by the webhook adapter and the channel configuration
(which refuses a bad secret at load time): a module of its own, so that the adapter can
import its configuration without the configuration importing the adapter."""

from __future__ import annotations

import base64
import binascii

SECRET_PREFIX = "whsec_"


def signing_key(secret: str) -> bytes:
    """The HMAC key: base64-decoded after a ``whsec_`` prefix, else the secret's UTF-8 bytes.

    Raises ``ValueError`` for an empty secret or a ``whsec_`` secret that is not base64.
    """
    if secret.startswith(SECRET_PREFIX):
        encoded = secret[len(SECRET_PREFIX) :]
        try:
            key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("whsec_ secret is not valid base64") from None
    else:
        key = secret.encode()
    if not key:
        raise ValueError("webhook secret is empty")
    return key
