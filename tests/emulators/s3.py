"""Rigs for the s3 backend and the emulator(s) behind them (not yet built)."""

RIGS: dict[str, str] = {}
