"""MemFS: an agent's memory as committed Markdown files in a git repository (DESIGN.md §3.6)."""
