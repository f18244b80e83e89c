"""Video action recognition: TimeSformer and CR-ViT on Toyota Smarthome (CRT section 5.3, Table 7)."""
