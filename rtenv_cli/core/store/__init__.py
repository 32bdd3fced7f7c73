"""The crash-safe store on one node: packages, blobs, manifests and environments, their index,
safe unpacking, Ray's content hash, and the builders. The agent's server and every local command
share it."""
