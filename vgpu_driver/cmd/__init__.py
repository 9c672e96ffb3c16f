"""Command-line entry points: parse, call the facade, print."""
