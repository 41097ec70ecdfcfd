"""merge: small objects into range objects (DESIGN §5)."""
