"""The serving certificate: the webhook's own PKI, where it is kept, and its live TLS context.

Nothing imported here at package level: the serving process must not import `cryptography`
(`pki`), which only the certificate child process (`process`) loads."""
