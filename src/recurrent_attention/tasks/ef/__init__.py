"""Event forecasting: THP-style embeddings, any backbone, a log-normal mixture head (Aaren Table 2)."""
