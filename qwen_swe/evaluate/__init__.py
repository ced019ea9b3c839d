"""Evaluation without training: SWE-bench predictions in and out, graded by the same grader as training."""
