"""50 Hz GRU latent encoder node and the motion-capture pose filter node."""
