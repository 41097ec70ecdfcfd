"""Object storage: `filesystem` (one code path over pyarrow file systems, local and S3), `keys` (every
object key the lake uses, built and parsed back in one place) and `manifests` (the manifest files' format)."""
