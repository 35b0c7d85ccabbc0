"""The judge phase: gate kinds (``kinds/``), each a rule that plans its arms and judges them."""
