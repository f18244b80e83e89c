"""Run summaries and the tables built from them."""
