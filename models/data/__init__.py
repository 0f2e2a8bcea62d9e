"""Input pipelines for real data (ImageNet layouts), one module per framework."""
