"""The command line. The only package that imports click and rich."""
