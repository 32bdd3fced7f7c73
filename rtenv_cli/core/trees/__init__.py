"""Content-addressed working_dir/py_modules trees in a Ray cluster's GCS KV: the format, the
publish (push), the node's materialization (rtenv's Ray plugin) and the gc."""
