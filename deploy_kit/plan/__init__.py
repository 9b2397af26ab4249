"""Pure sizing maths: no I/O beyond reading a model's config.json when asked to."""
