"""fedlab_analysis: one compact federated trainer for the FedSMOO / FedLESAM / FedCM / FedALS /
FedInit family, self-describing checkpoints, and probes that put them under a microscope."""
__version__ = "0.1.0"
