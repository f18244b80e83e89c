"""Decision Transformer on D4RL-schema offline data, scored in real MuJoCo environments (Aaren Table 1)."""
