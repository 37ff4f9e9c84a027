"""Evaluation: run an agent on a data set K times per question, judge, and report honest metrics."""
