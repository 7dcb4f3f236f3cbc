"""A local OIDC issuer that signs Google-shaped ID tokens and serves its certs like Google does."""
