"""The pattern definitions, one module per layer; each module exports `PATTERNS` in the order the
reports list them. See `diagnosis.catalog` for what a definition holds."""
