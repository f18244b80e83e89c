"""Word-level language modelling with a carried state (CRT Tables 2–5, 9–12)."""
