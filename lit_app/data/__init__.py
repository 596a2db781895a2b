"""Prompt datasets (datasets.py) and the shipped case studies beside it (*.jsonl, package data)."""
