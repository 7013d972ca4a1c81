"""The model layer: YAML model files -> validated spec -> lazy tape."""
