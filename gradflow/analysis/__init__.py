"""The analysis: structure, numbers and rules -> Report."""
