"""The serving certificate: the webhook's own PKI (`pki`), where its certificate is kept
(`store`), and the live TLS context (`tls`)."""
