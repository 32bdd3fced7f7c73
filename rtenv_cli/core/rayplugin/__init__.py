"""rtenv on Ray's nodes: the `rtenv` runtime_env field (schema), its build on the node's store
(engine, loaded by `rtenv_cli.ray_plugin.RtenvPlugin` in Ray's agent), the node set-up
(`rtenv ray-env`) and the per-node check that the plugin is loaded (nodes)."""
