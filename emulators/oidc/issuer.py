"""The signing key of the local OIDC issuer: mints Google-shaped RS256 ID tokens.

Tokens carry the claims Google puts on Cloud Scheduler and Pub/Sub push tokens (`iss`, `aud`,
`email`, `email_verified`, `iat`, `exp`, `sub`, `azp`), and `certs()` has the exact shape of
https://www.googleapis.com/oauth2/v1/certs, so `google.oauth2.id_token.verify_token` checks them
with nothing but a different `certs_url`.
"""

from __future__ import annotations

import datetime
import hashlib
import threading
import time
import uuid

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from google.auth import crypt, jwt

GOOGLE_ISSUER = "https://accounts.google.com"

# Google's certs are valid for about two weeks; ours only need to outlive a local session.
_CERT_VALIDITY = datetime.timedelta(days=30)


def subject_for(email: str) -> str:
    """A stable numeric subject per email, shaped like a Google account's unique ID."""
    digest = hashlib.sha256(email.encode("utf-8")).digest()
    return "1" + str(int.from_bytes(digest[:8], "big") % 10**20).zfill(20)


class Issuer:
    """An RSA 2048 key with a self-signed certificate, and the tokens it signs."""

    def __init__(self, kid: str | None = None) -> None:
        self.kid = kid or uuid.uuid4().hex
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._cert_pem = _self_signed_cert(key).public_bytes(serialization.Encoding.PEM).decode()
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        self._signer = crypt.RSASigner.from_string(key_pem, key_id=self.kid)
        # The signer is shared by server threads; signing is cheap, so one lock is enough.
        self._lock = threading.Lock()

    def mint(
        self,
        audience: str,
        email: str,
        *,
        lifetime_s: int = 3600,
        now: float | None = None,
        extra_claims: dict[str, object] | None = None,
    ) -> str:
        """An RS256 JWT for `email` addressed to `audience`; `extra_claims` override any claim."""
        issued_at = int(time.time() if now is None else now)
        subject = subject_for(email)
        claims: dict[str, object] = {
            "iss": GOOGLE_ISSUER,
            "aud": audience,
            "azp": subject,
            "sub": subject,
            "email": email,
            "email_verified": True,
            "iat": issued_at,
            "exp": issued_at + lifetime_s,
        }
        claims.update(extra_claims or {})
        with self._lock:
            token = jwt.encode(self._signer, claims, header={"alg": "RS256"}, key_id=self.kid)
        return token.decode("ascii")

    def certs(self) -> dict[str, str]:
        """`{kid: PEM certificate}`, the shape of Google's oauth2/v1/certs document."""
        return {self.kid: self._cert_pem}


def _self_signed_cert(key: rsa.RSAPrivateKey) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "deferred-jobs-local-oidc")])
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _CERT_VALIDITY)
        .sign(key, hashes.SHA256())
    )
