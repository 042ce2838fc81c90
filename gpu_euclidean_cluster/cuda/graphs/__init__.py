"""CUDA graphs: device work as data (launch lists), issued one by one or captured."""
