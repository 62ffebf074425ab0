"""The bundled rule packs (YAML), shipped inside the wheel as package data."""
