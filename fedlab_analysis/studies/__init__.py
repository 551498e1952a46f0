"""Studies: work that trains runs to answer a question (the coupled stability retraining); they sit above the
probes and the trainer and may import both."""
