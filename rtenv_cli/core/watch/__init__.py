"""`rtenv push --watch`: filters, events, debounce, incremental snapshots, zip reuse, delta push."""
