"""Rigs for the azure backend and the emulator(s) behind them (not yet built)."""

RIGS: dict[str, str] = {}
