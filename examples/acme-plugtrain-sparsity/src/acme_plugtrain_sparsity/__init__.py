"""acme-plugtrain-sparsity: a third-party plugtrain sparsity algorithm (RandomPrune)."""
