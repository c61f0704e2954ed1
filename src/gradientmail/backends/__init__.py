"""Built-in backends, one module per URL scheme. Each is imported only when its scheme is used."""
