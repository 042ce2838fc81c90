"""What the launch files do: checked arguments, several LiDARs, one line saying why on failure."""
