"""50 Hz policy node with safety filter, live checkpoint swaps and tick logging."""
