"""Compiler passes, one per file; each is a pure function of a graph (and options)."""
