"""`rtenv explain`: the environment a Ray 2.60.0 worker gets for an allocation, offline."""
