"""The ``gpu-euclidean-cluster`` CLI (:mod:`.cli`) and its sub-commands, one module each."""
