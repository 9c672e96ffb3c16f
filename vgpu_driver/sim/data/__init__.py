"""Shipped host descriptions (JSON), served by the simulated hosts."""
