"""Parameters of the node and the tools: specs, descriptors, settings, Autoware's names."""
