"""Rolling upgrades: the previous release and HEAD side by side on one store (issue 39)."""
