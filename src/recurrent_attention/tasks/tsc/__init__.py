"""Time-series classification on the UEA archive with the Time-Series-Library protocol (Aaren Table 4)."""
