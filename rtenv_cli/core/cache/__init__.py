"""Cache control: list, garbage-collect and purge the agent's store and Ray nodes' caches."""
