"""Data shipped with attentived: sample traces and measured profiles (see ATTRIBUTION.md)."""
