"""Graded answers to the exercises (same module and function names as exercises/)."""
