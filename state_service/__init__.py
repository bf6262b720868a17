"""The state service: agents, memory blocks, compiled prompts (DESIGN.md §3)."""
