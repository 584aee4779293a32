"""Pair presets (presets.json), installed inside the package as `edgespec.models` so that a wheel carries them."""
