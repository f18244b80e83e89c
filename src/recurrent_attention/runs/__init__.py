"""The run lifecycle: a run's identity (config hash), its folder lock, exact resume, sweep failures."""
