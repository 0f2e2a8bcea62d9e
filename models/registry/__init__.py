"""What the workers can measure, declared once and read by the control plane without importing torch: the workloads
and the step settings' vocabularies (workloads.py), the collectives (collectives.py), the engines that average
gradients (engines.py), and what a workload refuses (rules.py). A workload's version is part of every cell id."""
