"""The library's records under ``[devices] state_path``: the only code
that writes there. Nothing here touches the host."""
