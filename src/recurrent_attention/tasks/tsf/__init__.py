"""Time-series forecasting with the Time-Series-Library protocol (Aaren Tables 3 and 5)."""
