"""Ray 2.60-identical packaging of working_dir / py_modules: ignore rules, walk, hash, zip."""
